package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"computerd/client"
	"computerd/computerd/api/apitest"
	"computerd/mcpserver"
)

// mustAPI serves a fresh store's API (no exec) and returns a client for
// tenant alice, who owns workspaces w and v.
func mustAPI(tb testing.TB) *client.Client { return apitest.Serve(tb, "w", "v") }

// mustSession connects an SDK client to the server in memory.
func mustSession(tb testing.TB, s *mcp.Server) *mcp.ClientSession {
	tb.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// schemaOf is one listed tool's input schema.
type schemaOf struct {
	Properties map[string]any `json:"properties"`
	Required   []string       `json:"required"`
}

func TestSchemas(t *testing.T) {
	c := mustAPI(t)
	for _, tc := range []struct {
		name, ws     string
		needWS       bool
		keyed, plain string // a keyed tool and one that is not
	}{
		{"with a workspace", "w", false, "exec", "read"},
		{"without", "", true, "write", "fork"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt, err := mustSession(t, mcpserver.New(c, tc.ws)).ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(lt.Tools) != 14 {
				t.Fatalf("%d tools, want 14", len(lt.Tools))
			}
			for _, tool := range lt.Tools {
				b, _ := json.Marshal(tool.InputSchema)
				var s schemaOf
				if err := json.Unmarshal(b, &s); err != nil {
					t.Fatal(err)
				}
				if _, ok := s.Properties["workspace"]; !ok {
					t.Errorf("%s: no workspace argument: %s", tool.Name, b)
				}
				if got := slices.Contains(s.Required, "workspace"); got != tc.needWS {
					t.Errorf("%s: workspace required %v, want %v", tool.Name, got, tc.needWS)
				}
				_, hasKey := s.Properties["key"]
				if want := tool.Name == "exec" || tool.Name == "write" || tool.Name == "edit"; hasKey != want {
					t.Errorf("%s: key argument %v, want %v", tool.Name, hasKey, want)
				}
				if tool.Description == "" || tool.Annotations == nil {
					t.Errorf("%s: no description or annotations", tool.Name)
				}
				if ro := tool.Annotations.ReadOnlyHint; ro == slices.Contains([]string{"write", "edit", "exec", "fork", "restore"}, tool.Name) {
					t.Errorf("%s: read-only hint %v", tool.Name, ro)
				}
			}
		})
	}
}

func TestCalls(t *testing.T) {
	c := mustAPI(t)
	cs := mustSession(t, mcpserver.New(c, "w"))
	bare := mustSession(t, mcpserver.New(c, ""))
	steps := []struct {
		name    string
		cs      *mcp.ClientSession
		tool    string
		args    map[string]any
		want    string
		isError bool
	}{
		{"write in the default", cs, "write", map[string]any{"path": "a.txt", "content": "in w\n"}, "revision 2", false},
		{"write elsewhere", cs, "write", map[string]any{"path": "a.txt", "content": "in v\n", "workspace": "v"}, "revision 2", false},
		{"read the default", cs, "read", map[string]any{"path": "a.txt"}, "1\tin w", false},
		{"read elsewhere", cs, "read", map[string]any{"path": "a.txt", "workspace": "v"}, "1\tin v", false},
		{"bare server, named workspace", bare, "read", map[string]any{"path": "a.txt", "workspace": "v"}, "1\tin v", false},
		{"bare server, no workspace", bare, "read", map[string]any{"path": "a.txt"}, "error (invalid): no workspace", true},
		{"keyed write", cs, "write", map[string]any{"path": "k", "content": "1", "key": "k1"}, "revision 3", false},
		{"keyed write again", cs, "write", map[string]any{"path": "k", "content": "2", "key": "k1"}, "revision 3", false},
		{"read the keyed file", cs, "read", map[string]any{"path": "k"}, "1\t1", false},
		{"workspace not a string", cs, "ls", map[string]any{"workspace": 7}, "error (invalid): bad arguments: workspace", true},
		{"no arguments", cs, "ls", nil, "a.txt\t5\nk\t1\n", false},
		{"exec without a runner", cs, "exec", map[string]any{"command": "true"}, "error (unavailable)", true},
		{"restore", cs, "restore", map[string]any{"rev": 1}, "restored the whole tree from revision 1: revision 4", false},
		{"restored", cs, "ls", nil, "(empty)", false},
		{"unknown revision", cs, "diff", map[string]any{"from": 40}, "error (", true},
	}
	for _, st := range steps {
		res, err := st.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: st.tool, Arguments: st.args})
		if err != nil {
			t.Fatalf("%s: protocol error %v", st.name, err)
		}
		if got := text(res); res.IsError != st.isError || !strings.Contains(got, st.want) {
			t.Fatalf("%s: %q (error %v), want %q (error %v)", st.name, got, res.IsError, st.want, st.isError)
		}
	}
}

// TestUnreachable checks that a computerd out of reach is a tool error.
func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(nil)
	srv.Close()
	cs := mustSession(t, mcpserver.New(client.New(srv.URL, "t"), "w"))
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "log"})
	if err != nil {
		t.Fatal(err)
	}
	if got := text(res); !res.IsError || !strings.HasPrefix(got, "error (unavailable)") {
		t.Fatalf("log against a closed port: %q (error %v)", got, res.IsError)
	}
}

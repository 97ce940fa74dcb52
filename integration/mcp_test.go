package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"computerd/computerd/api"
	"computerd/tools"
)

// mcpTools is the MCP list of package tools, the agent's ten first.
var mcpTools = []string{"read", "write", "edit", "ls", "find", "grep", "exec", "exec_wait", "log", "diff", "fork", "restore", "execs", "exec_show"}

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu  sync.Mutex
	got []*mcp.ProgressNotificationParams
}

func (p *progressLog) add(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, req.Params)
}

func (p *progressLog) of(token string) []*mcp.ProgressNotificationParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*mcp.ProgressNotificationParams
	for _, n := range p.got {
		if n.ProgressToken == token {
			out = append(out, n)
		}
	}
	return out
}

// mcpClient connects an MCP client over t and closes it when the test ends.
func mcpClient(t *testing.T, tr mcp.Transport) (*mcp.ClientSession, *progressLog) {
	t.Helper()
	pl := &progressLog{}
	c := mcp.NewClient(&mcp.Implementation{Name: "computerd-test", Version: "v1"}, &mcp.ClientOptions{ProgressNotificationHandler: pl.add})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, pl
}

// stdioTransport runs `agentctl mcp ws` (this test binary playing agentctl).
func (e *env) stdioTransport(token, ws string) mcp.Transport {
	cmd := exec.Command(os.Args[0], "--server", e.d.URL(), "mcp", ws)
	cmd.Env = append(os.Environ(), "AGENTCTL_TEST=1", "COMPUTER_TOKEN="+token)
	cmd.Stderr = os.Stderr
	return &mcp.CommandTransport{Command: cmd}
}

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// httpTransport speaks streamable HTTP to computerd's /v1/mcp.
func (e *env) httpTransport(token, ws string) mcp.Transport {
	return &mcp.StreamableClientTransport{Endpoint: e.d.URL() + "/v1/mcp?workspace=" + ws,
		HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}
}

// call calls a tool and returns its result's text.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, *mcp.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", name, args, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res
}

// structured decodes a result's structured content.
func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}

// TestMCPTools lists and calls every tool through both transports: stdio
// (agentctl mcp) and streamable HTTP (/v1/mcp).
func TestMCPTools(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	transports := []struct {
		name string
		tr   func(ws string) mcp.Transport
	}{
		{"stdio", func(ws string) mcp.Transport { return e.stdioTransport(e.token, ws) }},
		{"http", func(ws string) mcp.Transport { return e.httpTransport(e.token, ws) }},
	}
	for _, tt := range transports {
		t.Run(tt.name, func(t *testing.T) {
			ws := "mcp-" + tt.name
			e.ok("ws", "create", ws)
			cs, _ := mcpClient(t, tt.tr(ws))
			lt, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range lt.Tools {
				names = append(names, tool.Name)
			}
			// The SDK lists tools by name.
			if want := slices.Sorted(slices.Values(mcpTools)); !slices.Equal(names, want) {
				t.Fatalf("tools %v, want %v", names, mcpTools)
			}
			steps := []struct {
				tool string
				args map[string]any
				want string // in the text
			}{
				{"write", map[string]any{"path": "src/a.txt", "content": "one\ntwo\nthree\n"}, "revision 2"},
				{"read", map[string]any{"path": "src/a.txt", "offset": 2}, "2\ttwo\n3\tthree\n"},
				{"edit", map[string]any{"path": "src/a.txt", "old": "two", "new": "TWO"}, "revision 3"},
				{"ls", map[string]any{"path": "src"}, "a.txt\t14"},
				{"find", map[string]any{"name": "*.txt"}, "src/a.txt"},
				{"grep", map[string]any{"pattern": "TW."}, "src/a.txt:2:TWO"},
				{"exec", map[string]any{"command": "cat src/a.txt | wc -l > n.txt; echo done"}, "done\n\n[exit 0; its writes are revision 4]"},
				{"log", map[string]any{"limit": 2}, "4\texec"},
				{"diff", map[string]any{"from": 3, "to": 4}, "+3"},
				{"fork", map[string]any{"name": ws + "-copy"}, "forked " + ws + " at its newest revision into " + ws + "-copy"},
				{"restore", map[string]any{"rev": 2, "path": "src/a.txt"}, "restored src/a.txt from revision 2: revision 5"},
				{"execs", nil, "\texit 0 "},
				{"read", map[string]any{"path": "src/a.txt", "workspace": ws + "-copy"}, "2\tTWO"},
				{"read", map[string]any{"path": "src/a.txt"}, "2\ttwo"},
			}
			for _, st := range steps {
				text, res := call(t, cs, st.tool, st.args)
				if res.IsError || !strings.Contains(text, st.want) {
					t.Fatalf("%s %v: %q (error %v), want it to contain %q", st.tool, st.args, text, res.IsError, st.want)
				}
			}
			// exec_show by the id execs gives.
			text, _ := call(t, cs, "execs", map[string]any{"limit": 1})
			id, _, _ := strings.Cut(text, "\t")
			text, res := call(t, cs, "exec_show", map[string]any{"id": id})
			if res.IsError || !strings.Contains(text, "done\n") || !strings.Contains(text, "command: cat src/a.txt") {
				t.Fatalf("exec_show %s: %q (error %v)", id, text, res.IsError)
			}
			if got := e.tree(ws)["n.txt"]; got != "3\n" {
				t.Fatalf("n.txt = %q, want 3", got)
			}
		})
	}
}

// TestMCPErrors checks that failures are tool results carrying their
// code, not protocol errors, and that a call without a workspace says so.
func TestMCPErrors(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cs, _ := mcpClient(t, e.httpTransport(e.token, "w"))
	bare, _ := mcpClient(t, e.httpTransport(e.token, ""))
	cases := []struct {
		name string
		cs   *mcp.ClientSession
		tool string
		args map[string]any
		want string
	}{
		{"missing file", cs, "read", map[string]any{"path": "nope.txt"}, "error (not_found)"},
		{"unknown workspace", cs, "ls", map[string]any{"workspace": "ghost"}, "error (workspace_not_found)"},
		{"bad argument", cs, "read", map[string]any{"path": "a", "bogus": 1}, "error (invalid)"},
		{"key on a read", cs, "read", map[string]any{"path": "a", "key": "k"}, "error (invalid)"},
		{"escape", cs, "write", map[string]any{"path": "../x", "content": "x"}, "error (invalid_path)"},
		{"edit of a missing file", cs, "edit", map[string]any{"path": "a", "old": "x", "new": "y"}, "error (not_found)"},
		{"no workspace", bare, "ls", nil, "error (invalid): no workspace"},
		{"bad revision", cs, "restore", map[string]any{"rev": 99}, "error ("},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text, res := call(t, tc.cs, tc.tool, tc.args)
			if !res.IsError || !strings.Contains(text, tc.want) {
				t.Fatalf("%s %v: %q (error %v), want an error containing %q", tc.tool, tc.args, text, res.IsError, tc.want)
			}
			code := strings.TrimSuffix(strings.TrimPrefix(strings.Fields(text)[1], "("), "):")
			if got := structured(t, res)["code"]; got != code {
				t.Fatalf("structured code %v, want %q", got, code)
			}
		})
	}
	// The bare server's tools need a workspace: their schema says so.
	lt, err := bare.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(lt.Tools[0].InputSchema)
	if !strings.Contains(string(b), `"workspace"]`) || lt.Tools[0].Name != "diff" {
		t.Fatalf("%s's schema without a default workspace: %s, want workspace required", lt.Tools[0].Name, b)
	}
	if e.head("w") != 1 {
		t.Fatalf("failed calls moved the head to %d", e.head("w"))
	}
}

// TestMCPExecStream checks that an exec's output arrives as progress
// notifications while it runs, in order, and that the result has the
// exit code and revision.
func TestMCPExecStream(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	for _, tr := range []struct {
		name string
		tr   mcp.Transport
	}{{"http", e.httpTransport(e.token, "w")}, {"stdio", e.stdioTransport(e.token, "w")}} {
		t.Run(tr.name, func(t *testing.T) {
			cs, pl := mcpClient(t, tr.tr)
			token := "stream-" + tr.name
			params := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
				"command": "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done; echo x > out-" + tr.name + "; exit 3"}}
			params.SetProgressToken(token)
			var early int
			done := make(chan struct{})
			go func() {
				// Output must arrive while the command runs, not with its end.
				time.Sleep(600 * time.Millisecond)
				early = len(pl.of(token))
				close(done)
			}()
			res, err := cs.CallTool(context.Background(), params)
			if err != nil {
				t.Fatal(err)
			}
			<-done
			var got strings.Builder
			last := 0.0
			for _, n := range pl.of(token) {
				if n.Progress <= last {
					t.Fatalf("progress %v after %v: not increasing", n.Progress, last)
				}
				last = n.Progress
				got.WriteString(n.Message)
			}
			want := "line1\nline2\nline3\nline4\nline5\n"
			if got.String() != want {
				t.Fatalf("progress messages %q, want %q", got.String(), want)
			}
			if early == 0 {
				t.Fatalf("no progress within 600 ms of a command printing every 200 ms")
			}
			sc := structured(t, res)
			if !res.IsError || sc["exit_code"] != 3.0 || sc["rev"] == nil || sc["code"] != "exit" || sc["exec_id"] == "" {
				t.Fatalf("result: error %v, structured %v; want exit 3, a revision, code exit", res.IsError, sc)
			}
			if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, want) || !strings.Contains(text, "[exit 3; its writes are revision") {
				t.Fatalf("result text %q", text)
			}
		})
	}
}

// TestMCPKeyedRetry checks that an exec (and a write) retried with the
// same key runs once and answers the first call's result.
func TestMCPKeyedRetry(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cs, _ := mcpClient(t, e.httpTransport(e.token, "w"))
	args := map[string]any{"command": "echo run >> runs.txt; wc -l < runs.txt", "key": "retry-1"}
	first, r1 := call(t, cs, "exec", args)
	second, r2 := call(t, cs, "exec", args)
	if r1.IsError || r2.IsError || structured(t, r1)["exec_id"] != structured(t, r2)["exec_id"] {
		t.Fatalf("retry: %q then %q, structured %v then %v: want the same exec", first, second, r1.StructuredContent, r2.StructuredContent)
	}
	if got := e.tree("w")["runs.txt"]; got != "run\n" {
		t.Fatalf("runs.txt = %q: the command ran more than once", got)
	}
	w := map[string]any{"path": "k.txt", "content": "k", "key": "write-1"}
	call(t, cs, "write", w)
	head := e.head("w")
	if text, _ := call(t, cs, "write", w); !strings.Contains(text, fmt.Sprintf("revision %d", head)) || e.head("w") != head {
		t.Fatalf("retried write: %q, head %d then %d", text, head, e.head("w"))
	}
}

// TestMCPAuth checks /v1/mcp's tenancy: no token or a bad one is 401,
// another tenant sees none of alice's workspaces and cannot use her session.
func TestMCPAuth(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "secret.txt", "alice's")
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(auth, session string) int {
		req, _ := http.NewRequest("POST", e.d.URL()+"/v1/mcp?workspace=w", strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bob := e.newToken("bob")
	alice, _ := mcpClient(t, e.httpTransport(e.token, "w"))
	for _, tc := range []struct {
		name, auth, session string
		want                int
	}{
		{"no token", "", "", http.StatusUnauthorized},
		{"bad token", "Bearer not-a-token", "", http.StatusUnauthorized},
		{"bob on alice's session", "Bearer " + bob, alice.ID(), http.StatusForbidden},
		{"alice", "Bearer " + e.token, "", http.StatusOK},
	} {
		if got := post(tc.auth, tc.session); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	cs, _ := mcpClient(t, e.httpTransport(bob, "w"))
	if text, res := call(t, cs, "read", map[string]any{"path": "secret.txt"}); !res.IsError || !strings.Contains(text, "not_found") || strings.Contains(text, "alice's") {
		t.Fatalf("bob reads alice's w: %q", text)
	}
	if text, _ := call(t, alice, "read", map[string]any{"path": "secret.txt"}); !strings.Contains(text, "alice's") {
		t.Fatalf("alice reads her w: %q", text)
	}
}

// TestMCPAgentToolsUnchanged checks that the agent's set stays its ten.
func TestMCPAgentToolsUnchanged(t *testing.T) {
	var names []string
	for _, tool := range (&tools.Set{}).Tools() {
		names = append(names, tool.Name)
	}
	if want := mcpTools[:10]; !slices.Equal(names, want) {
		t.Fatalf("agent tools %v, want %v", names, want)
	}
}

// TestMCPExecStreamUTF8 checks that output cut inside a UTF-8 sequence
// reaches the client as whole text.
func TestMCPExecStreamUTF8(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cs, pl := mcpClient(t, e.httpTransport(e.token, "w"))
	params := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": `printf 'caf\303'; sleep 0.3; printf '\251!\n'`}}
	params.SetProgressToken("utf8")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range pl.of("utf8") {
		if !utf8.ValidString(n.Message) {
			t.Fatalf("progress message %q is not whole UTF-8", n.Message)
		}
		got = append(got, n.Message)
	}
	if want := []string{"caf", "é!\n"}; !slices.Equal(got, want) {
		t.Fatalf("progress messages %q, want %q", got, want)
	}
}

// TestMCPShutdown checks that an MCP session over HTTP (whose client
// holds an event stream open) does not hold up a graceful shutdown.
func TestMCPShutdown(t *testing.T) {
	dir := t.TempDir()
	token := tokenFor(t, dir, "alice")
	c := startChild(t, dir, "--shutdown-grace", "20s")
	cs, _ := mcpClient(t, &mcp.StreamableClientTransport{Endpoint: c.url + "/v1/mcp", HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1})
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("computerd after SIGTERM: %v, want a clean exit", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("shutdown took %s with an MCP session open, want it not to wait out the grace", d.Round(time.Millisecond))
	}
}

// TestMCPExecCancelled checks that a cancelled exec call ends only the
// wait: the command runs on, and exec_wait follows it to its end.
func TestMCPExecCancelled(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cs, _ := mcpClient(t, e.httpTransport(e.token, "w"))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "sleep 1.5; echo on > f; echo finished"}}); err == nil {
		t.Fatal("exec outlived its caller's deadline")
	}
	text, _ := call(t, cs, "execs", nil)
	id, _, _ := strings.Cut(text, "\t")
	text, res := call(t, cs, "exec_wait", map[string]any{"id": id})
	if res.IsError || !strings.Contains(text, "finished\n") || !strings.Contains(text, "[exit 0; its writes are revision 2]") {
		t.Fatalf("exec_wait %s after the cancelled call: %q (error %v)", id, text, res.IsError)
	}
	if got := e.tree("w")["f"]; got != "on\n" {
		t.Fatalf("f = %q, want the cancelled call's command to have run", got)
	}
}

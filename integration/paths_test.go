package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"computerd/computerd/daemon"
	"computerd/wire"
)

// TestMCPRefusesDotSegments calls tools with ids and workspace names that
// are no single path segment, through both transports: each is a tool
// error (invalid) naming the value, never another route's answer (an exec
// id ".." once reached the workspace's own route through the server's
// redirect to the cleaned path).
func TestMCPRefusesDotSegments(t *testing.T) {
	e := startWith(t, daemon.Config{NoExec: true})
	e.ok("ws", "create", "w")
	transports := map[string]mcp.Transport{"http": e.httpTransport(e.token, "w"), "stdio": e.stdioTransport(e.token, "w")}
	for name, tr := range transports {
		t.Run(name, func(t *testing.T) {
			cs, _ := mcpClient(t, tr)
			for _, tc := range []struct {
				tool string
				args map[string]any
			}{
				{"exec_show", map[string]any{"id": ".."}},
				{"exec_show", map[string]any{"id": "."}},
				{"exec_show", map[string]any{"id": "%2e%2e"}},
				{"exec_show", map[string]any{"id": "../../../workspaces"}},
				{"exec_show", map[string]any{"id": "a%2Fb"}},
				{"exec_wait", map[string]any{"id": ".."}},
				{"ls", map[string]any{"workspace": ".."}},
				{"execs", map[string]any{"workspace": "."}},
				{"log", map[string]any{"workspace": "w/.."}},
				{"fork", map[string]any{"workspace": "..", "name": "copy"}},
				{"write", map[string]any{"workspace": "%2e%2e", "path": "f", "content": "x"}},
			} {
				text, res := call(t, cs, tc.tool, tc.args)
				if !res.IsError || !strings.HasPrefix(text, "error (invalid): ") || !strings.Contains(text, "not one path segment") {
					t.Errorf("%s %v: %q (error %v), want an invalid-argument error", tc.tool, tc.args, text, res.IsError)
				}
				if got := structured(t, res)["code"]; got != wire.CodeInvalid {
					t.Errorf("%s %v: structured code %v, want invalid", tc.tool, tc.args, got)
				}
			}
		})
	}
	if got := e.head("w"); got != 1 {
		t.Fatalf("refused calls moved w's head to %d", got)
	}
	if out := e.ok("ws", "ls"); strings.Contains(out, "copy") {
		t.Fatalf("a refused fork made a workspace: %s", out)
	}
}

// TestAPIRefusesUncleanPaths sends paths with ".", ".." or empty
// segments, plain and percent-encoded, to a computerd and to an executor:
// each answers 400 invalid_path, never a redirect to the cleaned path.
func TestAPIRefusesUncleanPaths(t *testing.T) {
	home := startWith(t, daemon.Config{NoExec: true})
	home.ok("ws", "create", "w")
	ex := launch(t, t.TempDir(), daemon.Config{NoExec: true, Home: home.d.URL(), HomeToken: home.token})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for name, base := range map[string]string{"home": home.d.URL(), "executor": ex.d.URL()} {
		for _, p := range []string{
			"/v1/workspaces/w/execs/..",
			"/v1/workspaces/w/execs/%2e%2e",
			"/v1/workspaces/w/execs/./events",
			"/v1/workspaces/w/..",
			"/v1//workspaces",
			"/v1/workspaces/w/files/a/../../..",
			"/v1/runs/..",
		} {
			req, err := http.NewRequest("GET", base+p, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+home.token)
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body wire.Error
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || body.Code != wire.CodeInvalidPath || resp.Header.Get("Location") != "" {
				t.Errorf("%s: GET %s: %d %+v (Location %q), want 400 invalid_path", name, p, resp.StatusCode, body, resp.Header.Get("Location"))
			}
		}
	}
}

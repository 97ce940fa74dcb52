package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"computerd/computerd/api"
)

// A harness hands its model one of two views of a tool result: Codex CLI
// and Claude Code only the structured content when there is any, OpenCode
// only the text. Both views must carry everything.
type harnessView struct {
	name string
	see  func(*mcp.CallToolResult) string
}

var harnessViews = []harnessView{
	{"structured only", func(res *mcp.CallToolResult) string {
		if res.StructuredContent == nil {
			return resultText(res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var m map[string]any
		json.Unmarshal(b, &m)
		var s strings.Builder
		for k, v := range m {
			fmt.Fprintf(&s, "%s: %v\n", k, v)
		}
		return s.String()
	}},
	{"text only", resultText},
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPHarnessViews calls tools over stdio and streamable HTTP and
// checks that a model reading only the structured content and one reading
// only the text both see a command's output and exit code, a write's
// revision, and an error's code and message.
func TestMCPHarnessViews(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	for _, tr := range []struct {
		name string
		tr   func(ws string) mcp.Transport
	}{
		{"stdio", func(ws string) mcp.Transport { return e.stdioTransport(e.token, ws) }},
		{"http", func(ws string) mcp.Transport { return e.httpTransport(e.token, ws) }},
	} {
		t.Run(tr.name, func(t *testing.T) {
			ws := "views-" + tr.name
			e.ok("ws", "create", ws)
			cs, _ := mcpClient(t, tr.tr(ws))
			for _, tc := range []struct {
				name    string
				tool    string
				args    map[string]any
				isError bool
				want    []string // every one in both views
			}{
				{"write", "write", map[string]any{"path": "hello.txt", "content": "hello from the harness\n"}, false,
					[]string{"wrote hello.txt (23 bytes): revision 2"}},
				{"exec", "exec", map[string]any{"command": "cat hello.txt; echo the-end"}, false,
					[]string{"hello from the harness", "the-end", "exit 0"}},
				{"exec failing", "exec", map[string]any{"command": "echo why it failed >&2; exit 3"}, true,
					[]string{"why it failed", "exit 3", "exit"}},
				{"edit", "edit", map[string]any{"path": "hello.txt", "old": "hello", "new": "bye"}, false,
					[]string{"edited hello.txt (1 replacements): revision 3"}},
				{"invalid path", "write", map[string]any{"path": "../escape", "content": "x"}, true,
					[]string{"invalid_path", "escape"}},
				{"missing file", "read", map[string]any{"path": "nope.txt"}, true,
					[]string{"not_found", "nope.txt"}},
				{"bad argument", "ls", map[string]any{"bogus": 1}, true,
					[]string{"invalid", "bogus"}},
				{"read", "read", map[string]any{"path": "hello.txt"}, false,
					[]string{"1\tbye from the harness"}},
			} {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
				if err != nil {
					t.Fatalf("%s: protocol error %v", tc.name, err)
				}
				if res.IsError != tc.isError {
					t.Errorf("%s: isError %v, want %v: %s", tc.name, res.IsError, tc.isError, resultText(res))
				}
				for _, v := range harnessViews {
					seen := v.see(res)
					for _, want := range tc.want {
						if !strings.Contains(seen, want) {
							t.Errorf("%s, %s: the model sees %q, without %q", tc.name, v.name, seen, want)
						}
					}
				}
				if res.StructuredContent != nil {
					sc := structured(t, res)
					if sc["text"] != resultText(res) {
						t.Errorf("%s: structured text %q, result text %q", tc.name, sc["text"], resultText(res))
					}
				}
			}
		})
	}
}

// TestMCPExecWait runs commands longer than an exec call's wait: exec
// answers at its wait with the output so far, the exec id and the offset,
// exec_wait and exec_show go on from an offset, and no byte of output is
// lost or shown twice.
func TestMCPExecWait(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cs, _ := mcpClient(t, e.httpTransport(e.token, "w"))

	start := time.Now()
	text, res := call(t, cs, "exec", map[string]any{"command": "echo first; sleep 3; echo second; sleep 1; echo third > f; echo third", "wait": 1})
	if took := time.Since(start); took > 3500*time.Millisecond {
		t.Errorf("exec with wait 1 answered after %s, not before the command's end", took)
	}
	sc := structured(t, res)
	id, _ := sc["exec_id"].(string)
	offset, _ := sc["offset"].(float64)
	if res.IsError || sc["running"] != true || id == "" || sc["exit_code"] != nil ||
		!strings.Contains(text, fmt.Sprintf(`still running after 1s as exec %s (%d bytes of output so far)`, id, int(offset))) ||
		!strings.Contains(text, fmt.Sprintf(`exec_wait {"id": %q, "offset": %d}`, id, int(offset))) {
		t.Fatalf("exec still running: %q, structured %v", text, sc)
	}
	var got strings.Builder
	out, _, _ := strings.Cut(text, "\n[still running")
	got.WriteString(out)

	// Short waits to its end: each part of the output once.
	for round := 0; ; round++ {
		text, res = call(t, cs, "exec_wait", map[string]any{"id": id, "offset": offset, "wait": 0.6})
		sc = structured(t, res)
		if offset > 0 && !strings.HasPrefix(text, fmt.Sprintf("[output from byte %d]\n", int(offset))) {
			t.Fatalf("exec_wait from %v: %q", offset, text)
		}
		out, _, _ := strings.Cut(strings.TrimPrefix(text, fmt.Sprintf("[output from byte %d]\n", int(offset))), "\n[")
		got.WriteString(out)
		offset = sc["offset"].(float64)
		if sc["running"] != true {
			break
		}
		if round > 20 {
			t.Fatalf("exec %s still running after %d waits: %q", id, round, text)
		}
	}
	if res.IsError || sc["exit_code"] != 0.0 || sc["rev"] != 2.0 || !strings.Contains(text, "[exit 0; its writes are revision 2]") {
		t.Fatalf("exec_wait to the end: %q, structured %v", text, sc)
	}
	if want := "first\nsecond\nthird\n"; got.String() != want || offset != float64(len(want)) {
		t.Fatalf("output over the waits %q (offset %v), want %q once", got.String(), offset, want)
	}
	// exec_show reads from any offset.
	if text, _ := call(t, cs, "exec_show", map[string]any{"id": id, "offset": 2}); !strings.Contains(text, "[output from byte 2]\nrst\nsecond\nthird\n\n[exit 0") {
		t.Fatalf("exec_show from byte 2: %q", text)
	}

	// Wait 0 starts a command and answers at once with its id; exec_show
	// answers at once while it runs.
	text, res = call(t, cs, "exec", map[string]any{"command": "sleep 2; echo late", "wait": 0})
	sc = structured(t, res)
	if sc["running"] != true || !strings.Contains(text, "still running after 0s") {
		t.Fatalf("exec with wait 0: %q", text)
	}
	start = time.Now()
	if text, _ := call(t, cs, "exec_show", map[string]any{"id": sc["exec_id"]}); !strings.Contains(text, "still running as exec") || time.Since(start) > time.Second {
		t.Fatalf("exec_show of a running exec: %q after %s", text, time.Since(start))
	}
	if text, _ := call(t, cs, "exec_wait", map[string]any{"id": sc["exec_id"]}); !strings.Contains(text, "late\n\n[exit 0") {
		t.Fatalf("exec_wait after wait 0: %q", text)
	}
	for _, bad := range []map[string]any{{"id": id, "wait": -1}, {"id": id, "wait": 4000}, {"id": id, "offset": -1}, {"offset": 1}} {
		if text, res := call(t, cs, "exec_wait", bad); !res.IsError || !strings.HasPrefix(text, "error (invalid)") {
			t.Errorf("exec_wait %v: %q, want invalid", bad, text)
		}
	}
}

// TestMCPLongExec follows a 75 s command over both transports with a
// client that gives each call 60 s, as Codex and OpenCode do by default:
// exec answers at its default wait, exec_wait goes on until the end, every
// call is answered within its time, and the whole output arrives once.
func TestMCPLongExec(t *testing.T) {
	needExec(t)
	if testing.Short() {
		t.Skip("takes 75 s")
	}
	e := start(t, api.Limits{})
	for _, tr := range []struct {
		name string
		tr   func(ws string) mcp.Transport
	}{
		{"stdio", func(ws string) mcp.Transport { return e.stdioTransport(e.token, ws) }},
		{"http", func(ws string) mcp.Transport { return e.httpTransport(e.token, ws) }},
	} {
		ws := "long-" + tr.name
		e.ok("ws", "create", ws)
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			cs, _ := mcpClient(t, tr.tr(ws))
			var got strings.Builder
			tool, args := "exec", map[string]any{"command": "for i in $(seq 1 15); do echo tick $i; sleep 5; done; echo done > f"}
			began := time.Now()
			for calls := 1; ; calls++ {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				start := time.Now()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
				cancel()
				if err != nil {
					t.Fatalf("call %d (%s) after %s: %v", calls, tool, time.Since(start).Round(time.Millisecond), err)
				}
				text, sc := resultText(res), structured(t, res)
				out, _, _ := strings.Cut(text, "\n[")
				got.WriteString(strings.TrimPrefix(out, fmt.Sprintf("[output from byte %v]\n", args["offset"])))
				t.Logf("call %d (%s): %s, running %v", calls, tool, time.Since(start).Round(time.Millisecond), sc["running"])
				if sc["running"] != true {
					if res.IsError || sc["exit_code"] != 0.0 || sc["rev"] == nil {
						t.Fatalf("the end: %q", text)
					}
					break
				}
				if calls > 5 {
					t.Fatalf("still running after %d calls", calls)
				}
				tool, args = "exec_wait", map[string]any{"id": sc["exec_id"], "offset": sc["offset"]}
			}
			var want strings.Builder
			for i := 1; i <= 15; i++ {
				fmt.Fprintf(&want, "tick %d\n", i)
			}
			if got.String() != want.String() {
				t.Fatalf("output over the calls:\n%s\nwant each tick once:\n%s", got.String(), want.String())
			}
			if took := time.Since(began); took < 75*time.Second {
				t.Fatalf("a 75 s command done after %s", took)
			}
			if text, _ := call(t, cs, "read", map[string]any{"path": "f"}); text != "1\tdone\n" {
				t.Fatalf("f: %q", text)
			}
		})
	}
}

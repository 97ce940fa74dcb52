package tools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"computerd/tools"
)

// The exec tools' descriptions and schemas give the set's wait, so a
// model knows how long a call waits before it answers "still running".
func TestExecWaitDescribed(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  *tools.Set
		want string
	}{
		{"MCP", &tools.Set{MCP: true}, "(default 30)"},
		{"agent", &tools.Set{ExecWait: 2 * time.Minute}, "(default 120)"},
	} {
		for _, tool := range tc.set.Tools() {
			if tool.Name != "exec" && tool.Name != "exec_wait" {
				continue
			}
			if !strings.Contains(tool.Description, tc.want) || !strings.Contains(string(tool.Schema), tc.want) {
				t.Errorf("%s %s: %q %s, want %q", tc.name, tool.Name, tool.Description, tool.Schema, tc.want)
			}
		}
	}
}

// Waits and offsets out of bounds are refused before any request.
func TestExecWaitArguments(t *testing.T) {
	set := mustSet(t, true)
	for _, tc := range []struct{ tool, args, want string }{
		{"exec", `{"command": "true", "wait": -1}`, "wait -1"},
		{"exec", `{"command": "true", "wait": 3601}`, "wait 3601"},
		{"exec", `{"command": "true", "wait": "soon"}`, "bad arguments"},
		{"exec_wait", `{"offset": 3}`, "id is required"},
		{"exec_wait", `{"id": "x1", "offset": -1}`, "offset must not be negative"},
		{"exec_wait", `{"id": "x1", "wait": 7200}`, "wait 7200"},
		{"exec_show", `{"id": "x1", "offset": -2}`, "offset must not be negative"},
		{"exec_show", `{"id": "x1", "wait": true}`, "unknown field"},
	} {
		res, err := set.Call(context.Background(), tc.tool, tools.Call{Args: json.RawMessage(tc.args)})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || res.Code != "invalid" || !strings.Contains(res.Text, tc.want) {
			t.Errorf("%s %s: %q (code %q), want invalid saying %q", tc.tool, tc.args, res.Text, res.Code, tc.want)
		}
	}
}

package tools_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"computerd/computerd/api/apitest"
	"computerd/tools"
)

// mustSet serves a fresh store's API (no exec) and returns a set over
// workspace w of tenant alice.
func mustSet(tb testing.TB, mcp bool) *tools.Set {
	return &tools.Set{Client: apitest.Serve(tb, "w"), Workspace: "w", MCP: mcp}
}

func names(list []tools.Tool) []string {
	var out []string
	for _, t := range list {
		out = append(out, t.Name)
	}
	return out
}

func TestLists(t *testing.T) {
	agent := []string{"read", "write", "edit", "ls", "find", "grep", "exec", "exec_wait", "log", "diff"}
	mcp := append(slices.Clone(agent), "fork", "restore", "execs", "exec_show")
	for _, tc := range []struct {
		name string
		got  []tools.Tool
		want []string
	}{
		{"agent set", (&tools.Set{}).Tools(), agent},
		{"MCP set", (&tools.Set{MCP: true}).Tools(), mcp},
		{"MCP list", tools.MCP(), mcp},
	} {
		if got := names(tc.got); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tool := range tools.MCP() {
		var s map[string]any
		if err := json.Unmarshal(tool.Schema, &s); err != nil || s["type"] != "object" {
			t.Errorf("%s: schema %s: %v", tool.Name, tool.Schema, err)
		}
		if tool.Keyed && !tool.Mutates {
			t.Errorf("%s: keyed but read-only", tool.Name)
		}
		if strings.Contains(tool.Description+string(tool.Schema), "{wait}") {
			t.Errorf("%s: the wait's mark is left in: %s %s", tool.Name, tool.Description, tool.Schema)
		}
	}
}

func TestMCPTools(t *testing.T) {
	ctx := context.Background()
	agent, set := mustSet(t, false), mustSet(t, true)
	steps := []struct {
		name    string
		set     *tools.Set
		tool    string
		args    string
		want    string
		isError bool
	}{
		{"agent has no fork", agent, "fork", `{"name": "x"}`, "error (not_found): no tool \"fork\"", true},
		{"write", set, "write", `{"path": "a", "content": "1\n"}`, "revision 2", false},
		{"write again", set, "write", `{"path": "a", "content": "2\n"}`, "revision 3", false},
		{"fork", set, "fork", `{"name": "w2", "rev": 2}`, "forked w at revision 2 into w2", false},
		{"fork exists", set, "fork", `{"name": "w2"}`, "error (workspace_exists)", true},
		{"restore", set, "restore", `{"rev": 2, "path": "a"}`, "restored a from revision 2: revision 4", false},
		{"restored", set, "read", `{"path": "a"}`, "1\t1", false},
		{"restore needs rev", set, "restore", `{}`, "error (invalid)", true},
		{"no execs", set, "execs", `{}`, "(no commands yet)", false},
		{"unknown exec", set, "exec_show", `{"id": "x0"}`, "error (not_found)", true},
		{"exec_show needs an id", set, "exec_show", `{}`, "error (invalid)", true},
	}
	for _, st := range steps {
		res, err := st.set.Call(ctx, st.tool, tools.Call{Args: json.RawMessage(st.args)})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if res.IsError != st.isError || !strings.Contains(res.Text, st.want) {
			t.Fatalf("%s: %q (error %v), want %q (error %v)", st.name, res.Text, res.IsError, st.want, st.isError)
		}
	}
}

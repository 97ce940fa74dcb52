package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"computerd/agentctl/model/modeltest"
	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/wire"
)

// TestAgentCancelInterrupted: a run interrupted (its model refused) with
// a command it started still running is cancelled at once by agent
// cancel, which kills the command; agentctl execs shows no exit code for
// a command that has not ended.
func TestAgentCancelInterrupted(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	noModelEnv(t)
	srv := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec", Args: `{"command": "sleep 60", "wait": 0}`}),
		modeltest.Fail(401, "key revoked"),
	)
	if out, errs, err := e.run(nil, "agent", "run", "--base-url", srv.OpenAIURL(), "w", "start it"); err == nil {
		t.Fatalf("a run whose model refused exits 0:\n%s\n%s", out, errs)
	}
	runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	if len(runs) != 1 || runs[0].State != core.RunInterrupted {
		t.Fatalf("runs %+v", runs)
	}
	execs := decodeJSON[[]map[string]any](t, e.ok("execs", "w", "--json"))
	if len(execs) != 1 || execs[0]["state"] != "running" {
		t.Fatalf("execs %v", execs)
	}
	if code, ok := execs[0]["exit_code"]; ok {
		t.Errorf("a running exec shows exit_code %v", code)
	}
	if ls := e.ok("execs", "w"); !strings.Contains(ls, "running  -  ") {
		t.Errorf("agentctl execs:\n%s", ls)
	}

	out := e.ok("agent", "cancel", runs[0].ID)
	if !strings.Contains(out, "run "+runs[0].ID+": cancelled") || !strings.Contains(out, "killed its commands still running: exec "+execs[0]["id"].(string)) {
		t.Fatalf("agent cancel:\n%s", out)
	}
	cl := client.New(e.d.URL(), e.token)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec, err := cl.FollowExec(ctx, "w", execs[0]["id"].(string), nil)
	if err != nil || rec.State != core.ExecKilled {
		t.Fatalf("the run's command after cancel: %+v %v", rec, err)
	}
	detail := decodeJSON[wire.RunDetail](t, e.ok("agent", "show", runs[0].ID, "--json"))
	if detail.Run.State != core.RunCancelled || detail.Run.Ended.IsZero() {
		t.Fatalf("run after cancel %+v", detail.Run)
	}
	execs = decodeJSON[[]map[string]any](t, e.ok("execs", "w", "--json"))
	if _, ok := execs[0]["exit_code"]; !ok {
		t.Errorf("an ended exec shows no exit code: %v", execs[0])
	}
}

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"computerd/agentctl/model/modeltest"
	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/wire"
)

// noModelEnv is the environment without any model key or address, so
// that only what a run records (or its flags) can reach a model.
func noModelEnv(t *testing.T) {
	for _, k := range []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "AGENT_PROVIDER", "AGENT_MODEL"} {
		t.Setenv(k, "") // restored when the test ends
		os.Unsetenv(k)
	}
}

// childEnv is this process's environment without any model key or
// address, for an agentctl child.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "ANTHROPIC_") && !strings.HasPrefix(kv, "AGENT_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// lastToolText is the last tool result of an OpenAI request's
// conversation.
func lastToolText(body []byte) string {
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(body, &req)
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "tool" {
			return req.Messages[i].Content
		}
	}
	return ""
}

var execWaitHint = regexp.MustCompile(`exec_wait (\{"id": "[^"]+", "offset": \d+\})`)

// TestAgentExecWait: the agent's exec answers a command still running at
// its wait with the output so far, the exec id and the offset; the model
// waits for it with exec_wait, which goes on from that offset to its end.
func TestAgentExecWait(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	noModelEnv(t)
	srv := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec",
			Args: `{"command": "echo early; sleep 2; echo late > f; echo late", "wait": 0.5}`}),
		modeltest.Step{Reading: func(body []byte) modeltest.Step {
			m := execWaitHint.FindStringSubmatch(lastToolText(body))
			if m == nil {
				return modeltest.Reply("no exec_wait hint in: "+lastToolText(body), modeltest.Usage{})
			}
			return modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec_wait", Args: m[1]})
		}},
		modeltest.Reply("waited for it", modeltest.Usage{}),
	)
	out, errs, err := e.run(nil, "agent", "run", "--base-url", srv.OpenAIURL(), "w", "run it")
	if err != nil {
		t.Fatalf("agent run: %v\n%s\n%s", err, out, errs)
	}
	if !strings.Contains(out, "still running as exec") || !strings.Contains(errs, "[step 3: ") {
		t.Errorf("terminal:\n%s\n%s", out, errs)
	}
	runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	detail := decodeJSON[wire.RunDetail](t, e.ok("agent", "show", runs[0].ID, "--json"))
	if detail.Run.State != core.RunDone || len(detail.Steps) != 5 {
		t.Fatalf("run %+v, %d steps", detail.Run, len(detail.Steps))
	}
	ex, wait := detail.Steps[1], detail.Steps[3]
	if ex.Tool != "exec" || ex.ExitCode != nil || ex.IsError || ex.ExecID == "" || !strings.HasPrefix(ex.Text, "early\n") ||
		!strings.Contains(ex.Text, "still running after 500ms") {
		t.Errorf("exec step: %+v", ex)
	}
	if wait.Tool != "exec_wait" || wait.ExitCode == nil || *wait.ExitCode != 0 || wait.ExecID != ex.ExecID || wait.Rev == 0 ||
		strings.Contains(wait.Text, "early") || !strings.Contains(wait.Text, "[output from byte 6]\nlate\n") {
		t.Errorf("exec_wait step: %+v", wait)
	}
	if got := e.tree("w")["f"]; got != "late\n" {
		t.Errorf("f = %q", got)
	}
	if show := e.ok("agent", "show", runs[0].ID); !strings.Contains(show, "still running as exec "+ex.ExecID) {
		t.Errorf("agent show:\n%s", show)
	}
}

// TestAgentResumeAfterKill: a run started with --base-url (and no key),
// its agentctl killed with SIGKILL while a command runs, reads as
// interrupted once its lease runs out, agent ls says how to go on, and
// agent resume with no flags and no model environment goes on against
// the recorded server, without running the command again.
func TestAgentResumeAfterKill(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	noModelEnv(t)
	srv := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{Input: 5, Output: 1}, modeltest.Call{Name: "exec", Args: `{"command": "echo once >> ran.txt; sleep 3"}`}),
		modeltest.Reply("all done", modeltest.Usage{Input: 5, Output: 1}),
	).ByTurn()
	cmd := exec.Command(os.Args[0], "--server", e.d.URL(), "agent", "run", "--base-url", srv.OpenAIURL(), "--model", "local", "--lease", "2s", "w", "the task")
	cmd.Env = childEnv("AGENTCTL_TEST=1", "COMPUTER_TOKEN="+e.token)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cl := client.New(e.d.URL(), e.token)
	ctx := context.Background()
	var run core.Run
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no exec step began:\n%s", out.String())
		}
		runs, err := cl.Runs(ctx, "w", 0)
		if err != nil || len(runs) == 0 || runs[0].Steps < 2 {
			continue
		}
		execs, err := cl.Execs(ctx, "w", 0)
		if err == nil && len(execs) == 1 {
			run = runs[0]
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if run.BaseURL != srv.OpenAIURL() || run.Model != "local" || run.Provider != "openai" || run.Lease != "2s" {
		t.Fatalf("recorded %+v", run)
	}

	// Running while its lease lasts, interrupted after.
	var ls string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ls = e.ok("agent", "ls", "w")
		if strings.Contains(ls, "interrupted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a run whose agentctl was killed 10 s ago, on a 2 s lease:\n%s", ls)
		}
	}
	if want := run.ID + " is interrupted; it goes on with: agentctl agent resume " + run.ID; !strings.Contains(ls, want) {
		t.Fatalf("agent ls:\n%s\nwant %q", ls, want)
	}

	before := len(srv.Requests())
	if stdout, errs, err := e.run(nil, "agent", "resume", run.ID); err != nil {
		t.Fatalf("agent resume with no flags: %v\n%s\n%s", err, stdout, errs)
	}
	detail, err := cl.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if detail.Run.State != core.RunDone || detail.Run.BaseURL != srv.OpenAIURL() {
		t.Fatalf("resumed run %+v", detail.Run)
	}
	if len(srv.Requests()) <= before {
		t.Fatalf("the resume asked the recorded server nothing")
	}
	if got := e.tree("w")["ran.txt"]; got != "once\n" {
		t.Fatalf("ran.txt = %q: the command ran again", got)
	}
}

// TestAgentModelUnreachable: a model server that cannot be reached leaves
// the run interrupted (never failed), the model turn in flight; a resume
// told of another server goes on, and records it.
func TestAgentModelUnreachable(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	noModelEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := fmt.Sprintf("http://%s/v1", l.Addr())
	l.Close()
	out, errs, err := e.run(nil, "agent", "run", "--base-url", gone, "w", "anything")
	if err == nil {
		t.Fatalf("a run whose model cannot be reached exits 0:\n%s\n%s", out, errs)
	}
	runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	if len(runs) != 1 || runs[0].State != core.RunInterrupted || !strings.Contains(runs[0].Error, "model: ") {
		t.Fatalf("runs %+v", runs)
	}
	id := runs[0].ID
	if !strings.Contains(errs, "it goes on with: agentctl agent resume "+id) {
		t.Errorf("no hint to resume:\n%s", errs)
	}
	detail := decodeJSON[wire.RunDetail](t, e.ok("agent", "show", id, "--json"))
	if len(detail.Steps) != 1 || detail.Steps[0].State != core.StepStarted {
		t.Fatalf("steps %+v, want the model turn in flight", detail.Steps)
	}

	srv := modeltest.New(t, modeltest.Reply("reached at last", modeltest.Usage{}))
	if out, errs, err := e.run(nil, "agent", "resume", id, "--base-url", srv.OpenAIURL()); err != nil {
		t.Fatalf("resume: %v\n%s\n%s", err, out, errs)
	}
	detail = decodeJSON[wire.RunDetail](t, e.ok("agent", "show", id, "--json"))
	if detail.Run.State != core.RunDone || detail.Run.BaseURL != srv.OpenAIURL() || len(detail.Steps) != 1 || detail.Steps[0].Text != "reached at last" {
		t.Fatalf("resumed %+v %+v", detail.Run, detail.Steps)
	}
	// The prompt the model got is the one the first driver recorded.
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	srv.Requests()[0].Decode(t, &req)
	if n := len(req.Messages); n < 2 || !strings.Contains(req.Messages[n-1].Content, "Task: anything") {
		t.Fatalf("resumed request %+v", req)
	}
}

// TestAgentNeedsModel: with neither a key nor a base URL, agent run is
// refused at once with a hint, before any run is made.
func TestAgentNeedsModel(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	noModelEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no model to reach: set OPENAI_API_KEY for OpenAI's API, or --base-url"},
		{[]string{"--provider", "anthropic"}, "no model to reach: set ANTHROPIC_API_KEY"},
	} {
		start := time.Now()
		out, errs, err := e.run(nil, append(append([]string{"agent", "run"}, tc.args...), "w", "a task")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("agent run %v: %v\n%s\n%s, want %q", tc.args, err, out, errs, tc.want)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("agent run %v refused after %s", tc.args, took)
		}
	}
	if runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json")); len(runs) != 0 {
		t.Fatalf("refused runs were made: %+v", runs)
	}
}

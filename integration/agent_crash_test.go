package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"computerd/agentctl/model/modeltest"
	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
)

// crashTurns is the crash test's task: execs that each append their mark
// to log.txt (a command run twice would show twice) and sleep, so a kill
// can land while one runs, between them writes and an edit whose second
// application would show, and the final answer.
func crashTurns(n int) []modeltest.Step {
	var steps []modeltest.Step
	u := modeltest.Usage{Input: 10, Output: 2}
	for i := 1; i <= n; i++ {
		var call modeltest.Call
		switch i % 4 {
		case 1, 3:
			call = modeltest.Call{Name: "exec", Args: fmt.Sprintf(`{"command": "echo s%d >> log.txt; sleep 0.5"}`, i)}
		case 2:
			call = modeltest.Call{Name: "write", Args: fmt.Sprintf(`{"path": "w%d.txt", "content": "step %d\n"}`, i, i)}
		case 0:
			call = modeltest.Call{Name: "edit", Args: `{"path": "w2.txt", "old": "step", "new": "step step", "all": true}`}
		}
		steps = append(steps, modeltest.ToolCalls(u, call))
	}
	return append(steps, modeltest.Reply("finished", u))
}

// TestAgentCrashResume kills agentctl with SIGKILL at random points of a
// scripted run, 20 times, resuming each time: every exec ran exactly once
// (the journal and a side-effect log), the final workspace is the one an
// uninterrupted run makes, and no step is missing or doubled.
func TestAgentCrashResume(t *testing.T) {
	needExec(t)
	const turns, kills = 24, 20
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	e := start(t, api.Limits{})
	srv := modeltest.New(t, crashTurns(turns)...).ByTurn()
	e.ok("ws", "create", "crash")
	e.ok("ws", "create", "calm")

	agentctl := func(args ...string) *exec.Cmd {
		full := append([]string{"--server", e.d.URL()}, args...)
		cmd := exec.Command(os.Args[0], full...)
		cmd.Env = append(os.Environ(), "AGENTCTL_TEST=1", "OPENAI_API_KEY="+agentSecret, "COMPUTER_TOKEN="+e.token)
		return cmd
	}
	runFlags := []string{"--base-url", srv.OpenAIURL(), "--max-steps", "100"}

	// The reference: the same task, uninterrupted.
	if out, err := agentctl(append(append([]string{"agent", "run"}, runFlags...), "calm", "the task")...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}

	cl := client.New(e.d.URL(), e.token)
	ctx := context.Background()
	runID := ""
	killed := 0
	for attempt := 0; killed < kills; attempt++ {
		if attempt > 200 {
			t.Fatalf("only %d kills landed in %d attempts", killed, attempt)
		}
		args := append([]string{"agent", "run"}, append(runFlags, "crash", "the task")...)
		if runID != "" {
			args = append([]string{"agent", "resume"}, append(runFlags[:2:2], runID)...)
		}
		cmd := agentctl(args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Fatalf("agentctl ended before its kill (%v), after %d kills:\n%s", err, killed, out.String())
		case <-time.After(time.Duration(20+rng.IntN(400)) * time.Millisecond):
		}
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if runID == "" {
			runs, err := cl.Runs(ctx, "crash", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) > 1 {
				t.Fatalf("%d runs, want one", len(runs))
			}
			if len(runs) == 0 {
				continue // killed before the run was recorded: start again
			}
			runID = runs[0].ID
		}
		detail, err := cl.Run(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if detail.Run.State.Final() {
			t.Fatalf("the run ended after only %d kills; make it longer", killed)
		}
		killed++
	}
	if out, err := agentctl(append([]string{"agent", "resume"}, append(runFlags[:2:2], runID)...)...).CombinedOutput(); err != nil {
		t.Fatalf("last resume: %v\n%s", err, out)
	}

	detail, err := cl.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if detail.Run.State != core.RunDone {
		t.Fatalf("run %+v", detail.Run)
	}
	// No step missing or doubled: a model turn and its one tool call per
	// turn, numbered without gaps, every one ended.
	if got, want := len(detail.Steps), 2*turns+1; got != want {
		t.Errorf("%d steps, want %d", got, want)
	}
	for i, st := range detail.Steps {
		wantKind := core.StepModel
		if i%2 == 1 {
			wantKind = core.StepTool
		}
		if st.Seq != i+1 || st.Kind != wantKind || st.State != core.StepDone {
			t.Errorf("step %d: %+v", i+1, st)
		}
	}
	// Every exec ran once: one journal record per step key, and each mark
	// once in the log, in order.
	execs, err := cl.Execs(ctx, "crash", 0)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]int{}
	for _, x := range execs {
		byKey[x.Key]++
	}
	var marks []string
	for i := 1; i <= turns; i++ {
		if i%4 == 1 || i%4 == 3 {
			marks = append(marks, fmt.Sprintf("s%d", i))
		}
	}
	if len(execs) != len(marks) {
		t.Errorf("%d execs in the journal, want %d", len(execs), len(marks))
	}
	for k, n := range byKey {
		if n != 1 {
			t.Errorf("exec key %s ran %d times", k, n)
		}
	}
	crash, calm := e.tree("crash"), e.tree("calm")
	if got, want := crash["log.txt"], strings.Join(marks, "\n")+"\n"; got != want {
		t.Errorf("log.txt:\n%s\nwant:\n%s", got, want)
	}
	if fmt.Sprint(crash) != fmt.Sprint(calm) {
		t.Errorf("workspace after %d kills:\n%v\nuninterrupted:\n%v", killed, crash, calm)
	}
}

// TestAgentDetachAttach: a detached run goes on in a process of its own;
// attach follows it from the start, in order, every tool call and line of
// command output; attach --from shows only later steps; --json prints the
// same as events; cancel stops a detached run before its next step.
func TestAgentDetachAttach(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	srv := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec", Args: `{"command": "echo one; sleep 0.5; echo two"}`}),
		modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec", Args: `{"command": "echo three"}`}),
		modeltest.Reply("all three", modeltest.Usage{}),
	).ByTurn()
	detach := func(task string) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "--server", e.d.URL(), "agent", "run", "--detach", "--json", "--base-url", srv.OpenAIURL(), "w", task)
		cmd.Env = append(os.Environ(), "AGENTCTL_TEST=1", "OPENAI_API_KEY="+agentSecret, "XDG_STATE_HOME="+t.TempDir(), "COMPUTER_TOKEN="+e.token)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("agent run --detach: %v\n%s", err, out)
		}
		return decodeJSON[map[string]any](t, string(out))["run"].(string)
	}
	id := detach("count to three")
	out := e.ok("agent", "attach", id)
	rest := out
	for _, want := range []string{"▸ exec echo one", "one\n", "two\n", "exit 0", "▸ exec echo three", "three\n", "all three", "run " + id + " done"} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("attach output lacks %q in order:\n%s", want, out)
		}
		rest = rest[i+len(want):]
	}
	// From step 3 on: the second exec, not the first.
	later := e.ok("agent", "attach", "--from", "3", id)
	if strings.Contains(later, "echo one") || !strings.Contains(later, "echo three") {
		t.Errorf("attach --from 3:\n%s", later)
	}
	events := e.ok("agent", "attach", "--json", id)
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(events), "\n") {
		types = append(types, decodeJSON[map[string]any](t, line)["type"].(string))
	}
	if got := strings.Join(types, " "); !strings.HasPrefix(got, "model tool_result model tool_result model") || !strings.HasSuffix(got, "end") {
		t.Errorf("attach --json event types: %s", got)
	}

	// Cancel: a run whose command sleeps has the command killed and ends
	// cancelled before its next step.
	slow := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec", Args: `{"command": "echo started; sleep 60"}`}),
		modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec", Args: `{"command": "echo never > never.txt"}`}),
		modeltest.Reply("no", modeltest.Usage{}),
	).ByTurn()
	srv = slow
	id = detach("sleep, then more")
	eventually(t, "the command runs", func() bool {
		execs, _ := client.New(e.d.URL(), e.token).Execs(context.Background(), "w", 0)
		for _, x := range execs {
			if x.State == core.ExecRunning {
				return true
			}
		}
		return false
	})
	start := time.Now()
	if out := e.ok("agent", "cancel", id); !strings.Contains(out, "killed") {
		t.Errorf("cancel did not kill the running command: %s", out)
	}
	e.ok("agent", "attach", id) // returns when the run has ended
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the cancelled run ended after %v: its command was not killed", d)
	}
	detail := decodeJSON[map[string]any](t, e.ok("agent", "show", "--json", id))
	if state := detail["run"].(map[string]any)["state"]; state != string(core.RunCancelled) {
		t.Errorf("cancelled run is %v", state)
	}
	if _, ok := e.tree("w")["never.txt"]; ok {
		t.Error("a step after the cancel ran")
	}
}

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/wire"
)

// runEnv is a computerd with workspace w and alice's client for it.
func runEnv(t *testing.T) (*env, *client.Client) {
	t.Helper()
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "f", "x")
	return e, client.New(e.d.URL(), e.token)
}

// mustCreateRun starts a run on w driven by driver.
func mustCreateRun(tb testing.TB, cl *client.Client, task, driver string) core.Run {
	tb.Helper()
	run, err := cl.CreateRun(context.Background(), "w", wire.CreateRun{Task: task, Driver: driver, Provider: "openai", Model: "m1"})
	if err != nil {
		tb.Fatalf("create run: %v", err)
	}
	return run
}

// mustBegin begins step seq of run as driver (a model step, or a tool
// step when tool is set).
func mustBegin(tb testing.TB, cl *client.Client, driver string, run string, seq int, tool string) core.Step {
	tb.Helper()
	st := core.Step{Run: run, Seq: seq, Kind: core.StepModel}
	if tool != "" {
		st.Kind, st.Tool, st.CallID, st.Args = core.StepTool, tool, fmt.Sprintf("call-%d", seq), json.RawMessage(`{"command":"true"}`)
	}
	rec, err := cl.BeginStep(context.Background(), driver, st)
	if err != nil {
		tb.Fatalf("begin step %d: %v", seq, err)
	}
	return rec
}

// mustEnd ends step seq of run as driver with text.
func mustEnd(tb testing.TB, cl *client.Client, driver, run string, seq int, text string) core.Step {
	tb.Helper()
	rec, err := cl.EndStep(context.Background(), driver, core.Step{Run: run, Seq: seq, Text: text, InputTokens: 10, OutputTokens: 5, Cost: 0.25})
	if err != nil {
		tb.Fatalf("end step %d: %v", seq, err)
	}
	return rec
}

// mustDetail reads a run and its steps.
func mustDetail(tb testing.TB, cl *client.Client, id string) wire.RunDetail {
	tb.Helper()
	d, err := cl.Run(context.Background(), id)
	if err != nil {
		tb.Fatalf("run %s: %v", id, err)
	}
	return d
}

// wantCode checks that err is a *wire.Error with code.
func wantCode(tb testing.TB, what string, err error, code string) {
	tb.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		tb.Errorf("%s: %v (%T), want a %s error", what, err, err, code)
		return
	}
	if we.Code != code {
		tb.Errorf("%s: code %q (%v), want %q", what, we.Code, err, code)
	}
}

// A run from creation to its end: steps recorded when they begin and when
// they end, once each, their usage added to the run's.
func TestRunLifecycle(t *testing.T) {
	e, cl := runEnv(t)
	ctx := context.Background()
	run := mustCreateRun(t, cl, "fix the bug", "d1")
	if run.ID == "" || run.State != core.RunRunning || run.Driver != "d1" || run.Tenant != "alice" || run.WSName != "w" ||
		run.BaseRev != e.head("w") || run.Task != "fix the bug" || run.Steps != 0 || run.Model != "m1" {
		t.Fatalf("created run: %+v", run)
	}
	if runs, err := cl.Runs(ctx, "w", 0); err != nil || len(runs) != 1 || runs[0].ID != run.ID {
		t.Fatalf("runs: %+v %v", runs, err)
	}

	st := mustBegin(t, cl, "d1", run.ID, 1, "")
	if st.State != core.StepStarted || st.Seq != 1 || st.Kind != core.StepModel || st.Started.IsZero() || !st.Ended.IsZero() {
		t.Fatalf("begun step: %+v", st)
	}
	// Beginning it again (a driver that did not hear back) records nothing new.
	if again := mustBegin(t, cl, "d1", run.ID, 1, ""); !again.Started.Equal(st.Started) || again.State != core.StepStarted {
		t.Errorf("step 1 begun twice: %+v, then %+v", st, again)
	}
	calls := []core.ToolCall{{ID: "call-2", Name: "exec", Args: json.RawMessage(`{"command":"true"}`)}, {ID: "call-3", Name: "read", Args: json.RawMessage(`{"path":"f"}`)}}
	done, err := cl.EndStep(ctx, "d1", core.Step{Run: run.ID, Seq: 1, Text: "I will run the tests", Calls: calls, InputTokens: 10, OutputTokens: 5, Cost: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if done.State != core.StepDone || done.Text != "I will run the tests" || done.Ended.IsZero() || done.InputTokens != 10 {
		t.Fatalf("ended step: %+v", done)
	}
	if !reflect.DeepEqual(done.Calls, calls) {
		t.Errorf("recorded calls %+v, want %+v", done.Calls, calls)
	}
	// Ending it again changes nothing, its tokens included.
	if again, err := cl.EndStep(ctx, "d1", core.Step{Run: run.ID, Seq: 1, Text: "other", InputTokens: 1000}); err != nil || again.Text != done.Text {
		t.Errorf("step 1 ended twice: %+v %v", again, err)
	}

	tool := mustBegin(t, cl, "d1", run.ID, 2, "exec")
	if tool.Kind != core.StepTool || tool.Tool != "exec" || tool.CallID != "call-2" || string(tool.Args) != `{"command":"true"}` {
		t.Fatalf("tool step: %+v", tool)
	}
	code := 3
	ended, err := cl.EndStep(ctx, "d1", core.Step{Run: run.ID, Seq: 2, Text: "exit 3", IsError: true, Code: "exit", ExitCode: &code, ExecID: "x1", Rev: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !ended.IsError || ended.Code != "exit" || ended.ExitCode == nil || *ended.ExitCode != 3 || ended.ExecID != "x1" || ended.Rev != 7 {
		t.Fatalf("ended tool step: %+v", ended)
	}

	d := mustDetail(t, cl, run.ID)
	if len(d.Steps) != 2 || d.Run.Steps != 2 || d.Run.InputTokens != 10 || d.Run.OutputTokens != 5 || d.Run.Cost != 0.25 {
		t.Fatalf("run after two steps: %+v, %d steps", d.Run, len(d.Steps))
	}
	if !reflect.DeepEqual(d.Steps[1], ended) {
		t.Errorf("recorded step 2 %+v, want %+v", d.Steps[1], ended)
	}

	fin, err := cl.EndRun(ctx, run.ID, "d1", core.RunDone, "")
	if err != nil || fin.State != core.RunDone || fin.Ended.IsZero() {
		t.Fatalf("end run: %+v %v", fin, err)
	}
	// A finished run takes no more steps and cannot be claimed; a cancel
	// changes nothing.
	final := mustDetail(t, cl, run.ID)
	_, err = cl.BeginStep(ctx, "d1", core.Step{Run: run.ID, Seq: 3, Kind: core.StepModel})
	wantCode(t, "a step after the end", err, wire.CodeInvalid)
	_, err = cl.ClaimRun(ctx, run.ID, "d2")
	wantCode(t, "claim of a finished run", err, wire.CodeInvalid)
	if c, err := cl.CancelRun(ctx, run.ID); err != nil || c.Cancel || c.State != core.RunDone {
		t.Errorf("cancel of a finished run: %+v %v", c, err)
	}
	_, err = cl.EndRun(ctx, run.ID, "d1", core.RunFailed, "again")
	wantCode(t, "a second end", err, wire.CodeInvalid)
	if got := mustDetail(t, cl, run.ID); !reflect.DeepEqual(got, final) {
		t.Errorf("a finished run changed:\n%+v\nwant\n%+v", got, final)
	}

	// Cancel asks a running run to stop; its driver ends it.
	other := mustCreateRun(t, cl, "second task", "d3")
	c, err := cl.CancelRun(ctx, other.ID)
	if err != nil || !c.Cancel || c.State != core.RunRunning {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if fin, err := cl.EndRun(ctx, other.ID, "d3", core.RunCancelled, "cancelled by user"); err != nil || fin.State != core.RunCancelled || fin.Error != "cancelled by user" {
		t.Fatalf("end cancelled run: %+v %v", fin, err)
	}
	runs, err := cl.Runs(ctx, "w", 0)
	if err != nil || len(runs) != 2 || runs[0].ID != other.ID || runs[1].ID != run.ID {
		t.Errorf("runs newest first: %+v %v", runs, err)
	}
	if runs, err := cl.Runs(ctx, "w", 1); err != nil || len(runs) != 1 || runs[0].ID != other.ID {
		t.Errorf("runs limit 1: %+v %v", runs, err)
	}
}

// stepEvent is one step as a follower saw it.
type stepEvent struct {
	Seq   int
	State core.StepState
}

// FollowRun streams each step when it begins and again when it ends, in
// order, while another goroutine drives the run, and returns when the run
// ends. The driver takes each next action only once the follower saw the
// last, so every state is seen however slowly the server polls.
func TestRunFollow(t *testing.T) {
	_, cl := runEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := mustCreateRun(t, cl, "follow me", "d")

	seen := make(chan stepEvent, 100)
	followed := make(chan error, 1)
	go func() {
		followed <- cl.FollowRun(ctx, run.ID, 0, true, func(st core.Step) error {
			seen <- stepEvent{st.Seq, st.State}
			return nil
		})
	}()
	next := func(want stepEvent) {
		t.Helper()
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("follower saw %+v, want %+v", got, want)
			}
		case err := <-followed:
			t.Fatalf("follow returned (%v) before %+v", err, want)
		case <-ctx.Done():
			t.Fatalf("follower never saw %+v", want)
		}
	}
	drove := make(chan error, 1)
	step := make(chan stepEvent)
	go func() {
		// The driver: each action waits for the test's go-ahead.
		defer close(drove)
		for ev := range step {
			var err error
			switch {
			case ev.Seq == 0:
				_, err = cl.EndRun(ctx, run.ID, "d", core.RunDone, "")
			case ev.State == "both":
				if _, err = cl.BeginStep(ctx, "d", core.Step{Run: run.ID, Seq: ev.Seq, Kind: core.StepTool, Tool: "read", Args: json.RawMessage(`{"path":"f"}`)}); err == nil {
					_, err = cl.EndStep(ctx, "d", core.Step{Run: run.ID, Seq: ev.Seq, Text: "x"})
				}
			case ev.State == core.StepStarted:
				_, err = cl.BeginStep(ctx, "d", core.Step{Run: run.ID, Seq: ev.Seq, Kind: core.StepModel})
			default:
				_, err = cl.EndStep(ctx, "d", core.Step{Run: run.ID, Seq: ev.Seq, Text: fmt.Sprint("answer ", ev.Seq)})
			}
			if err != nil {
				drove <- err
				return
			}
		}
	}()
	for seq := 1; seq <= 3; seq++ {
		for _, state := range []core.StepState{core.StepStarted, core.StepDone} {
			step <- stepEvent{seq, state}
			next(stepEvent{seq, state})
		}
	}
	// A step that begins and ends between two looks of the server is
	// still seen to begin, then to end.
	step <- stepEvent{4, "both"}
	next(stepEvent{4, core.StepStarted})
	next(stepEvent{4, core.StepDone})
	select {
	case err := <-followed:
		t.Fatalf("follow returned (%v) while the run goes on", err)
	case <-time.After(300 * time.Millisecond):
	}
	step <- stepEvent{}
	close(step)
	if err := <-drove; err != nil {
		t.Fatalf("driver: %v", err)
	}
	select {
	case err := <-followed:
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("follow did not return when the run ended")
	}
	if len(seen) != 0 {
		t.Errorf("the follower saw %d more events", len(seen))
	}

	// Without follow: the recorded steps after `after`, each once, final.
	var got []stepEvent
	if err := cl.FollowRun(ctx, run.ID, 1, false, func(st core.Step) error {
		got = append(got, stepEvent{st.Seq, st.State})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []stepEvent{{2, core.StepDone}, {3, core.StepDone}, {4, core.StepDone}}; !reflect.DeepEqual(got, want) {
		t.Errorf("steps after 1: %+v, want %+v", got, want)
	}
	// Following a run that already ended returns at once with its steps.
	got = nil
	if err := cl.FollowRun(ctx, run.ID, 0, true, func(st core.Step) error {
		got = append(got, stepEvent{st.Seq, st.State})
		return nil
	}); err != nil || len(got) != 4 {
		t.Errorf("follow of an ended run: %+v %v", got, err)
	}
}

// A run that ends with a step still open (its driver died mid-step and
// the run was ended by whoever took it over) ends the follow too; the
// open step is sent as it stands.
func TestRunFollowEndsWithOpenStep(t *testing.T) {
	_, cl := runEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := mustCreateRun(t, cl, "die mid-step", "d1")
	mustBegin(t, cl, "d1", run.ID, 1, "")
	mustEnd(t, cl, "d1", run.ID, 1, "ok")
	mustBegin(t, cl, "d1", run.ID, 2, "exec")
	if _, err := cl.ClaimRun(ctx, run.ID, "d2"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.EndRun(ctx, run.ID, "d2", core.RunFailed, "its driver died"); err != nil {
		t.Fatal(err)
	}
	for _, follow := range []bool{true, false} {
		var got []stepEvent
		err := cl.FollowRun(ctx, run.ID, 0, follow, func(st core.Step) error {
			got = append(got, stepEvent{st.Seq, st.State})
			return nil
		})
		if err != nil {
			t.Fatalf("follow=%v: %v (seen %+v)", follow, err, got)
		}
		if want := []stepEvent{{1, core.StepDone}, {2, core.StepStarted}}; !reflect.DeepEqual(got, want) {
			t.Errorf("follow=%v: %+v, want %+v", follow, got, want)
		}
	}
}

// A claim by a new driver takes the run over: the old driver's next step,
// its step's end and its end of the run are refused as conflicts and
// change nothing; the new driver goes on where the run stands.
func TestRunClaim(t *testing.T) {
	_, cl := runEnv(t)
	ctx := context.Background()
	run := mustCreateRun(t, cl, "resume me", "old")
	mustBegin(t, cl, "old", run.ID, 1, "")
	mustEnd(t, cl, "old", run.ID, 1, "first")
	mustBegin(t, cl, "old", run.ID, 2, "exec")
	claimed, err := cl.ClaimRun(ctx, run.ID, "new")
	if err != nil || claimed.Driver != "new" || claimed.State != core.RunRunning {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	before := mustDetail(t, cl, run.ID)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"end its open step", func() error {
			_, err := cl.EndStep(ctx, "old", core.Step{Run: run.ID, Seq: 2, Text: "stale"})
			return err
		}},
		{"begin the next step", func() error {
			_, err := cl.BeginStep(ctx, "old", core.Step{Run: run.ID, Seq: 3, Kind: core.StepModel})
			return err
		}},
		{"begin its open step again", func() error {
			_, err := cl.BeginStep(ctx, "old", core.Step{Run: run.ID, Seq: 2, Kind: core.StepTool, Tool: "exec"})
			return err
		}},
		{"end the run", func() error {
			_, err := cl.EndRun(ctx, run.ID, "old", core.RunDone, "")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantCode(t, "old driver", err, wire.CodeConflict)
			if !errors.Is(err, core.ErrConflict) {
				t.Errorf("errors.Is(%v, ErrConflict) = false", err)
			}
			if after := mustDetail(t, cl, run.ID); !reflect.DeepEqual(after, before) {
				t.Errorf("the old driver changed the run:\n%+v\nwant\n%+v", after, before)
			}
		})
	}
	// The new driver finds step 2 recorded as begun and ends it.
	if rec := mustBegin(t, cl, "new", run.ID, 2, "exec"); rec.State != core.StepStarted || !rec.Started.Equal(before.Steps[1].Started) {
		t.Errorf("the new driver's begin of step 2: %+v", rec)
	}
	mustEnd(t, cl, "new", run.ID, 2, "resumed")
	mustBegin(t, cl, "new", run.ID, 3, "")
	// A claim needs a driver.
	_, err = cl.ClaimRun(ctx, run.ID, "")
	wantCode(t, "claim without a driver", err, wire.CodeInvalid)
	if d := mustDetail(t, cl, run.ID); d.Run.Driver != "new" || d.Run.Steps != 3 {
		t.Errorf("run after the resume: %+v", d.Run)
	}
}

// Another tenant sees none of alice's runs, memories or skills, and can
// change none of them: every call answers not found.
func TestRunTenants(t *testing.T) {
	e, cl := runEnv(t)
	ctx := context.Background()
	run := mustCreateRun(t, cl, "alice's task", "d")
	mustBegin(t, cl, "d", run.ID, 1, "")
	mem, err := cl.AddMemory(ctx, "alice likes tabs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SaveSkill(ctx, core.Skill{Name: "deploy", Body: "alice's way"}); err != nil {
		t.Fatal(err)
	}
	before := mustDetail(t, cl, run.ID)
	bob := client.New(e.d.URL(), e.newToken("bob"))
	if _, err := bob.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		call func() error
		code string
	}{
		{"show", func() error { _, err := bob.Run(ctx, run.ID); return err }, wire.CodeNotFound},
		{"steps", func() error {
			return bob.FollowRun(ctx, run.ID, 0, false, func(core.Step) error { return errors.New("bob saw a step") })
		}, wire.CodeNotFound},
		{"follow", func() error {
			return bob.FollowRun(ctx, run.ID, 0, true, func(core.Step) error { return errors.New("bob saw a step") })
		}, wire.CodeNotFound},
		{"claim", func() error { _, err := bob.ClaimRun(ctx, run.ID, "bob"); return err }, wire.CodeNotFound},
		{"cancel", func() error { _, err := bob.CancelRun(ctx, run.ID); return err }, wire.CodeNotFound},
		{"begin step", func() error {
			_, err := bob.BeginStep(ctx, "d", core.Step{Run: run.ID, Seq: 2, Kind: core.StepModel})
			return err
		}, wire.CodeNotFound},
		{"end step", func() error {
			_, err := bob.EndStep(ctx, "d", core.Step{Run: run.ID, Seq: 1, Text: "bob's"})
			return err
		}, wire.CodeNotFound},
		{"end run", func() error { _, err := bob.EndRun(ctx, run.ID, "d", core.RunFailed, "bob"); return err }, wire.CodeNotFound},
		{"delete memory", func() error { return bob.DeleteMemory(ctx, mem.ID) }, wire.CodeNotFound},
		{"show skill", func() error { _, err := bob.Skill(ctx, "deploy"); return err }, wire.CodeNotFound},
		{"delete skill", func() error { return bob.DeleteSkill(ctx, "deploy") }, wire.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantCode(t, tc.name, err, tc.code)
			if err != nil && strings.Contains(err.Error(), "alice's task") {
				t.Errorf("the error tells bob alice's task: %v", err)
			}
		})
	}
	// Bob's own workspace of the same name has no runs, and his lists are empty.
	if runs, err := bob.Runs(ctx, "w", 0); err != nil || len(runs) != 0 {
		t.Errorf("bob's runs: %+v %v", runs, err)
	}
	if ms, err := bob.Memories(ctx); err != nil || len(ms) != 0 {
		t.Errorf("bob's memories: %+v %v", ms, err)
	}
	if sks, err := bob.Skills(ctx); err != nil || len(sks) != 0 {
		t.Errorf("bob's skills: %+v %v", sks, err)
	}
	// A skill of the same name is bob's own.
	if _, err := bob.SaveSkill(ctx, core.Skill{Name: "deploy", Body: "bob's way"}); err != nil {
		t.Fatal(err)
	}
	if sk, err := cl.Skill(ctx, "deploy"); err != nil || sk.Body != "alice's way" {
		t.Errorf("alice's skill after bob saved his: %+v %v", sk, err)
	}
	if sk, err := bob.Skill(ctx, "deploy"); err != nil || sk.Body != "bob's way" {
		t.Errorf("bob's skill: %+v %v", sk, err)
	}
	// Nothing of alice's changed.
	if after := mustDetail(t, cl, run.ID); !reflect.DeepEqual(after, before) {
		t.Errorf("alice's run changed:\n%+v\nwant\n%+v", after, before)
	}
	if ms, err := cl.Memories(ctx); err != nil || len(ms) != 1 || ms[0].ID != mem.ID {
		t.Errorf("alice's memories: %+v %v", ms, err)
	}
}

// Bad input gets 400 invalid and changes nothing.
func TestRunBadInput(t *testing.T) {
	e, cl := runEnv(t)
	ctx := context.Background()
	run := mustCreateRun(t, cl, "task", "d")
	mustBegin(t, cl, "d", run.ID, 1, "")
	mustEnd(t, cl, "d", run.ID, 1, "ok")
	before := mustDetail(t, cl, run.ID)
	create := func(req wire.CreateRun) func() error {
		return func() error { _, err := cl.CreateRun(ctx, "w", req); return err }
	}
	begin := func(st core.Step) func() error {
		st.Run = run.ID
		return func() error { _, err := cl.BeginStep(ctx, "d", st); return err }
	}
	raw := func(method, path, body string) func() error {
		return func() error {
			status, b := e.mustHTTP(method, path, nil, body)
			if status == http.StatusOK || status == http.StatusCreated {
				return nil
			}
			var we wire.Error
			if err := json.Unmarshal(b, &we); err != nil {
				return fmt.Errorf("status %d, body %q", status, b)
			}
			we.Status = status
			return &we
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"empty task", create(wire.CreateRun{Task: "", Driver: "d"})},
		{"blank task", create(wire.CreateRun{Task: " \n\t", Driver: "d"})},
		{"no driver", create(wire.CreateRun{Task: "t"})},
		{"bad timeout", create(wire.CreateRun{Task: "t", Driver: "d", Limits: core.RunLimits{Timeout: "forever"}})},
		{"negative timeout", create(wire.CreateRun{Task: "t", Driver: "d", Limits: core.RunLimits{Timeout: "-1m"}})},
		{"negative steps", create(wire.CreateRun{Task: "t", Driver: "d", Limits: core.RunLimits{MaxSteps: -1}})},
		{"unknown field", raw("POST", "/v1/workspaces/w/runs", `{"task": "t", "driver": "d", "priority": 1}`)},
		{"step seq gap", begin(core.Step{Seq: 3, Kind: core.StepModel})},
		{"step seq 0", begin(core.Step{Seq: 0, Kind: core.StepModel})},
		{"unknown step kind", begin(core.Step{Seq: 2, Kind: "dream"})},
		{"no step kind", begin(core.Step{Seq: 2})},
		{"tool step without a tool", begin(core.Step{Seq: 2, Kind: core.StepTool})},
		{"step seq in path and body differ", raw("PUT", "/v1/runs/"+run.ID+"/steps/1", `{"driver": "d", "step": {"seq": 2}}`)},
		{"step seq not a number", raw("PUT", "/v1/runs/"+run.ID+"/steps/one", `{"driver": "d", "step": {}}`)},
		{"end run not final", func() error { _, err := cl.EndRun(ctx, run.ID, "d", core.RunRunning, ""); return err }},
		{"end run unknown state", func() error { _, err := cl.EndRun(ctx, run.ID, "d", "paused", ""); return err }},
		{"bad JSON", raw("POST", "/v1/runs/"+run.ID+"/steps", `{"driver": "d", "step": `)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantCode(t, tc.name, err, wire.CodeInvalid)
			var we *wire.Error
			if errors.As(err, &we) && we.Status != http.StatusBadRequest {
				t.Errorf("status %d, want 400", we.Status)
			}
			if after := mustDetail(t, cl, run.ID); !reflect.DeepEqual(after, before) {
				t.Errorf("the run changed:\n%+v\nwant\n%+v", after, before)
			}
			if runs, err := cl.Runs(ctx, "w", 0); err != nil || len(runs) != 1 {
				t.Errorf("runs after a refused call: %d %v", len(runs), err)
			}
		})
	}
	t.Run("unknown run", func(t *testing.T) {
		_, err := cl.Run(ctx, "rnope")
		wantCode(t, "unknown run", err, wire.CodeNotFound)
		_, err = cl.EndStep(ctx, "d", core.Step{Run: run.ID, Seq: 5})
		wantCode(t, "end of a step never begun", err, wire.CodeNotFound)
		_, err = cl.CreateRun(ctx, "nope", wire.CreateRun{Task: "t", Driver: "d"})
		wantCode(t, "run on a missing workspace", err, wire.CodeWorkspaceNotFound)
	})
}

func TestMemories(t *testing.T) {
	e, cl := runEnv(t)
	ctx := context.Background()
	if ms, err := cl.Memories(ctx); err != nil || ms == nil || len(ms) != 0 {
		t.Fatalf("no memories: %#v %v", ms, err)
	}
	a, err := cl.AddMemory(ctx, "  the tests run with make test\n")
	if err != nil || a.ID == 0 || a.Text != "the tests run with make test" || a.Created.IsZero() {
		t.Fatalf("add: %+v %v", a, err)
	}
	b, err := cl.AddMemory(ctx, "use tabs")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := cl.Memories(ctx)
	if err != nil || len(ms) != 2 || ms[0].ID != a.ID || ms[1].ID != b.ID || ms[1].Text != "use tabs" {
		t.Fatalf("list, oldest first: %+v %v", ms, err)
	}
	if err := cl.DeleteMemory(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "delete twice", cl.DeleteMemory(ctx, a.ID), wire.CodeNotFound)
	if ms, err := cl.Memories(ctx); err != nil || len(ms) != 1 || ms[0].ID != b.ID {
		t.Fatalf("after delete: %+v %v", ms, err)
	}
	for _, tc := range []struct {
		name, text string
	}{
		{"empty", ""},
		{"blank", " \n "},
		{"too long", strings.Repeat("m", 4<<10+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.AddMemory(ctx, tc.text)
			wantCode(t, tc.name, err, wire.CodeInvalid)
			if ms, _ := cl.Memories(ctx); len(ms) != 1 {
				t.Errorf("%d memories after a refused add", len(ms))
			}
		})
	}
	status, body := e.mustHTTP("DELETE", "/v1/memories/abc", nil, "")
	if status != http.StatusBadRequest || !strings.Contains(string(body), wire.CodeInvalid) {
		t.Errorf("delete memory abc: %d %s", status, body)
	}
}

func TestSkills(t *testing.T) {
	e, cl := runEnv(t)
	ctx := context.Background()
	if sks, err := cl.Skills(ctx); err != nil || sks == nil || len(sks) != 0 {
		t.Fatalf("no skills: %#v %v", sks, err)
	}
	saved, err := cl.SaveSkill(ctx, core.Skill{Name: "release", Description: "cut a release", Body: "1. tag\n2. push"})
	if err != nil || saved.Name != "release" || saved.Updated.IsZero() {
		t.Fatalf("save: %+v %v", saved, err)
	}
	if _, err := cl.SaveSkill(ctx, core.Skill{Name: "a-first", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	sk, err := cl.Skill(ctx, "release")
	if err != nil || sk.Body != "1. tag\n2. push" || sk.Description != "cut a release" {
		t.Fatalf("show: %+v %v", sk, err)
	}
	sks, err := cl.Skills(ctx)
	if err != nil || len(sks) != 2 || sks[0].Name != "a-first" || sks[1].Name != "release" {
		t.Fatalf("list by name: %+v %v", sks, err)
	}
	for _, s := range sks {
		if s.Body != "" {
			t.Errorf("the list carries %s's body", s.Name)
		}
	}
	// Saving again replaces.
	if _, err := cl.SaveSkill(ctx, core.Skill{Name: "release", Body: "1. tag\n2. sign\n3. push"}); err != nil {
		t.Fatal(err)
	}
	if sk, err := cl.Skill(ctx, "release"); err != nil || sk.Body != "1. tag\n2. sign\n3. push" || sk.Description != "" {
		t.Errorf("after replace: %+v %v", sk, err)
	}
	if sks, _ := cl.Skills(ctx); len(sks) != 2 {
		t.Errorf("a replace added a skill: %+v", sks)
	}
	if err := cl.DeleteSkill(ctx, "a-first"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "delete twice", cl.DeleteSkill(ctx, "a-first"), wire.CodeNotFound)
	_, err = cl.Skill(ctx, "a-first")
	wantCode(t, "show deleted", err, wire.CodeNotFound)

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"empty body", func() error { _, err := cl.SaveSkill(ctx, core.Skill{Name: "s", Body: " "}); return err }},
		{"body too long", func() error {
			_, err := cl.SaveSkill(ctx, core.Skill{Name: "s", Body: strings.Repeat("b", 64<<10+1)})
			return err
		}},
		{"bad name", func() error { _, err := cl.SaveSkill(ctx, core.Skill{Name: "a b", Body: "x"}); return err }},
		{"names differ", func() error {
			status, body := e.mustHTTP("PUT", "/v1/skills/one", nil, `{"name": "two", "body": "x"}`)
			if status != http.StatusBadRequest {
				return fmt.Errorf("status %d %s", status, body)
			}
			var we wire.Error
			json.Unmarshal(body, &we)
			return &we
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.name, tc.call(), wire.CodeInvalid)
			if sks, _ := cl.Skills(ctx); len(sks) != 1 || sks[0].Name != "release" {
				t.Errorf("skills after a refused save: %+v", sks)
			}
		})
	}
}

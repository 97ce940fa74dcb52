package fsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"computerd/core"
)

// TestRuns checks a run's journal: steps numbered without gaps, a step
// begun twice recorded once, tokens and cost summed when steps end, a
// resume taking the run over from its old driver, and no steps after the
// run ends.
func TestRuns(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, core.Run{WS: w.ID, Task: " ", Driver: "d1"}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("empty task: %v", err)
	}
	r, err := s.CreateRun(ctx, core.Run{WS: w.ID, Task: "fix the build", Model: "m", Driver: "d1", Limits: core.RunLimits{MaxSteps: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != core.RunRunning || r.Tenant != "t" || r.WSName != "ws" || r.BaseRev != w.Head || r.Limits.MaxSteps != 5 {
		t.Fatalf("created %+v", r)
	}
	model := core.Step{Run: r.ID, Seq: 1, Kind: core.StepModel}
	st, begun, err := s.BeginStep(ctx, "d1", model)
	if err != nil || !begun || st.State != core.StepStarted {
		t.Fatalf("begin 1: %+v %v %v", st, begun, err)
	}
	if _, begun, err := s.BeginStep(ctx, "d1", model); err != nil || begun {
		t.Fatalf("begin 1 again: begun %v, %v; want the recorded step", begun, err)
	}
	if _, _, err := s.BeginStep(ctx, "d1", core.Step{Run: r.ID, Seq: 3, Kind: core.StepModel}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("step 3 after 1: %v", err)
	}
	calls := []core.ToolCall{{ID: "c1", Name: "exec", Args: json.RawMessage(`{"command":"make"}`)}}
	model.Text, model.Calls, model.InputTokens, model.OutputTokens, model.Cost = "building", calls, 100, 20, 0.5
	if _, err := s.EndStep(ctx, "d1", model); err != nil {
		t.Fatal(err)
	}
	// Ending it again adds nothing.
	if _, err := s.EndStep(ctx, "d1", model); err != nil {
		t.Fatal(err)
	}
	exit := 2
	tool := core.Step{Run: r.ID, Seq: 2, Kind: core.StepTool, Tool: "exec", CallID: "c1", Args: calls[0].Args}
	if _, _, err := s.BeginStep(ctx, "d1", tool); err != nil {
		t.Fatal(err)
	}
	// A resume takes the run over; the old driver can neither end its step
	// nor begin another.
	if _, err := s.ClaimRun(ctx, r.ID, "d2"); err != nil {
		t.Fatal(err)
	}
	tool.Text, tool.ExitCode, tool.ExecID, tool.IsError, tool.Code = "make: *** Error 2", &exit, "x1", true, "exit"
	if _, err := s.EndStep(ctx, "d1", tool); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("old driver ends a step: %v", err)
	}
	if _, err := s.EndStep(ctx, "d2", tool); err != nil {
		t.Fatal(err)
	}
	steps, err := s.Steps(ctx, r.ID, 0)
	if err != nil || len(steps) != 2 {
		t.Fatalf("steps %+v %v", steps, err)
	}
	if got := steps[0]; got.State != core.StepDone || got.Text != "building" || len(got.Calls) != 1 || string(got.Calls[0].Args) != `{"command":"make"}` {
		t.Errorf("model step read back %+v", got)
	}
	if got := steps[1]; got.ExitCode == nil || *got.ExitCode != 2 || got.ExecID != "x1" || !got.IsError || got.Code != "exit" || got.Tool != "exec" {
		t.Errorf("tool step read back %+v", got)
	}
	if later, _ := s.Steps(ctx, r.ID, 1); len(later) != 1 || later[0].Seq != 2 {
		t.Errorf("steps after 1: %+v", later)
	}
	r, _ = s.Run(ctx, r.ID)
	if r.Steps != 2 || r.InputTokens != 100 || r.OutputTokens != 20 || r.Cost != 0.5 || r.Driver != "d2" {
		t.Errorf("run totals %+v", r)
	}
	if r, err = s.CancelRun(ctx, r.ID); err != nil || !r.Cancel {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	if r, err = s.EndRun(ctx, r.ID, "d2", core.RunCancelled, ""); err != nil || r.State != core.RunCancelled || r.Ended.IsZero() {
		t.Fatalf("end: %+v %v", r, err)
	}
	if _, _, err := s.BeginStep(ctx, "d2", core.Step{Run: r.ID, Seq: 3, Kind: core.StepModel}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("step after the end: %v", err)
	}
	if _, err := s.ClaimRun(ctx, r.ID, "d3"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("claim of an ended run: %v", err)
	}
	if runs, err := s.Runs(ctx, w.Tenant, w.ID, 0); err != nil || len(runs) != 1 || runs[0].ID != r.ID {
		t.Errorf("runs %+v %v", runs, err)
	}
	if _, err := s.Run(ctx, "rnope"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
}

// TestMemoriesAndSkills checks a tenant's facts and procedures, and that
// another tenant sees neither.
func TestMemoriesAndSkills(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	m, err := s.AddMemory(ctx, "t", "tests run with make test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMemory(ctx, "t", "  "); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("empty memory: %v", err)
	}
	if got, _ := s.Memories(ctx, "u"); len(got) != 0 {
		t.Errorf("other tenant sees %v", got)
	}
	if err := s.DeleteMemory(ctx, "u", m.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("other tenant deletes: %v", err)
	}
	if got, _ := s.Memories(ctx, "t"); len(got) != 1 || got[0].Text != "tests run with make test" {
		t.Errorf("memories %v", got)
	}
	if err := s.DeleteMemory(ctx, "t", m.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Memories(ctx, "t"); len(got) != 0 {
		t.Errorf("after delete %v", got)
	}

	if _, err := s.SaveSkill(ctx, "t", core.Skill{Name: "../x", Body: "b"}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("bad name: %v", err)
	}
	for _, body := range []string{"run make", "run make test"} {
		if _, err := s.SaveSkill(ctx, "t", core.Skill{Name: "test", Description: "runs tests", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	if sk, err := s.Skill(ctx, "t", "test"); err != nil || sk.Body != "run make test" {
		t.Errorf("skill %+v %v", sk, err)
	}
	if _, err := s.Skill(ctx, "u", "test"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("other tenant's skill: %v", err)
	}
	if got, _ := s.Skills(ctx, "t"); len(got) != 1 || got[0].Name != "test" || got[0].Body != "" {
		t.Errorf("skills %+v", got)
	}
	if err := s.DeleteSkill(ctx, "t", "test"); err != nil {
		t.Fatal(err)
	}
}

package fsstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// TestRunLease checks what a run records for a resume and its driver's
// lease: the base URL and lease read back; steps and renewals keep the
// run running; a lease run out reads as interrupted (in Run and Runs);
// a driver that stops says so (interrupted, not ended); a claim makes it
// running again, with the model it names; an interrupted run is
// cancelled at once; and the tenant's records still add up.
func TestRunLease(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	now := time.Unix(1_800_000_000, 0)
	s.Now = func() time.Time { return now }
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []core.Run{
		{WS: w.ID, Task: "t", Driver: "d", Lease: "1ms"},
		{WS: w.ID, Task: "t", Driver: "d", Lease: "2h"},
		{WS: w.ID, Task: "t", Driver: "d", Lease: "soon"},
		{WS: w.ID, Task: "t", Driver: "d", BaseURL: strings.Repeat("u", fsstore.MaxRunBaseURL+1)},
	} {
		if _, err := s.CreateRun(ctx, bad); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("create with lease %q, base URL of %d bytes: %v, want invalid", bad.Lease, len(bad.BaseURL), err)
		}
	}
	r, err := s.CreateRun(ctx, core.Run{WS: w.ID, Task: "fix it", Provider: "openai", Model: "m1", BaseURL: "http://127.0.0.1:8080/v1", Driver: "d1", Lease: "10s"})
	if err != nil {
		t.Fatal(err)
	}
	if r.BaseURL != "http://127.0.0.1:8080/v1" || r.Lease != "10s" || !r.Renewed.Equal(now) || r.State != core.RunRunning {
		t.Fatalf("created %+v", r)
	}
	state := func(want core.RunState) core.Run {
		t.Helper()
		got, err := s.Run(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.Runs(ctx, "t", w.ID, 0)
		if err != nil || len(list) != 1 {
			t.Fatalf("runs %v %v", list, err)
		}
		if got.State != want || list[0].State != want {
			t.Fatalf("at %s: run %s, listed %s, want %s (%s)", now.Format(time.TimeOnly), got.State, list[0].State, want, got.Error)
		}
		return got
	}

	// Steps and renewals keep it.
	now = now.Add(8 * time.Second)
	if _, _, err := s.BeginStep(ctx, "d1", core.Step{Run: r.ID, Seq: 1, Kind: core.StepModel}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(8 * time.Second)
	state(core.RunRunning)
	if _, err := s.RenewRun(ctx, r.ID, "d2"); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("renewal by another driver: %v, want conflict", err)
	}
	if _, err := s.RenewRun(ctx, r.ID, "d1"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(9 * time.Second)
	state(core.RunRunning)

	// No renewal for the lease: interrupted, and saying why.
	now = now.Add(2 * time.Second)
	if got := state(core.RunInterrupted); !strings.Contains(got.Error, "lease of 10s ran out") || !got.Ended.IsZero() {
		t.Fatalf("lease run out: %+v", got)
	}
	// The driver was only slow: its step still counts, and renews.
	if _, err := s.EndStep(ctx, "d1", core.Step{Run: r.ID, Seq: 1, Kind: core.StepModel, Text: "thinking"}); err != nil {
		t.Fatal(err)
	}
	state(core.RunRunning)

	// A driver that stops says so: interrupted, not ended.
	if _, err := s.EndRun(ctx, r.ID, "d1", core.RunInterrupted, "model: connection refused"); err != nil {
		t.Fatal(err)
	}
	if got := state(core.RunInterrupted); got.Error != "model: connection refused" || !got.Ended.IsZero() {
		t.Fatalf("interrupted by its driver: %+v", got)
	}

	// A claim takes it forward, with the model it names.
	c, err := s.ClaimRunWith(ctx, r.ID, fsstore.RunClaim{Driver: "d2", Lease: "20s", BaseURL: "http://127.0.0.1:9090/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.State != core.RunRunning || c.Error != "" || c.Driver != "d2" || c.Lease != "20s" || c.BaseURL != "http://127.0.0.1:9090/v1" ||
		c.Provider != "openai" || c.Model != "m1" {
		t.Fatalf("claimed %+v", c)
	}
	now = now.Add(15 * time.Second)
	state(core.RunRunning)

	// Cancelled while a driver holds it: a mark for the driver. Once no
	// driver does: cancelled at once.
	if got, err := s.CancelRun(ctx, r.ID); err != nil || got.State != core.RunRunning || !got.Cancel {
		t.Fatalf("cancel a running run: %+v %v", got, err)
	}
	now = now.Add(10 * time.Second)
	state(core.RunInterrupted)
	if got, err := s.CancelRun(ctx, r.ID); err != nil || got.State != core.RunCancelled || got.Ended.IsZero() {
		t.Fatalf("cancel an interrupted run: %+v %v", got, err)
	}
	if _, err := s.ClaimRun(ctx, r.ID, "d3"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("claim of a cancelled run: %v", err)
	}

	// A run with no lease (its driver asked for none) never reads as
	// interrupted.
	old, err := s.CreateRun(ctx, core.Run{WS: w.ID, Task: "no lease", Driver: "d"})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(24 * time.Hour)
	if got, err := s.Run(ctx, old.ID); err != nil || got.State != core.RunRunning || got.Lease != "" {
		t.Fatalf("a run without a lease a day later: %+v %v", got, err)
	}
	if rep, err := s.Check(ctx, fsstore.CheckOptions{}); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %v %v", rep, err)
	}
}

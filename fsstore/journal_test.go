package fsstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

func TestJournal(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	e, started, err := s.BeginExec(ctx, core.Exec{Tenant: "t", WS: w.ID, Key: "k1", Argv: []string{"make"}, BaseRev: 1})
	if err != nil || !started || e.ID == "" || e.State != core.ExecRunning {
		t.Fatalf("begin: %+v %v %v", e, started, err)
	}
	again, started, err := s.BeginExec(ctx, core.Exec{Tenant: "t", WS: w.ID, Key: "k1", Argv: []string{"other"}})
	if err != nil || started || again.ID != e.ID || again.Argv[0] != "make" {
		t.Fatalf("same key: %+v started=%v %v, want the first record", again, started, err)
	}
	// The same key in another tenant or workspace is another exec.
	if _, started, _ := s.BeginExec(ctx, core.Exec{Tenant: "u", WS: w.ID, Key: "k1"}); !started {
		t.Fatal("key shared across tenants")
	}
	second, _, err := s.BeginExec(ctx, core.Exec{Tenant: "t", WS: w.ID})
	if err != nil {
		t.Fatal(err)
	}
	running, err := s.ExecsInState(ctx, core.ExecRunning)
	if err != nil || len(running) != 3 {
		t.Fatalf("running: %d %v", len(running), err)
	}

	var b core.Batch
	b.WriteFile("out.txt", []byte("x"), 0o644)
	rev, err := s.Commit(ctx, w.ID, &b, fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: e.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.ExecRevision(ctx, w.ID, e.ID); err != nil || got != rev.Rev {
		t.Fatalf("ExecRevision = %d %v, want %d", got, err, rev.Rev)
	}
	if got, _ := s.ExecRevision(ctx, w.ID, second.ID); got != 0 {
		t.Fatalf("ExecRevision of an exec that committed nothing = %d", got)
	}
	e.State, e.ExitCode, e.Rev = core.ExecExited, 3, rev.Rev
	if err := s.UpdateExec(ctx, e); err != nil {
		t.Fatal(err)
	}
	got, err := s.ExecByID(ctx, e.ID)
	if err != nil || got.State != core.ExecExited || got.ExitCode != 3 || got.Rev != rev.Rev {
		t.Fatalf("after update: %+v %v", got, err)
	}
	// Only t's own: the record of tenant u naming t's workspace is not listed.
	list, err := s.Execs(ctx, w.Tenant, w.ID, 0)
	if err != nil || len(list) != 2 || list[len(list)-1].ID != e.ID {
		t.Fatalf("Execs: %+v %v", list, err)
	}
	if _, err := s.ExecByID(ctx, "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("missing exec: %v", err)
	}
	if err := s.UpdateExec(ctx, core.Exec{ID: "nope"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("update of a missing exec: %v", err)
	}
}

// Reads after Close fail with core.ErrClosed, not a raw database error.
func TestReadsAfterClose(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("f", []byte("x"), 0o644), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := sn.Stat(ctx, "f"); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Stat after Close: %v", err)
	}
	if _, err := sn.ReadFile(ctx, "f"); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("ReadFile after Close: %v", err)
	}
	if _, err := s.Snapshot(ctx, w.ID, core.Head); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Snapshot after Close: %v", err)
	}
}

// Every field of an exec record survives the journal's columns.
func TestJournalRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 12, 1, 9, 30, 0, 123456789, time.FixedZone("", -5*3600))
	tests := []struct {
		name string
		e    core.Exec
	}{
		{"bare", core.Exec{ID: "x1", Tenant: "t", WS: w.ID, State: core.ExecRunning, Started: started}},
		{"every field", core.Exec{ID: "x2", Tenant: "t", WS: w.ID, WSName: "w", Key: "k", Argv: []string{"sh", "-c", `echo "a\tb" > f`},
			Cwd: "d", EnvNames: []string{"A", "B"}, BaseRev: 1, State: core.ExecPending, Started: started,
			Ended: started.Add(1500 * time.Millisecond), ExitCode: 130, Signal: "SIGINT", TimedOut: true,
			StdoutBytes: 1 << 40, StderrBytes: 7, Rev: 4, Conflict: []string{"f", "g/h"}, KeptAs: "w.conflict-x2",
			Draft: 12, Error: "waiting; for the home", Executor: "ex", HomeBase: 9, PendingState: core.ExecKilled,
			OutputTruncated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := s.BeginExec(ctx, tt.e); err != nil {
				t.Fatal(err)
			}
			got, err := s.ExecByID(ctx, tt.e.ID)
			if err != nil || !sameExec(got, tt.e) {
				t.Fatalf("read back:\n got %+v %v\nwant %+v", got, err, tt.e)
			}
		})
	}
	// A state the journal has no stored name for is refused, not written.
	if err := s.UpdateExec(ctx, core.Exec{ID: "x1", Tenant: "t", WS: w.ID, State: "done"}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("update to an unknown state: %v", err)
	}
}

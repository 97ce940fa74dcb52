package fsstore_test

import (
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// openFixture opens a copy of a gzipped store in testdata with today's
// code, which migrates it.
func openFixture(t *testing.T, name string) *fsstore.Store {
	t.Helper()
	in, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	s := fsstore.New(dir)
	if err := s.Open(context.Background()); err != nil {
		t.Fatalf("open a store of migration 11: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A store written before the journal had columns of its own (exec records
// as core.Exec JSON, testdata/README.md) opens, and every record reads
// back as the old code wrote it.
func TestMigrateJournalFromJSON(t *testing.T) {
	ctx := context.Background()
	s := openFixture(t, "store-v11.db.gz")
	plus2 := time.FixedZone("", 2*3600)
	utc := func(h, m, sec, ns int) time.Time { return time.Date(2026, 12, 1, h, m, sec, ns, time.UTC) }
	want := []core.Exec{
		{ID: "x0000000000000001", Tenant: "alice", WS: 1, WSName: "w", Key: "k1",
			Argv: []string{"sh", "-c", "echo hi > b.txt"}, Cwd: "sub", EnvNames: []string{"HOME", "PATH"}, BaseRev: 2,
			State: core.ExecExited, Started: time.Date(2026, 12, 1, 12, 0, 0, 5, plus2),
			Ended: time.Date(2026, 12, 1, 12, 0, 1, 987654321, plus2), StdoutBytes: 3, Rev: 3},
		{ID: "x0000000000000002", Tenant: "alice", WS: 1, WSName: "w", Argv: []string{"sleep", "100"}, BaseRev: 3,
			State: core.ExecTimeout, Started: utc(11, 0, 0, 0), Ended: utc(11, 0, 10, 0),
			ExitCode: 137, Signal: "SIGKILL", TimedOut: true, StderrBytes: 42, Error: "deadline exceeded"},
		{ID: "x0000000000000003", Tenant: "alice", WS: 1, WSName: "w", Key: "k3", Argv: []string{"make"}, BaseRev: 3,
			State: core.ExecPending, Started: utc(13, 0, 0, 100), Ended: utc(13, 0, 2, 500000000), ExitCode: 2,
			Conflict: []string{"a.txt", "b.txt"}, KeptAs: "w.conflict-x0000000000000003", Draft: 9,
			Error: "waiting for the home", Executor: "ex1", HomeBase: 4, PendingState: core.ExecExited},
		{ID: "x0000000000000004", Tenant: "alice", WS: 1, WSName: "w", Argv: []string{"true"}, BaseRev: 3,
			State: core.ExecRunning, Started: utc(14, 0, 0, 0)},
		{ID: "x0000000000000005", Tenant: "bob", WS: 5, WSName: "w", Key: "k1",
			State: core.ExecInterrupted, Started: utc(15, 0, 0, 0)},
	}
	for _, w := range want {
		got, err := s.ExecByID(ctx, w.ID)
		if err != nil {
			t.Fatalf("exec %s: %v", w.ID, err)
		}
		if !sameExec(got, w) {
			t.Errorf("exec %s after migration:\n got %+v\nwant %+v", w.ID, got, w)
		}
	}
	// The columns the old schema indexed by still answer.
	list, err := s.Execs(ctx, "alice", 1, 0)
	if err != nil || len(list) != 4 || list[0].ID != "x0000000000000004" || list[3].ID != "x0000000000000001" {
		t.Fatalf("Execs of w, newest first: %+v %v", list, err)
	}
	for state, ids := range map[core.ExecState][]string{
		core.ExecPending: {"x0000000000000003"}, core.ExecRunning: {"x0000000000000004"}, core.ExecExited: {"x0000000000000001"},
	} {
		list, err := s.ExecsInState(ctx, state)
		var got []string
		for _, e := range list {
			got = append(got, e.ID)
		}
		if err != nil || !reflect.DeepEqual(got, ids) {
			t.Errorf("ExecsInState(%s) = %v %v, want %v", state, got, err, ids)
		}
	}
	// Idempotency keys still find their exec, per tenant and workspace.
	again, started, err := s.BeginExec(ctx, core.Exec{Tenant: "alice", WS: 1, Key: "k1", Argv: []string{"other"}})
	if err != nil || started || again.ID != "x0000000000000001" {
		t.Fatalf("BeginExec with a key of a migrated exec: %+v started=%v %v", again, started, err)
	}
	// A migrated record updates like a new one.
	e := want[3]
	e.State, e.Ended, e.ExitCode = core.ExecExited, utc(14, 0, 1, 0), 1
	if err := s.UpdateExec(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ExecByID(ctx, e.ID); err != nil || !sameExec(got, e) {
		t.Fatalf("migrated exec after update: %+v %v", got, err)
	}
}

// A migrated store's workspaces and revisions read back as the old code wrote them.
func TestMigrateRevisions(t *testing.T) {
	ctx := context.Background()
	s := openFixture(t, "store-v11.db.gz")
	at := func(ns int64) time.Time { return time.Unix(0, ns) }
	want := map[string][]core.Revision{
		"w": {
			{Rev: 3, Time: at(1796119203123456789), Source: "exec", Tenant: "alice", ExecID: "x0000000000000001", Message: "sh -c echo hi > b.txt", Changes: 1},
			{Rev: 2, Time: at(1796119202123456789), Source: "api", Tenant: "alice", Message: "write a.txt", Changes: 1},
			{Rev: 1, Time: at(1796119201123456789), Source: "create", Tenant: "alice"},
		},
		"w2": {{Rev: 1, Time: at(1796119204123456789), Source: "fork", Tenant: "alice", Message: "fork of w@2"}},
		"m": {
			{Rev: 2, Time: at(1796119206123456789), Source: "sync", Tenant: "alice", Message: "mirror of home@7", Changes: 1},
			{Rev: 1, Time: at(1796119205123456789), Source: "create", Tenant: "alice"},
		},
		"m2": {
			{Rev: 3, Time: at(1796119209123456789), Source: "api", Tenant: "alice", Changes: 1},
			{Rev: 2, Time: at(1796119208123456789), Source: "sync", Tenant: "alice", Message: "mirror of home@3", Changes: 1},
			{Rev: 1, Time: at(1796119207123456789), Source: "create", Tenant: "alice"},
		},
	}
	for name, revs := range want {
		w, err := s.Workspace(ctx, "alice", name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Log(ctx, w.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(revs) {
			t.Fatalf("log of %s: %+v", name, got)
		}
		for i := range got {
			if !got[i].Time.Equal(revs[i].Time) {
				t.Errorf("%s@%d time %v, want %v", name, got[i].Rev, got[i].Time, revs[i].Time)
			}
			got[i].Time = revs[i].Time
			if got[i] != revs[i] {
				t.Errorf("%s@%d = %+v, want %+v", name, got[i].Rev, got[i], revs[i])
			}
		}
	}
	w, _ := s.Workspace(ctx, "alice", "w")
	for p, content := range map[string]string{"a.txt": "alpha\n", "b.txt": "hi\n"} {
		sn, err := s.Snapshot(ctx, w.ID, core.Head)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := sn.ReadFile(ctx, p); err != nil || string(got) != content {
			t.Errorf("w/%s = %q %v", p, got, err)
		}
	}
}

// sameExec compares exec records, times by instant (a time read back from
// the store is in the local zone).
func sameExec(a, b core.Exec) bool {
	if !a.Started.Equal(b.Started) || !a.Ended.Equal(b.Ended) {
		return false
	}
	a.Started, a.Ended, b.Started, b.Ended = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// A migrated mirror equals the home revision its head's message named;
// one changed locally since equals none.
func TestMigrateMirrors(t *testing.T) {
	ctx := context.Background()
	s := openFixture(t, "store-v11.db.gz")
	tests := []struct {
		name         string
		rev, homeRev int64
	}{
		{"m", 2, 7},  // head: "mirror of home@7"
		{"m2", 0, 0}, // head: an API commit after "mirror of home@3"
		{"w", 0, 0},  // never a mirror
	}
	for _, tt := range tests {
		w, err := s.Workspace(ctx, "alice", tt.name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Mirror(ctx, w.ID)
		if err != nil || m.Rev != tt.rev || m.HomeRev != tt.homeRev || m.HomeWS != 0 {
			t.Errorf("mirror %s: local@%d = home %d@%d %v, want local@%d = home@%d of an unknown workspace", tt.name, m.Rev, m.HomeWS, m.HomeRev, err, tt.rev, tt.homeRev)
		}
	}
}

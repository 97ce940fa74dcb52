package fsstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// A deleted workspace's id is never given out again, to any tenant, and
// what was keyed by it (journal, runs and their steps) goes with it.
func TestDeletedWorkspaceIDNotReused(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	var deleted []int64
	var deletedExecs []string
	s.OnDelete = func(ws int64, execs []string) {
		deleted = append(deleted, ws)
		deletedExecs = append(deletedExecs, execs...)
	}
	seen := map[int64]bool{}
	alice, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	seen[alice.ID] = true
	e, _, err := s.BeginExec(ctx, core.Exec{Tenant: "alice", WS: alice.ID, Key: "k", Argv: []string{"cat", "secret.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, core.Run{WS: alice.ID, Task: "alice's secret task", Driver: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.BeginStep(ctx, "d", core.Step{Run: run.ID, Seq: 1, Kind: core.StepModel}); err != nil {
		t.Fatal(err)
	}
	mem, err := s.AddMemory(ctx, "alice", "a fact")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMemory(ctx, "alice", mem.ID); err != nil {
		t.Fatal(err)
	}
	draft, err := s.CreateDraft(ctx, alice.ID, core.Head, "exec-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorkspace(ctx, alice.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WorkspaceByID(ctx, draft.ID); !errors.Is(err, core.ErrWorkspaceNotFound) {
		t.Errorf("draft of a deleted workspace: %v, want not found", err)
	}
	if !slices.Equal(deleted, []int64{alice.ID}) || !slices.Equal(deletedExecs, []string{e.ID}) {
		t.Fatalf("OnDelete saw %v %v, want [%d] [%s]", deleted, deletedExecs, alice.ID, e.ID)
	}
	if _, err := s.ExecByID(ctx, e.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("exec of a deleted workspace: %v, want not found", err)
	}
	if _, err := s.Run(ctx, run.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("run of a deleted workspace: %v, want not found", err)
	}
	if steps, err := s.Steps(ctx, run.ID, 0); err != nil || len(steps) != 0 {
		t.Errorf("steps of a deleted run: %v %v", steps, err)
	}
	// New workspaces (created, forked, drafts) never get an id seen before.
	for i, tenant := range []string{"bob", "bob", "alice"} {
		w, err := s.CreateWorkspace(ctx, tenant, "w"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.Fork(ctx, w.ID, core.Head, "f"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.CreateDraft(ctx, w.ID, core.Head, "d")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []int64{w.ID, f.ID, d.ID} {
			if seen[id] {
				t.Fatalf("id %d given out twice", id)
			}
			seen[id] = true
		}
		if execs, err := s.Execs(ctx, tenant, w.ID, 0); err != nil || len(execs) != 0 {
			t.Fatalf("execs of a new workspace: %v %v", execs, err)
		}
		if runs, err := s.Runs(ctx, tenant, w.ID, 0); err != nil || len(runs) != 0 {
			t.Fatalf("runs of a new workspace: %v %v", runs, err)
		}
		for _, id := range []int64{d.ID, f.ID, w.ID} {
			if err := s.DeleteWorkspace(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The same for memories.
	m2, err := s.AddMemory(ctx, "bob", "another fact")
	if err != nil || m2.ID == mem.ID {
		t.Fatalf("memory id after a deleted one: %d (deleted %d) %v", m2.ID, mem.ID, err)
	}
}

// A store that gave a deleted workspace's id to another tenant before
// ids were counted (its schema before migration 50) loses, when it is
// opened, the journal and runs that the id carried to the new owner, and
// never gives out an id any table still names.
func TestMigrationPurgesReusedIDs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := fsstore.New(dir)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	bob, err := s.CreateWorkspace(ctx, "bob", "w")
	if err != nil {
		t.Fatal(err)
	}
	own, _, err := s.BeginExec(ctx, core.Exec{Tenant: "bob", WS: bob.ID, Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	ownRun, err := s.CreateRun(ctx, core.Run{WS: bob.ID, Task: "bob's", Driver: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What the old schema left: alice's journal, run and step under the
	// id bob now holds, an exec of a workspace id no row has any more,
	// and no counters.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO execs(id, tenant, ws, ws_name, argv, state, started_ns) SELECT 'xalice', 'alice', id, 'w', '["cat","secret.txt"]', 'exited', 1 FROM workspaces WHERE tenant = 'bob'`,
		`INSERT INTO execs(id, tenant, ws, ws_name, argv, state, started_ns) VALUES ('xgone', 'alice', 99, 'old', '[]', 'exited', 1)`,
		`INSERT INTO runs(id, tenant, ws, task, state, created_ns, base_rev) SELECT 'ralice', 'alice', id, 'secret task', 'done', 1, 1 FROM workspaces WHERE tenant = 'bob'`,
		`INSERT INTO run_steps(run, seq, kind, state, started_ns) VALUES ('ralice', 1, 'model', 'ended', 1)`,
		`DELETE FROM counters WHERE name IN ('workspace', 'memory')`,
		`DELETE FROM schema_migrations WHERE version = 50`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = fsstore.New(dir)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"xalice", "xgone"} {
		if _, err := s.ExecByID(ctx, id); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("exec %s after migration: %v, want not found", id, err)
		}
	}
	if _, err := s.Run(ctx, "ralice"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("alice's run under bob's id after migration: %v", err)
	}
	if _, err := s.ExecByID(ctx, own.ID); err != nil {
		t.Errorf("bob's own exec after migration: %v", err)
	}
	if _, err := s.Run(ctx, ownRun.ID); err != nil {
		t.Errorf("bob's own run after migration: %v", err)
	}
	w, err := s.CreateWorkspace(ctx, "carol", "w")
	if err != nil {
		t.Fatal(err)
	}
	if w.ID <= 99 {
		t.Errorf("new workspace id %d, want past 99 (named by an old exec)", w.ID)
	}
}

// recordsQuery recomputes what tenant ?1's records weigh from the rows
// themselves (what migration 0051's triggers keep in tenant_usage).
const recordsQuery = `SELECT COALESCE((SELECT records FROM tenant_records WHERE tenant = ?1), 0)`

// The records a tenant keeps are counted as they are written, rewritten
// and deleted, whatever the order, and match the rows at every step.
func TestRecordsUsage(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	db := bbOpenDB(t, s)
	check := func(when string) {
		t.Helper()
		for _, tenant := range []string{"alice", "bob"} {
			u, err := s.Usage(ctx, tenant)
			if err != nil {
				t.Fatal(err)
			}
			if want := bbCount(t, db, recordsQuery, tenant); u.Records != want || u.Total != u.Bytes+u.Records {
				t.Fatalf("%s: %s's usage %+v, records by the rows %d", when, tenant, u, want)
			}
		}
	}
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	e, _, err := s.BeginExec(ctx, core.Exec{Tenant: "alice", WS: w.ID, Key: "k", Argv: []string{"make", "test"}, Cwd: "src"})
	if err != nil {
		t.Fatal(err)
	}
	check("an exec begun")
	e.State, e.Error, e.OutputKept = core.ExecExited, "some error text", 12345
	if err := s.UpdateExec(ctx, e); err != nil {
		t.Fatal(err)
	}
	check("an exec ended with its output kept")
	if err := s.OutputExpired(ctx, []string{e.ID}); err != nil {
		t.Fatal(err)
	}
	check("its output expired")
	r, err := s.CreateRun(ctx, core.Run{WS: w.ID, Task: "a task", Driver: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.BeginStep(ctx, "d", core.Step{Run: r.ID, Seq: 1, Kind: core.StepTool, Tool: "read", CallID: "c1", Args: []byte(`{"path":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	check("a step begun")
	if _, err := s.EndStep(ctx, "d", core.Step{Run: r.ID, Seq: 1, Text: "the file's text", Code: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndRun(ctx, r.ID, "d", core.RunDone, "the end"); err != nil {
		t.Fatal(err)
	}
	check("a step and its run ended")
	m, err := s.AddMemory(ctx, "bob", "bob's fact")
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "a longer body"} {
		if _, err := s.SaveSkill(ctx, "alice", core.Skill{Name: "sk", Description: "d", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	check("memories and skills saved")
	if err := s.DeleteMemory(ctx, "bob", m.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSkill(ctx, "alice", "sk"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorkspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	check("all deleted")
	if u, _ := s.Usage(ctx, "alice"); u.Records != 0 {
		t.Fatalf("alice keeps nothing but counts %d bytes of records", u.Records)
	}
	// fsck recounts records, and says when the count is off.
	if _, err := s.AddMemory(ctx, "bob", "kept"); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Check(ctx, fsstore.CheckOptions{}); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("fsck: %+v %v", rep, err)
	}
	rw, err := sql.Open("sqlite", "file:"+filepath.Join(s.Dir, "store.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.ExecContext(ctx, `UPDATE tenant_usage SET records = records + 1 WHERE tenant = 'bob'`); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check(ctx, fsstore.CheckOptions{})
	if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "records") {
		t.Fatalf("fsck of a records count off by one: %+v %v", rep, err)
	}
}

// A store made before records were counted counts them once opened.
func TestMigrateRecordsUsage(t *testing.T) {
	s := openFixture(t, "store-v11.db.gz")
	db := bbOpenDB(t, s)
	for _, tenant := range []string{"alice", "bob"} {
		u, err := s.Usage(context.Background(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		if want := bbCount(t, db, recordsQuery, tenant); want == 0 || u.Records != want {
			t.Fatalf("%s's records after migration: %d, by the rows %d", tenant, u.Records, want)
		}
	}
}

package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// Output logs expire after OutputRetention; the journal record stays, and
// following an expired exec gives just its exit event.
func TestOutputRetention(t *testing.T) {
	ctx := context.Background()
	st := fsstore.New(t.TempDir())
	if err := st.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &Runner{Store: st, Dir: t.TempDir(), OutputRetention: time.Hour}
	r.defaults()
	os.MkdirAll(filepath.Join(r.Dir, "output"), 0o700)

	w, _ := st.CreateWorkspace(ctx, "t", "w")
	rec, _, err := st.BeginExec(ctx, core.Exec{Tenant: "t", WS: w.ID, Argv: []string{"echo", "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	log, err := createOutputLog(r.outputPath(rec.ID), MaxOutput, "the exec output cap")
	if err != nil {
		t.Fatal(err)
	}
	log.output("stdout", []byte("hi\n"))
	rec.State, rec.Ended = core.ExecExited, time.Now()
	st.UpdateExec(ctx, rec)
	log.finish(rec)

	follow := func() []wire.ExecEvent {
		var evs []wire.ExecEvent
		if err := r.Follow(ctx, rec.ID, func(ev wire.ExecEvent) error { evs = append(evs, ev); return nil }); err != nil {
			t.Fatal(err)
		}
		return evs
	}
	if evs := follow(); len(evs) != 2 || evs[0].Data != "hi\n" || evs[1].Type != "exit" || evs[1].Exec.State != core.ExecExited {
		t.Fatalf("fresh log: %+v", evs)
	}
	r.pruneOutput()
	if _, err := os.Stat(r.outputPath(rec.ID)); err != nil {
		t.Fatal("a fresh log was pruned")
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(r.outputPath(rec.ID), old, old)
	r.pruneOutput()
	if _, err := os.Stat(r.outputPath(rec.ID)); !os.IsNotExist(err) {
		t.Fatalf("an expired log is still there: %v", err)
	}
	if evs := follow(); len(evs) != 1 || evs[0].Type != "exit" || evs[0].Exec.ID != rec.ID {
		t.Fatalf("expired log: %+v", evs)
	}
}

package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"computerd/computerd/runner"
	"computerd/computerd/sandbox"
	"computerd/core"
	"computerd/fsstore"
)

// TestCloseEndsTheRunner: Close ends the goroutines Open started, and the
// runner refuses execs from then on, recording none.
func TestCloseEndsTheRunner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (the sandbox's sweep)")
	}
	ctx := context.Background()
	st := fsstore.New(t.TempDir())
	if err := st.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := st.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &runner.Runner{Store: st, Sandbox: &sandbox.Manager{StateDir: filepath.Join(dir, "sandbox")}, Dir: dir}
	if err := r.Close(ctx); err != nil {
		t.Fatalf("close before open: %v", err)
	}
	r = &runner.Runner{Store: st, Sandbox: &sandbox.Manager{StateDir: filepath.Join(dir, "sandbox")}, Dir: dir}
	before := runtime.NumGoroutine()
	openCtx, cancel := context.WithCancel(ctx)
	if err := r.Open(openCtx); err != nil {
		t.Fatal(err)
	}
	cancel() // the start's context ending does not stop the runner
	if got := runtime.NumGoroutine(); got <= before {
		t.Errorf("%d goroutines after Open, %d before: its loop is not running", got, before)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > before {
		t.Errorf("%d goroutines after Close, %d before Open", got, before)
	}
	_, err = r.Start(ctx, runner.Request{Workspace: w, Tenant: "t", Argv: []string{"true"}})
	if !errors.Is(err, core.ErrClosed) {
		t.Errorf("exec after Close: %v, want ErrClosed", err)
	}
	if execs, _ := st.Execs(ctx, w.Tenant, w.ID, 0); len(execs) != 0 {
		t.Errorf("exec after Close recorded: %+v", execs)
	}
}

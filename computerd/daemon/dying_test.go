package daemon

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"computerd/computerd/fusefs"
	"computerd/fsstore"
)

// dyingChildEnv names the data directory of the process
// TestDyingHolderChild plays.
const dyingChildEnv = "COMPUTERD_TEST_DYING_CHILD"

// TestDyingHolderChild is not a test: it is the process that
// TestReleaseDyingHolder kills. It takes a data directory's lock, serves a
// FUSE file system under it, and looks a name up in it that its own server
// never answers (as the kernel does for computerd while it makes an exec's
// overlay on its revision view).
func TestDyingHolderChild(t *testing.T) {
	dir := os.Getenv(dyingChildEnv)
	if dir == "" {
		t.Skip("run by TestReleaseDyingHolder")
	}
	st := fsstore.New(dir)
	if err := st.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	view := filepath.Join(dir, "run", "view")
	if err := os.MkdirAll(view, 0o700); err != nil {
		t.Fatal(err)
	}
	stuck := &stuckDir{entered: make(chan struct{}), release: make(chan struct{})}
	if _, err := fs.Mount(view, stuck, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, Name: "stuck"}}); err != nil {
		t.Fatal(err)
	}
	go os.Stat(filepath.Join(view, "sub"))
	<-stuck.entered
	os.Stdout.WriteString("ready\n")
	select {}
}

// TestReleaseDyingHolder: a process killed while one of its threads waits
// on its own FUSE server does not exit by itself, holding the data
// directory's lock; the next start aborts its connections, and the lock
// is free.
func TestReleaseDyingHolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root and /dev/fuse")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDyingHolderChild$")
	cmd.Env = append(os.Environ(), dyingChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	defer func() {
		cmd.Process.Kill()
		fusefs.AbortUnder(dir) // whatever the test left stuck
		<-exited
		fusefs.CleanupStale(filepath.Join(dir, "run", "view"))
	}()
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line == "ready\n"
		cmd.Wait()
		close(exited)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the child did not get ready")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not get ready")
	}

	if dying(cmd.Process.Pid) {
		t.Fatal("a live process counts as dying")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Skip("this kernel ended the killed process by itself: nothing to release")
	case <-time.After(time.Second):
	}
	if pid, held, err := fsstore.LockHolder(dir); err != nil || !held || pid != cmd.Process.Pid {
		t.Fatalf("LockHolder = %d, %v, %v; want the killed child %d holding it", pid, held, err, cmd.Process.Pid)
	}
	if !dying(cmd.Process.Pid) {
		t.Fatal("the killed process does not count as dying")
	}
	if err := releaseDyingHolder(dir, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed process did not exit once its connections were aborted")
	}
	st := fsstore.New(dir)
	if err := st.Open(context.Background()); err != nil {
		t.Fatalf("the data directory after the release: %v", err)
	}
	st.Close()
}

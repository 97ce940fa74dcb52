package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	daemoncmd "computerd/computerd/command"
	"computerd/computerd/daemon"
	"computerd/core"
)

// TestStoreCommandsWhileServing: while computerd serve holds a data
// directory, the offline commands that write (store gc, store import) are
// refused, in its own process and from another, with an error naming the
// daemon; those that only read (store ls) and token create still work;
// once the daemon stops, store gc runs.
func TestStoreCommandsWhileServing(t *testing.T) {
	dir := t.TempDir()
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dir, Listen: "127.0.0.1:0", NoExec: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close()
		}
	})
	if _, err := d.Store.CreateWorkspace(context.Background(), "alice", "w"); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := daemoncmd.Run(context.Background(), append([]string{"computerd"}, args...), &out, io.Discard)
		return out.String(), err
	}
	for _, args := range [][]string{
		{"store", "gc", "--data", dir},
		{"store", "import", "--data", dir, "--tenant", "alice", "w", t.TempDir()},
		{"store", "fsck", "--data", dir},
	} {
		_, err := run(args...)
		if !errors.Is(err, core.ErrLocked) || !strings.Contains(err.Error(), "computerd serve") {
			t.Errorf("%v while serving: %v, want a refusal naming computerd serve", args, err)
		}
	}

	// From another process: the lock is the kernel's, not this process's.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "COMPUTERD_TEST_RUN="+strings.Join([]string{"computerd", "store", "gc", "--data", dir}, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Errorf("child computerd store gc while serving: exit 0, want a refusal")
	}
	if want := "(computerd serve)"; !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "data directory in use") {
		t.Errorf("child computerd store gc said %q, want the holder %s and \"data directory in use\"", stderr.String(), want)
	}

	if out, err := run("store", "ls", "--data", dir, "--tenant", "alice"); err != nil || !strings.Contains(out, "w\t") {
		t.Errorf("store ls while serving: %q, %v; want w listed", out, err)
	}
	if out, err := run("token", "create", "--data", dir, "alice"); err != nil || !strings.HasPrefix(out, "cdt_") {
		t.Errorf("token create while serving: %q, %v", out, err)
	}

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if out, err := run("store", "gc", "--data", dir); err != nil {
		t.Errorf("store gc after the daemon stopped: %v (%s)", err, out)
	}
}

package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"computerd/computerd/sandbox"
)

// A command that is not in the container, by name or by path, is
// ErrNotFound (and ErrStart), and its message names it and nothing of the
// container; a command that is there but fails to exec is not.
func TestCommandNotFound(t *testing.T) {
	m := MustManager(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"no-such-command", "/usr/bin/no-such-command", "./no-such-script"} {
		_, err := m.Run(context.Background(), sandbox.Spec{Argv: []string{name, "arg"}, WorkspaceDir: ws}, nil)
		if want := name + ": command not found in the sandbox"; !errors.Is(err, sandbox.ErrNotFound) || !errors.Is(err, sandbox.ErrStart) || err.Error() != want {
			t.Errorf("run %s: %v, want %q", name, err, want)
		}
	}
	_, err := m.Run(context.Background(), sandbox.Spec{Argv: []string{"./noexec"}, WorkspaceDir: ws}, nil)
	if !errors.Is(err, sandbox.ErrStart) || errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("run a file that is not executable: %v, want ErrStart only", err)
	}
}

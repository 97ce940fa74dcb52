package procfd

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestInheritable(t *testing.T) {
	r, w, err := os.Pipe() // close-on-exec, as Go opens everything
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if fds := Inheritable(); slices.Contains(fds, int(r.Fd())) || slices.Contains(fds, int(w.Fd())) {
		t.Fatalf("close-on-exec pipe %d/%d listed: %v", r.Fd(), w.Fd(), fds)
	}
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	if fds := Inheritable(); !slices.Contains(fds, int(w.Fd())) || slices.Contains(fds, int(r.Fd())) {
		t.Fatalf("Inheritable() = %v, want %d and not %d", fds, w.Fd(), r.Fd())
	}
}

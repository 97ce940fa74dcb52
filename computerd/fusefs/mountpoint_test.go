package fusefs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/computerd/mountinfo"
)

// MustMountPoint opens dir, made beneath a fresh directory, as a
// MountPoint.
func MustMountPoint(tb testing.TB) (*fusefs.MountPoint, string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root and /dev/fuse")
	}
	dir := filepath.Join(tb.TempDir(), "m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	parent, err := os.Open(filepath.Dir(dir))
	if err != nil {
		tb.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		parent.Close()
		tb.Fatal(err)
	}
	return &fusefs.MountPoint{Dir: d, Parent: parent, Name: filepath.Base(dir)}, dir
}

// mountsAt lists the file system types mounted at dir, bottom first.
func mountsAt(tb testing.TB, dir string) []string {
	tb.Helper()
	mounts, err := mountinfo.Read()
	if err != nil {
		tb.Fatal(err)
	}
	var types []string
	for _, m := range mounts {
		if m.Point == dir {
			types = append(types, m.FSType)
		}
	}
	return types
}

// A mount made on the directory after it was opened (after the mount
// policy's checks) is not mounted over: Open fails with ErrMountPoint and
// leaves it alone.
func TestOpenAtRefusesAMountMadeSince(t *testing.T) {
	at, dir := MustMountPoint(t)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		at.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	st := MustStore(t)
	ws := MustWorkspace(t, st, "w")
	m, err := fusefs.Open(dir, fusefs.Options{Store: st, Workspace: ws.ID, At: at, QuietPeriod: -1})
	if err == nil {
		m.Unmount(context.Background())
		t.Fatal("mounted over a mount made since the directory was opened")
	}
	if !errors.Is(err, fusefs.ErrMountPoint) {
		t.Fatalf("Open: %v, want ErrMountPoint", err)
	}
	if got := mountsAt(t, dir); strings.Join(got, " ") != "tmpfs" {
		t.Fatalf("mounted at %s: %v, want the tmpfs alone", dir, got)
	}
}

// UnmountStale detaches the mount of the id it is given, and only that:
// nothing at the directory is no error; another mount is left alone
// (ErrMountGone), and so is a mount not computerd's when no id was
// recorded.
func TestUnmountStale(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if ok, err := fusefs.UnmountStale(dir, 1); ok || err != nil {
		t.Fatalf("nothing mounted: %v, %v", ok, err)
	}
	if ok, err := fusefs.UnmountStale(filepath.Join(dir, "missing"), 1); ok || err != nil {
		t.Fatalf("no directory: %v, %v", ok, err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if len(mountsAt(t, dir)) > 0 {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := mountinfo.UniqueID(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []uint64{id + 1, 0} {
		if ok, err := fusefs.UnmountStale(dir, other); ok || !errors.Is(err, fusefs.ErrMountGone) {
			t.Fatalf("UnmountStale(id %d) of a tmpfs of id %d: %v, %v; want ErrMountGone", other, id, ok, err)
		}
		if got := mountsAt(t, dir); strings.Join(got, " ") != "tmpfs" {
			t.Fatalf("mounted at %s: %v, want the tmpfs", dir, got)
		}
	}
	if ok, err := fusefs.UnmountStale(dir, id); !ok || err != nil {
		t.Fatalf("UnmountStale(its id): %v, %v", ok, err)
	}
	if got := mountsAt(t, dir); len(got) != 0 {
		t.Fatalf("mounted at %s: %v, want nothing", dir, got)
	}
}

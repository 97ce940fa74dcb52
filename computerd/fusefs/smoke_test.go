package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
)

func TestSmoke(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	if err := os.MkdirAll(filepath.Join(dir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a/b/f.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "a/b/f.txt"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q %v", got, err)
	}
	rev, changed, err := m.Commit(context.Background())
	if err != nil || !changed {
		t.Fatalf("commit %v %v %v", rev, changed, err)
	}
	sn, err := st.Snapshot(context.Background(), w.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := sn.ReadFile(context.Background(), "a/b/f.txt")
	if err != nil || string(data) != "hello" {
		t.Fatalf("store has %q %v", data, err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 || ents[0].Name() != "a" || !ents[0].IsDir() {
		t.Fatalf("mount root lists %v %v, want the directory a", ents, err)
	}
}

// TestFuseFdCloseOnExec checks that a mount's /dev/fuse descriptor is not
// inherited by children: a child holding it would keep the connection
// alive after the unmount (and Unmount waiting for it).
func TestFuseFdCloseOnExec(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target != "/dev/fuse" {
			continue
		}
		found++
		fd, _ := strconv.Atoi(e.Name())
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Fatalf("/dev/fuse descriptor %d is inherited by children (flags %#x, %v)", fd, flags, err)
		}
	}
	if found == 0 {
		t.Fatal("no /dev/fuse descriptor found")
	}
}

package fusefs_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/core"
)

// A directory chain up to the store's path limit is made and committed
// (quickly); one byte more fails at once with ENAMETOOLONG, whether by
// mkdir, create, symlink, link or rename, and so does a rename that would
// push a directory's deepest descendant past the limit.
func TestPathLimit(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	const comp = "ddddddd" // 7 bytes, 8 with its slash
	levels := core.MaxPathLen / 8
	root, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	// fds[i] is the directory at depth i; its path is 8*i-1 bytes long.
	fds := []int{root}
	defer func() {
		for _, fd := range fds[1:] {
			unix.Close(fd)
		}
	}()
	var names []string
	for i := 1; i <= levels; i++ {
		name := comp
		if i == levels {
			name += "e" // the last one makes the path exactly MaxPathLen
		}
		if err := unix.Mkdirat(fds[i-1], name, 0o755); err != nil {
			t.Fatalf("mkdir at depth %d: %v", i, err)
		}
		fd, err := unix.Openat(fds[i-1], name, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			t.Fatalf("open at depth %d: %v", i, err)
		}
		fds = append(fds, fd)
		names = append(names, name)
	}
	deepest := strings.Join(names, "/")
	if len(deepest) != core.MaxPathLen {
		t.Fatalf("chain path is %d bytes, want %d", len(deepest), core.MaxPathLen)
	}
	bottom, above := fds[levels], fds[levels-1]

	tooLong := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Fatalf("%s past the limit: %v, want ENAMETOOLONG", what, err)
		}
	}
	start := time.Now()
	tooLong("mkdir", unix.Mkdirat(bottom, "x", 0o755))
	_, err = unix.Openat(bottom, "x", unix.O_CREAT|unix.O_WRONLY, 0o644)
	tooLong("create", err)
	tooLong("mknod", unix.Mknodat(bottom, "x", unix.S_IFREG|0o644, 0))
	tooLong("symlink", unix.Symlinkat("t", bottom, "x"))
	if fd, err := unix.Openat(root, "f", unix.O_CREAT|unix.O_WRONLY, 0o644); err != nil {
		t.Fatal(err)
	} else {
		unix.Close(fd)
	}
	tooLong("link", unix.Linkat(root, "f", bottom, "x", 0))
	tooLong("rename of a file", unix.Renameat(root, "f", bottom, "x"))
	// s alone fits one level up (4088+2 bytes); its descendant s/tt/uu/vv
	// (9 bytes more) would not.
	if err := unix.Mkdirat(root, "s", 0o755); err != nil {
		t.Fatal(err)
	}
	sub := "s"
	for _, n := range []string{"tt", "uu", "vv"} {
		sub += "/" + n
		if err := unix.Mkdir(dir+"/"+sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tooLong("rename of a deep directory", unix.Renameat(root, "s", above, "s"))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("refusals took %v, want them at once", took)
	}
	// With its deepest descendant cut off, s moves there.
	if err := unix.Rmdir(dir + "/s/tt/uu/vv"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat(root, "s", above, "s"); err != nil {
		t.Fatalf("rename that fits: %v", err)
	}
	// The files a rename was refused for stay where they were.
	if err := unix.Faccessat(root, "f", unix.F_OK, 0); err != nil {
		t.Fatalf("f after the refused rename: %v", err)
	}

	start = time.Now()
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatalf("commit of the chain: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("commit of a %d-deep chain took %v, want under 5s", levels, took)
	}
	t.Logf("commit of a %d-deep chain: %v", levels, time.Since(start))
	if s := storeStat(t, st, w.ID, deepest); !s.Mode.IsDir() {
		t.Fatalf("%d-byte path: mode %v", len(deepest), s.Mode)
	}
	moved := strings.Join(names[:levels-1], "/") + "/s/tt/uu"
	if s := storeStat(t, st, w.ID, moved); !s.Mode.IsDir() {
		t.Fatalf("%d-byte path: mode %v", len(moved), s.Mode)
	}
}

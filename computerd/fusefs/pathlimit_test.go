package fusefs_test

import (
	"errors"
	"fmt"
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
	for _, compLen := range []int{1, 7} {
		t.Run(fmt.Sprintf("components of %d", compLen), func(t *testing.T) { testPathLimit(t, compLen) })
	}
}

func testPathLimit(t *testing.T, compLen int) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	comp := strings.Repeat("d", compLen)
	levels := core.MaxPathLen / (compLen + 1)
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
	bottom := fds[levels]

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
	// Directory s moves under the chain at depth k, where its own path
	// fits with room to spare; s/x/x/.../yy does not.
	k := (core.MaxPathLen - 40) / (compLen + 1)
	room := core.MaxPathLen - (k*(compLen+1) - 1 + 2) // for s's descendants
	if err := unix.Mkdirat(root, "s", 0o755); err != nil {
		t.Fatal(err)
	}
	sub := "s"
	for len(sub)-1+2 <= room {
		sub += "/x"
		if err := unix.Mkdir(dir+"/"+sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkdir(dir+"/"+sub+"/yy", 0o755); err != nil {
		t.Fatal(err)
	}
	above := fds[k]
	tooLong("rename of a deep directory", unix.Renameat(root, "s", above, "s"))
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("refusals took %v, want them at once", took)
	}
	// With its deepest descendant cut off, s moves there.
	if err := unix.Rmdir(dir + "/" + sub + "/yy"); err != nil {
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
	// 0.06 s at depth 512, 0.4 s at 2048 here (19.6 s at 4000 before the
	// mount refused those and the store stopped copying paths per level).
	bound := 5 * time.Second
	if took := time.Since(start); took > bound {
		t.Fatalf("commit of a %d-deep chain took %v, want under %v", levels, took, bound)
	}
	t.Logf("commit of a %d-deep chain: %v", levels, time.Since(start))
	if s := storeStat(t, st, w.ID, deepest); !s.Mode.IsDir() {
		t.Fatalf("%d-byte path: mode %v", len(deepest), s.Mode)
	}
	moved := strings.Join(names[:k], "/") + "/" + sub
	if s := storeStat(t, st, w.ID, moved); !s.Mode.IsDir() {
		t.Fatalf("%d-byte path: mode %v", len(moved), s.Mode)
	}
}

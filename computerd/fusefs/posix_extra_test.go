package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/core"
	"computerd/fsstore"
)

func mount(t *testing.T) (*fsstore.Store, core.Workspace, *fusefs.Mount, string) {
	t.Helper()
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	return st, w, m, dir
}

func commit(t *testing.T, m *fusefs.Mount) {
	t.Helper()
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatal(err)
	}
}

func storeStat(t *testing.T, st *fsstore.Store, ws int64, p string) core.Stat {
	t.Helper()
	sn, err := st.Snapshot(bg, ws, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sn.Stat(bg, p)
	if err != nil {
		t.Fatalf("store stat %s: %v", p, err)
	}
	return s
}

func TestUnlinkedOpenFile(t *testing.T) {
	st, w, m, dir := mount(t)
	p := filepath.Join(dir, "f")
	mustWrite(t, p, "committed")
	commit(t, m)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	commit(t, m) // the unlink commits; the open file lives on
	if _, ok := storeFile(t, st, w.ID, "f"); ok {
		t.Fatal("f still in the store")
	}
	if _, err := f.WriteAt([]byte("COMM"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "COMMitted" {
		t.Fatalf("read %q %v", buf, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != 9 || statT(fi).Nlink != 0 {
		t.Fatalf("fstat %v %v", fi, err)
	}
	commit(t, m)
	if _, ok := storeFile(t, st, w.ID, "f"); ok {
		t.Fatal("unlinked file committed")
	}
}

func TestLinksAndAttributes(t *testing.T) {
	st, w, m, dir := mount(t)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	mustWrite(t, a, "linked")
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(dir, "s")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(a, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1700000000, 123456789)
	if err := os.Chtimes(b, mt, mt); err != nil {
		t.Fatal(err)
	}
	check := func(where string) {
		fa, _ := os.Lstat(a)
		fb, _ := os.Lstat(b)
		if ino(fa) != ino(fb) || statT(fa).Nlink != 2 || fa.Mode().Perm() != 0o640 || statT(fa).Uid != 1234 || statT(fa).Gid != 5678 {
			t.Fatalf("%s: a %v b %v", where, statT(fa), statT(fb))
		}
		if !fa.ModTime().Equal(mt) {
			t.Fatalf("%s: mtime %v, want %v", where, fa.ModTime(), mt)
		}
		if target, err := os.Readlink(filepath.Join(dir, "s")); err != nil || target != "a" {
			t.Fatalf("%s: readlink %q %v", where, target, err)
		}
		if mustRead(t, filepath.Join(dir, "s")) != "linked" {
			t.Fatalf("%s: through symlink", where)
		}
	}
	check("before commit")
	commit(t, m)
	check("after commit")
	sa, sb := storeStat(t, st, w.ID, "a"), storeStat(t, st, w.ID, "b")
	if sa.Ino != sb.Ino || sa.Nlink != 2 || sa.Mode.Perm() != 0o640 || sa.UID != 1234 || sa.GID != 5678 || !sa.Mtime.Equal(mt) {
		t.Fatalf("store: a %+v b %+v", sa, sb)
	}
	if s := storeStat(t, st, w.ID, "s"); s.Target != "a" || s.Mode&os.ModeSymlink == 0 {
		t.Fatalf("store symlink %+v", s)
	}
	os.Remove(a)
	commit(t, m)
	if s := storeStat(t, st, w.ID, "b"); s.Nlink != 1 {
		t.Fatalf("nlink %d after unlink", s.Nlink)
	}
}

func TestRenames(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID, Debug: os.Getenv("FUSEDEBUG") != ""})
	p := func(s string) string { return filepath.Join(dir, s) }
	os.MkdirAll(p("d1/sub"), 0o755)
	os.MkdirAll(p("d2"), 0o755)
	mustWrite(t, p("d1/sub/f"), "f")
	mustWrite(t, p("x"), "x")
	mustWrite(t, p("y"), "y")
	commit(t, m)
	// Over an existing file.
	if err := os.Rename(p("x"), p("y")); err != nil {
		t.Fatal(err)
	}
	// A directory into another, then over an empty one.
	if err := os.Rename(p("d1/sub"), p("d2/sub")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(p("empty"), 0o755)
	if err := unix.Rename(p("d2"), p("empty")); err != nil { // os.Rename refuses directories as targets
		t.Fatal(err)
	}
	// Not over a non-empty directory.
	os.MkdirAll(p("full/z"), 0o755)
	if err := unix.Rename(p("d1"), p("full")); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("rename over non-empty: %v", err)
	}
	// RENAME_NOREPLACE and RENAME_EXCHANGE.
	mustWrite(t, p("n1"), "n1")
	mustWrite(t, p("n2"), "n2")
	if err := unix.Renameat2(unix.AT_FDCWD, p("n1"), unix.AT_FDCWD, p("n2"), unix.RENAME_NOREPLACE); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("noreplace: %v", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("n1"), unix.AT_FDCWD, p("n3"), unix.RENAME_NOREPLACE); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("n3"), unix.AT_FDCWD, p("n2"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("d1"), unix.AT_FDCWD, p("y"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"d1": "x", "empty/sub/f": "f", "n2": "n1", "n3": "n2"}
	verify := func(where string) {
		for f, c := range want {
			if got := mustRead(t, p(f)); got != c {
				t.Fatalf("%s: %s = %q, want %q", where, f, got, c)
			}
		}
		if fi, err := os.Stat(p("y")); err != nil || !fi.IsDir() {
			t.Fatalf("%s: y should be the old d1: %v", where, err)
		}
	}
	verify("mount")
	commit(t, m)
	verify("mount after commit")
	for f, c := range want {
		if got, _ := storeFile(t, st, w.ID, f); got != c {
			t.Fatalf("store %s = %q, want %q", f, got, c)
		}
	}
	if fi := storeStat(t, st, w.ID, "y"); !fi.IsDir() {
		t.Fatal("store y not a dir")
	}
	// Directory link counts: root has d1? no: y, empty, full, and n files.
	fi, _ := os.Stat(dir)
	if s := storeStat(t, st, w.ID, ""); uint64(s.Nlink) != statT(fi).Nlink {
		t.Fatalf("root nlink store %d mount %d", s.Nlink, statT(fi).Nlink)
	}
}

func TestTruncateAppendLarge(t *testing.T) {
	st, w, m, dir := mount(t)
	p := filepath.Join(dir, "big")
	// A 40 MiB file with a hole, written out of order.
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapInuse
	for _, mb := range []int64{39, 0, 7, 8, 20} {
		if _, err := f.WriteAt(block, mb<<20); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	commit(t, m)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > heap0+32<<20 {
		t.Fatalf("heap grew %d MiB writing a 40 MiB file", (ms.HeapInuse-heap0)>>20)
	}
	if s := storeStat(t, st, w.ID, "big"); s.Size != 40<<20 {
		t.Fatalf("size %d", s.Size)
	}
	// Truncate down into a chunk, extend, append.
	if err := os.Truncate(p, 7<<20+100); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 9<<20); err != nil {
		t.Fatal(err)
	}
	af, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	af.WriteString("tail")
	af.Close()
	want := make([]byte, 9<<20+4)
	copy(want, block)
	copy(want[7<<20:7<<20+100], block)
	copy(want[9<<20:], "tail")
	check := func(where string, got []byte) {
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: %d bytes, want %d; first difference at %d", where, len(got), len(want), i)
		}
	}
	got, _ := os.ReadFile(p)
	check("mount", got)
	commit(t, m)
	sn, _ := st.Snapshot(bg, w.ID, 0)
	got, _ = sn.ReadFile(bg, "big")
	check("store", got)
	// Zeroing a whole chunk that held data.
	f, _ = os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt(make([]byte, 1<<20), 0)
	f.Close()
	clear(want[:1<<20])
	commit(t, m)
	sn, _ = st.Snapshot(bg, w.ID, 0)
	got, _ = sn.ReadFile(bg, "big")
	check("store after zeroing", got)
}

func TestMmap(t *testing.T) {
	st, w, m, dir := mount(t)
	p := filepath.Join(dir, "m")
	mustWrite(t, p, string(bytes.Repeat([]byte{'.'}, 8192)))
	mem := startMapper(t, p, 8192)
	if got := mem.read(t, 100, 1); got != "." {
		t.Fatalf("mmap read %q", got)
	}
	mem.write(t, 4096, "mapped")
	mem.do(t, "msync")
	mem.do(t, "unmap")
	commit(t, m)
	got, _ := storeFile(t, st, w.ID, "m")
	if got[4096:4102] != "mapped" || got[0] != '.' {
		t.Fatalf("store has %q...", got[4090:4110])
	}
}

func TestLocks(t *testing.T) {
	_, _, _, dir := mount(t)
	p := filepath.Join(dir, "l")
	mustWrite(t, p, "")
	f1, _ := os.OpenFile(p, os.O_RDWR, 0)
	f2, _ := os.OpenFile(p, os.O_RDWR, 0)
	defer f1.Close()
	defer f2.Close()
	if err := unix.Flock(int(f1.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f2.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("second flock: %v", err)
	}
	unix.Flock(int(f1.Fd()), unix.LOCK_UN)
	if err := unix.Flock(int(f2.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock after unlock: %v", err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if err := unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, &lk); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("second OFD lock: %v", err)
	}
}

func TestXattrsUnsupported(t *testing.T) {
	_, _, _, dir := mount(t)
	p := filepath.Join(dir, "x")
	mustWrite(t, p, "")
	if err := unix.Setxattr(p, "user.a", []byte("v"), 0); !errors.Is(err, unix.ENOTSUP) {
		t.Fatalf("setxattr: %v", err)
	}
	if _, err := unix.Getxattr(p, "user.a", make([]byte, 10)); !errors.Is(err, unix.ENOTSUP) {
		t.Fatalf("getxattr: %v", err)
	}
	if _, err := unix.Listxattr(p, make([]byte, 10)); !errors.Is(err, unix.ENOTSUP) {
		t.Fatalf("listxattr: %v", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil || sfs.Bavail == 0 || sfs.Namelen != 255 {
		t.Fatalf("statfs %+v %v", sfs, err)
	}
}

// TestReaddirStable reads a directory in small pieces while entries come
// and go: every entry present throughout must be seen exactly once.
func TestReaddirStable(t *testing.T) {
	_, _, m, dir := mount(t)
	d := filepath.Join(dir, "d")
	os.Mkdir(d, 0o755)
	stay := map[string]bool{}
	for i := 0; i < 300; i++ {
		name := filepath.Join(d, "stay"+string(rune('a'+i%26))+itoa(i))
		mustWrite(t, name, "")
		stay[filepath.Base(name)] = true
	}
	for i := 0; i < 100; i++ {
		mustWrite(t, filepath.Join(d, "go"+itoa(i)), "")
	}
	commit(t, m)
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	seen := map[string]int{}
	buf := make([]byte, 512)
	for round := 0; ; round++ {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, nm := range names {
			seen[nm]++
		}
		if round < 100 {
			os.Remove(filepath.Join(d, "go"+itoa(round)))
			mustWrite(t, filepath.Join(d, "new"+itoa(round)), "")
		}
	}
	for name := range stay {
		if seen[name] != 1 {
			t.Fatalf("%s seen %d times", name, seen[name])
		}
	}
	for name, c := range seen {
		if c > 1 {
			t.Fatalf("%s seen %d times", name, c)
		}
	}
	ents, _ := os.ReadDir(d)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !sort.StringsAreSorted(names) || len(names) != 400 {
		t.Fatalf("%d entries after churn", len(names))
	}
}

func itoa(i int) string {
	return string([]byte{byte('0' + i/100%10), byte('0' + i/10%10), byte('0' + i%10)})
}

func TestCleanupStale(t *testing.T) {
	if err := fusefs.CleanupStale(t.TempDir()); err != nil {
		t.Fatalf("not mounted: %v", err)
	}
	_, _, _, dir := mount(t)
	if err := fusefs.CleanupStale(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatalf("after cleanup: %v", err)
	}
	var st unix.Statfs_t
	unix.Statfs(dir, &st)
	if st.Type == 0x65735546 { // FUSE_SUPER_MAGIC
		t.Fatal("still a FUSE mount")
	}
	_ = io.EOF
}

// TestUnmountBusy unmounts while a file is open: the mount is detached,
// its changes committed, and Unmount returns when its context ends.
func TestUnmountBusy(t *testing.T) {
	st, w, m, dir := mount(t)
	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("kept")
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	start := time.Now()
	err = m.Unmount(ctx)
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("unmount of a busy mount: %v after %v", err, time.Since(start))
	}
	if v, _ := storeFile(t, st, w.ID, "open"); v != "kept" {
		t.Fatalf("committed %q", v)
	}
	f.Close()
	if mounted, _ := os.ReadDir(dir); len(mounted) != 0 {
		t.Fatalf("mount point still shows %v", mounted)
	}
}

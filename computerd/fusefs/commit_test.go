package fusefs_test

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"computerd/computerd/fusefs"
	"computerd/core"
	"computerd/fsstore"
)

var bg = context.Background()

// revs returns the workspace's head.
func head(t *testing.T, st *fsstore.Store, ws int64) int64 {
	t.Helper()
	w, err := st.WorkspaceByID(bg, ws)
	if err != nil {
		t.Fatal(err)
	}
	return w.Head
}

// storeFile reads a file from the workspace head ("" and false if absent).
func storeFile(t *testing.T, st *fsstore.Store, ws int64, p string) (string, bool) {
	t.Helper()
	sn, err := st.Snapshot(bg, ws, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sn.ReadFile(bg, p)
	if errors.Is(err, core.ErrNotFound) {
		return "", false
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

func mustWrite(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHostCommitOneRevision(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	var committed []core.Revision
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID, OnCommit: func(r core.Revision) { committed = append(committed, r) }})
	h0 := head(t, st, w.ID)
	if _, changed, err := m.Commit(bg); err != nil || changed {
		t.Fatalf("empty commit: changed %v err %v", changed, err)
	}
	os.MkdirAll(filepath.Join(dir, "d/e"), 0o755)
	mustWrite(t, filepath.Join(dir, "d/e/f"), "one")
	mustWrite(t, filepath.Join(dir, "tmp"), "gone soon")
	os.Rename(filepath.Join(dir, "d/e/f"), filepath.Join(dir, "d/g"))
	os.Remove(filepath.Join(dir, "tmp"))
	rev, changed, err := m.Commit(bg)
	if err != nil || !changed {
		t.Fatalf("commit: changed %v err %v", changed, err)
	}
	if rev.Rev != h0+1 || head(t, st, w.ID) != h0+1 || rev.Source != core.SourceMount {
		t.Fatalf("rev %+v head %d, want one mount revision after %d", rev, head(t, st, w.ID), h0)
	}
	if got, _ := storeFile(t, st, w.ID, "d/g"); got != "one" {
		t.Fatalf("d/g = %q", got)
	}
	if _, ok := storeFile(t, st, w.ID, "tmp"); ok {
		t.Fatal("tmp committed")
	}
	if len(committed) != 1 || committed[0].Rev != rev.Rev {
		t.Fatalf("OnCommit saw %v", committed)
	}
	// Nothing changed since: no revision.
	if _, changed, _ := m.Commit(bg); changed || head(t, st, w.ID) != h0+1 {
		t.Fatal("second commit made a revision")
	}
	// The mount keeps working on top of its commit, with the same inodes.
	var before, after os.FileInfo
	before, _ = os.Stat(filepath.Join(dir, "d/g"))
	mustWrite(t, filepath.Join(dir, "d/g"), "two")
	m.Commit(bg)
	after, _ = os.Stat(filepath.Join(dir, "d/g"))
	if ino(before) != ino(after) {
		t.Fatalf("inode changed %d -> %d", ino(before), ino(after))
	}
	if got, _ := storeFile(t, st, w.ID, "d/g"); got != "two" {
		t.Fatalf("d/g = %q", got)
	}
	sn, _ := st.Snapshot(bg, w.ID, 0)
	sst, _ := sn.Stat(bg, "d/g")
	if sst.Ino != ino(after) {
		t.Fatalf("store inode %d, kernel %d", sst.Ino, ino(after))
	}
}

func TestFsyncCommits(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	_, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	h0 := head(t, st, w.ID)
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("durable")
	if head(t, st, w.ID) != h0 {
		t.Fatal("committed before fsync")
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if head(t, st, w.ID) != h0+1 {
		t.Fatalf("head %d after fsync, want %d", head(t, st, w.ID), h0+1)
	}
	if got, _ := storeFile(t, st, w.ID, "f"); got != "durable" {
		t.Fatalf("f = %q", got)
	}
}

func TestQuietPeriodCommits(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	_, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID, QuietPeriod: 100 * time.Millisecond})
	h0 := head(t, st, w.ID)
	mustWrite(t, filepath.Join(dir, "a"), "a")
	mustWrite(t, filepath.Join(dir, "b"), "b")
	deadline := time.Now().Add(5 * time.Second)
	for head(t, st, w.ID) == h0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if head(t, st, w.ID) != h0+1 {
		t.Fatalf("head %d, want one quiet-period revision after %d", head(t, st, w.ID), h0)
	}
	if got, _ := storeFile(t, st, w.ID, "b"); got != "b" {
		t.Fatalf("b = %q", got)
	}
}

func TestRefreshShowsOthersChanges(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	if _, err := st.Commit(bg, w.ID, new(core.Batch).WriteFile("a", []byte("old"), 0).WriteFile("gone", []byte("g"), 0).Mkdir("d", 0), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	// Fill the kernel's caches, including a negative entry.
	if mustRead(t, filepath.Join(dir, "a")) != "old" {
		t.Fatal("a")
	}
	os.Stat(filepath.Join(dir, "gone"))
	for _, p := range []string{"d/new", "d/fifo"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	os.ReadDir(filepath.Join(dir, "d"))
	b := new(core.Batch).WriteFile("a", []byte("new and longer"), 0).WriteFile("d/new", []byte("n"), 0)
	b.Add(core.Op{Kind: core.OpDelete, Path: "gone"}, core.Op{Kind: core.OpMknod, Path: "d/fifo", Mode: fs.ModeNamedPipe | 0o600})
	if _, err := st.Commit(bg, w.ID, b, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(bg); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(dir, "a")); got != "new and longer" {
		t.Fatalf("a = %q after refresh", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "gone")); !os.IsNotExist(err) {
		t.Fatalf("gone still there: %v", err)
	}
	if got := mustRead(t, filepath.Join(dir, "d/new")); got != "n" {
		t.Fatalf("d/new = %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "d/fifo")); err != nil || fi.Mode() != fs.ModeNamedPipe|0o600 {
		t.Fatalf("d/fifo after refresh: %v %v", fi, err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "d"))
	if len(ents) != 2 {
		t.Fatalf("d lists %v", ents)
	}
	// Our own pending write and theirs to other paths both survive.
	mustWrite(t, filepath.Join(dir, "mine"), "m")
	if _, err := st.Commit(bg, w.ID, new(core.Batch).WriteFile("theirs", []byte("t"), 0), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(bg); err != nil {
		t.Fatal(err)
	}
	if mustRead(t, filepath.Join(dir, "theirs")) != "t" {
		t.Fatal("theirs")
	}
	if v, _ := storeFile(t, st, w.ID, "mine"); v != "m" {
		t.Fatal("mine not committed")
	}
	// Both sides add directories to the root; after the mount's commit
	// lands on top of theirs, the root's link count is the sum of both.
	os.Stat(dir)
	os.Mkdir(filepath.Join(dir, "mydir"), 0o755)
	if _, err := st.Commit(bg, w.ID, new(core.Batch).Mkdir("theirdir", 0), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(dir)
	if s := storeStat(t, st, w.ID, ""); uint64(s.Nlink) != statT(fi).Nlink || s.Nlink != 5 {
		t.Fatalf("root nlink: store %d, mount %d, want 5", s.Nlink, statT(fi).Nlink)
	}
	if _, err := os.Stat(filepath.Join(dir, "theirdir")); err != nil {
		t.Fatal(err)
	}
}

func TestConflictKeepsBothVersions(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	if _, err := st.Commit(bg, w.ID, new(core.Batch).WriteFile("a", []byte("base"), 0), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	mustWrite(t, filepath.Join(dir, "a"), "mount")
	if _, err := st.Commit(bg, w.ID, new(core.Batch).WriteFile("a", []byte("api"), 0), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := m.Commit(bg)
	var sce *core.ConflictError
	var ce *fusefs.ConflictError
	if !errors.As(err, &sce) || !errors.As(err, &ce) {
		t.Fatalf("commit: %v, want a conflict", err)
	}
	if len(sce.Paths) != 1 || sce.Paths[0] != "a" {
		t.Fatalf("conflict paths %v", sce.Paths)
	}
	if v, _ := storeFile(t, st, w.ID, "a"); v != "api" {
		t.Fatalf("workspace has %q", v)
	}
	kept, err := st.Workspace(bg, "t", ce.Name)
	if err != nil {
		t.Fatalf("kept workspace %q: %v", ce.Name, err)
	}
	if v, _ := storeFile(t, st, kept.ID, "a"); v != "mount" {
		t.Fatalf("kept version has %q", v)
	}
	// The mount still shows its own version and keeps committing there.
	if mustRead(t, filepath.Join(dir, "a")) != "mount" {
		t.Fatal("mount lost its version")
	}
	mustWrite(t, filepath.Join(dir, "b"), "later")
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatal(err)
	}
	if v, _ := storeFile(t, st, kept.ID, "b"); v != "later" {
		t.Fatalf("later write went %q", v)
	}
}

func ino(fi os.FileInfo) uint64 {
	if fi == nil {
		return 0
	}
	return statT(fi).Ino
}

// A workspace with the longest name keeps its conflict copy.
func TestConflictCopyOfLongName(t *testing.T) {
	{
		{
			st := MustStore(t)
			w := MustWorkspace(t, st, strings.Repeat("n", 128))
			if _, err := st.Commit(bg, w.ID, new(core.Batch).WriteFile("a", []byte("base"), 0), fsstore.CommitInfo{}); err != nil {
				t.Fatal(err)
			}
			m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID, Info: fsstore.CommitInfo{ExecID: "e7"}})
			mustWrite(t, filepath.Join(dir, "a"), "mine")
			if _, err := st.Commit(bg, w.ID, new(core.Batch).WriteFile("a", []byte("api"), 0), fsstore.CommitInfo{}); err != nil {
				t.Fatal(err)
			}
			_, _, err := m.Commit(bg)
			var ce *fusefs.ConflictError
			if !errors.As(err, &ce) || !errors.As(err, new(*core.ConflictError)) {
				t.Fatalf("commit: %v, want a kept conflict", err)
			}
			kept, err := st.Workspace(bg, "t", ce.Name)
			if err != nil {
				t.Fatalf("kept workspace %q: %v", ce.Name, err)
			}
			if v, _ := storeFile(t, st, kept.ID, "a"); v != "mine" {
				t.Fatalf("kept %q", v)
			}
		}
	}
}

// TestCommitWhileWriting commits again and again while a writer rewrites
// parts of a file: a commit stores the dirty chunks without the mount's
// lock (preUpload), so writes land while it reads them, and the chunks
// they touched must be read again, not committed as they were. After a
// last commit the store holds exactly what was written.
func TestCommitWhileWriting(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID, QuietPeriod: -1})
	const size = 8 << 20
	r := rand.New(rand.NewPCG(1, 2))
	model := make([]byte, size)
	for i := range model {
		model[i] = byte(r.Uint32())
	}
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, model, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop, done := make(chan struct{}), make(chan error, 1)
	writes := 0
	go func() {
		buf := make([]byte, 48<<10)
		for n := 0; ; n++ {
			select {
			case <-stop:
				writes = n
				done <- nil
				return
			default:
			}
			off := r.Int64N(size - int64(len(buf)))
			for i := range buf {
				buf[i] = byte(n + i)
			}
			if _, err := f.WriteAt(buf, off); err != nil {
				done <- err
				return
			}
			copy(model[off:], buf)
		}
	}()
	commits := 0
	for start := time.Now(); time.Since(start) < 2*time.Second || commits < 10; {
		_, changed, err := m.Commit(bg)
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		if changed {
			commits++
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatal(err)
	}
	got, _ := storeFile(t, st, w.ID, "f")
	if got != string(model) {
		at := 0
		for at < len(got) && at < size && got[at] == model[at] {
			at++
		}
		t.Fatalf("after %d commits the store's f differs from what was written, from byte %d (%d bytes, want %d)", commits, at, len(got), size)
	}
	t.Logf("%d writes, %d commits", writes, commits)
}

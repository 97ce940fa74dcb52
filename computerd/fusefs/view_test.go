package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"computerd/computerd/fusefs"
	"computerd/computerd/fusefs/treetest"
	"computerd/core"
	"computerd/fsstore"
)

func mustView(t *testing.T, st *fsstore.Store) *fusefs.View {
	return mustViewWith(t, fusefs.ViewOptions{Store: st})
}

func mustViewWith(t *testing.T, opt fusefs.ViewOptions) *fusefs.View {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root and /dev/fuse")
	}
	dir := t.TempDir()
	v, err := fusefs.OpenView(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v.Close(ctx)
		fusefs.CleanupStale(dir)
	})
	return v
}

// TestViewLiveTree moves a workspace's live tree from revision to
// revision and checks that it shows each one exactly, that files which
// did not change stay the same nodes, that a revision asked for while the
// live tree is in use gets a tree of its own, and that a directory rename
// starts a new live tree.
func TestViewLiveTree(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	v := mustView(t, st)
	commit := func(b *core.Batch) int64 {
		t.Helper()
		rev, err := st.Commit(bg, w.ID, b, fsstore.CommitInfo{Source: core.SourceAPI, Tenant: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return rev.Rev
	}
	b := &core.Batch{}
	for _, d := range []string{"a", "b", "c"} {
		b.Mkdir(d, 0o755)
		for _, f := range []string{"1", "2", "3"} {
			b.WriteFile(d+"/"+f, []byte(d+f), 0o644)
		}
	}
	r1 := commit(b)
	acquire := func(rev int64) (string, func()) {
		t.Helper()
		dir, release, err := v.Acquire(bg, w.ID, rev)
		if err != nil {
			t.Fatal(err)
		}
		return dir, release
	}
	check := func(dir string) string {
		t.Helper()
		got, want := treetest.Dir(t, dir), treetest.Store(t, st, w.ID)
		if got != want {
			t.Fatalf("%s differs from the head:\n%s", dir, treetest.Diff(got, want))
		}
		return got
	}
	live, release := acquire(r1)
	check(live)
	if _, err := os.ReadFile(filepath.Join(live, "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err) // a negative entry the next move must drop
	}
	release()
	nodes1, _ := v.Nodes()

	r2 := commit((&core.Batch{}).WriteFile("a/1", []byte("changed"), 0o644).WriteFile("missing", []byte("now here"), 0o644).
		Add(core.Op{Kind: core.OpDelete, Path: "b/2"}, core.Op{Kind: core.OpChmod, Path: "c", Mode: 0o700}).Mkdir("a/new", 0o755))
	dir2, release2 := acquire(r2)
	if dir2 != live {
		t.Fatalf("the live tree did not move: %s, was %s", dir2, live)
	}
	at2 := check(dir2)
	if nodes2, _ := v.Nodes(); nodes2 > nodes1+4 {
		t.Fatalf("moving one revision on made %d nodes more (had %d): unchanged files were not kept", nodes2-nodes1, nodes1)
	}

	// In use at r2: r3 gets a tree of its own; the live tree stays at r2.
	commit((&core.Batch{}).WriteFile("c/1", []byte("r3"), 0o644))
	dir3, release3 := acquire(0)
	if dir3 == live {
		t.Fatal("a revision asked for while the live tree is in use got the live tree")
	}
	check(dir3)
	if got := treetest.Dir(t, live); got != at2 {
		t.Fatalf("the live tree moved while in use:\n%s", treetest.Diff(got, at2))
	}
	release2()
	release3()

	// A directory rename starts the live tree afresh.
	commit((&core.Batch{}).Add(core.Op{Kind: core.OpRename, From: "a", Path: "z"}))
	dir4, release4 := acquire(0)
	defer release4()
	if dir4 == live {
		t.Fatal("a directory rename moved the live tree instead of starting a new one")
	}
	check(dir4)
}

// TestViewReadsAhead: once one file of a directory is read, the view
// hands the kernel the directory's other small files, so reading them
// sends no READ; a file over prefetchFileMax is left to READ.
func TestViewReadsAhead(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	c := newRequestCounter()
	v := mustViewWith(t, fusefs.ViewOptions{Store: st, Debug: true, Logger: log.New(c, "", 0)})
	b := &core.Batch{}
	const n = 30
	for _, d := range []string{"a", "b"} {
		b.Mkdir(d, 0o755)
		for i := range n {
			b.WriteFile(fmt.Sprintf("%s/%02d", d, i), fileBytes(i, 100+i*1000), 0o644)
		}
		b.WriteFile(d+"/big", fileBytes(99, 1<<20), 0o644)
	}
	rev, err := st.Commit(bg, w.ID, b, fsstore.CommitInfo{Source: core.SourceAPI, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	root, release, err := v.Acquire(bg, w.ID, rev.Rev)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	read := func(p string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes (%v), want %d", p, len(got), err, len(want))
		}
	}
	// The read-ahead runs beside the reader: give it a moment, longer on
	// the second directory if the first was not done in time (a loaded
	// machine); without it, every other file sends a READ either way.
	var reads []int
	for k, d := range []string{"a", "b"} {
		if _, err := os.ReadDir(filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
		c.take()
		read(d+"/00", fileBytes(0, 100))
		if got := c.take()["READ"]; got != 1 {
			t.Fatalf("the first file of %s: %d READs, want 1", d, got)
		}
		time.Sleep(time.Duration(1+4*k) * 500 * time.Millisecond)
		for i := 1; i < n; i++ {
			read(fmt.Sprintf("%s/%02d", d, i), fileBytes(i, 100+i*1000))
		}
		if reads = append(reads, c.take()["READ"]); reads[k] == 0 {
			break
		}
	}
	if reads[len(reads)-1] != 0 {
		t.Fatalf("the other files of a directory sent READs: %v", reads)
	}
	read("a/big", fileBytes(99, 1<<20))
	if got := c.take()["READ"]; got == 0 {
		t.Fatal("a file over the read-ahead's size sent no READ")
	}
}

// A deleted workspace's trees are forgotten: the kernel, which may keep a
// tree's entries for a day, reaches nothing of them after Forget.
func TestViewForget(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	v := mustView(t, st)
	rev, err := st.Commit(bg, w.ID, (&core.Batch{}).WriteFile("secret.txt", []byte("secret"), 0o644), fsstore.CommitInfo{Source: core.SourceAPI, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	dir, release, err := v.Acquire(bg, w.ID, rev.Rev)
	if err != nil {
		t.Fatal(err)
	}
	// Another exec at the same time gets the revision's own tree.
	other, releaseOther, err := v.Acquire(bg, w.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "secret.txt")); err != nil || string(b) != "secret" {
		t.Fatalf("read through the live tree: %q %v", b, err)
	}
	if _, err := os.ReadDir(other); err != nil {
		t.Fatal(err)
	}
	release()
	releaseOther()
	if err := st.DeleteWorkspace(bg, w.ID); err != nil {
		t.Fatal(err)
	}
	v.Forget(w.ID)
	for _, p := range []string{filepath.Join(dir, "secret.txt"), dir, other} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("stat %s after the workspace was deleted and forgotten: %v, want not found", p, err)
		}
	}
}

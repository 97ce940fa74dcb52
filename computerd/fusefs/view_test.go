package fusefs_test

import (
	"context"
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
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root and /dev/fuse")
	}
	dir := t.TempDir()
	v, err := fusefs.OpenView(dir, fusefs.ViewOptions{Store: st})
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

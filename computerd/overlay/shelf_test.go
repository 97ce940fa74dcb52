package overlay_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"computerd/computerd/overlay"
	"computerd/core"
	"computerd/fsstore"
)

// shelfFixture opens layers under a layers directory of their own (so
// that Recover can be pointed at it) through a shelf.
type shelfFixture struct {
	*fixture
	layers string
	shelf  *overlay.Shelf
}

func newShelfFixture(t *testing.T) *shelfFixture {
	f := newFixture(t)
	sf := &shelfFixture{fixture: f, layers: filepath.Join(f.dir, "layers"), shelf: overlay.NewShelf(4, time.Minute, nil)}
	must(t, os.Mkdir(sf.layers, 0o700))
	t.Cleanup(func() { sf.shelf.Close() })
	return sf
}

func (f *shelfFixture) open(t *testing.T, id string, base int64) *overlay.Layer {
	t.Helper()
	return f.openIn(t, f.ws.ID, id, base)
}

func (f *shelfFixture) openIn(t *testing.T, ws int64, id string, base int64) *overlay.Layer {
	t.Helper()
	l, err := overlay.Open(bg, overlay.Options{Store: f.st, View: f.view, Workspace: ws, BaseRev: base,
		Dir: filepath.Join(f.layers, id), Shelf: f.shelf, Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: id}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// done commits l as the runner does when its command has ended, and
// shelves it if the shelf takes it (unmounting it otherwise).
func (f *shelfFixture) done(t *testing.T, l *overlay.Layer) (changed, shelved bool) {
	t.Helper()
	_, changed, err := l.Commit(bg)
	must(t, err)
	if f.shelf.Put(l) {
		return changed, true
	}
	must(t, l.Unmount(bg))
	return changed, false
}

func (f *shelfFixture) drafts(t *testing.T) []string {
	t.Helper()
	ds, err := f.st.Drafts(bg)
	must(t, err)
	var labels []string
	for _, d := range ds {
		labels = append(labels, d.Label)
	}
	return labels
}

// unmounted waits for l's background unmount (Shelf drops layers so)
// and reports whether it is done: mount point and draft gone.
func (f *shelfFixture) unmounted(t *testing.T, l *overlay.Layer) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := os.Stat(l.Mountpoint())
		if errors.Is(err, os.ErrNotExist) && len(f.drafts(t)) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}

// TestShelf: an exec's overlay that nothing touched goes to the next exec
// on the same revision; one with any trace of a write, or on another
// revision, does not, and an exec on another revision takes the shelved
// layer down.
func TestShelf(t *testing.T) {
	f := newShelfFixture(t)
	b := &core.Batch{}
	b.Mkdir("d", 0o755).WriteFile("a.txt", []byte("a"), 0o644).WriteFile("d/b.txt", []byte("b"), 0o644)
	base := f.commit(t, b)

	l1 := f.open(t, "x1", base.Rev)
	if l1.Reused() {
		t.Fatal("the first layer came off an empty shelf")
	}
	if got := readFile(t, filepath.Join(l1.Mountpoint(), "d/b.txt")); got != "b" {
		t.Fatalf("d/b.txt = %q", got)
	}
	if changed, shelved := f.done(t, l1); changed || !shelved {
		t.Fatalf("a read-only layer: changed %v shelved %v, want false true", changed, shelved)
	}
	l2 := f.open(t, "x2", base.Rev)
	if l2 != l1 || !l2.Reused() || f.shelf.Len() != 0 {
		t.Fatalf("the second exec on the revision got a new layer (reused %v, %d left on the shelf)", l2.Reused(), f.shelf.Len())
	}
	// The draft is the new exec's, and the previous one's is gone.
	if got := f.drafts(t); len(got) != 1 || got[0] != overlay.ExecLabel("x2") {
		t.Fatalf("drafts %v, want the second exec's alone", got)
	}
	if got := readFile(t, filepath.Join(l2.Mountpoint(), "a.txt")); got != "a" {
		t.Fatalf("a.txt through the shelved layer = %q", got)
	}
	// A write commits as from a fresh layer, and the layer is not shelved.
	must(t, os.WriteFile(filepath.Join(l2.Mountpoint(), "d/new.txt"), []byte("new"), 0o644))
	if changed, shelved := f.done(t, l2); !changed || shelved {
		t.Fatalf("a layer that wrote: changed %v shelved %v, want true false", changed, shelved)
	}
	head, err := f.st.WorkspaceByID(bg, f.ws.ID)
	must(t, err)
	if head.Head != base.Rev+1 {
		t.Fatalf("head %d after the write, want %d", head.Head, base.Rev+1)
	}

	// Any trace of a write keeps a layer off the shelf, even one that
	// commits nothing.
	n := 0
	for name, touch := range map[string]func(m string) error{
		"a file made and removed": func(m string) error {
			if err := os.WriteFile(filepath.Join(m, "tmp"), nil, 0o644); err != nil {
				return err
			}
			return os.Remove(filepath.Join(m, "tmp"))
		},
		"a file rewritten with its own bytes": func(m string) error {
			return os.WriteFile(filepath.Join(m, "a.txt"), []byte("a"), 0o644)
		},
		"the root's mode changed and changed back": func(m string) error {
			fi, err := os.Stat(m)
			if err != nil {
				return err
			}
			if err := os.Chmod(m, 0o700); err != nil {
				return err
			}
			return os.Chmod(m, fi.Mode().Perm())
		},
	} {
		n++
		l := f.open(t, fmt.Sprintf("t%d", n), base.Rev)
		must(t, touch(l.Mountpoint()))
		if _, shelved := f.done(t, l); shelved {
			t.Fatalf("%s: shelved", name)
		}
	}

	// An exec on another revision takes the shelved layer down, so that
	// the view's live tree can move to its revision.
	l3 := f.open(t, "x3", core.Head)
	if got := readFile(t, filepath.Join(l3.Mountpoint(), "d/new.txt")); got != "new" {
		t.Fatalf("d/new.txt at the head = %q", got)
	}
	if _, shelved := f.done(t, l3); !shelved {
		t.Fatal("a read-only layer at the head was not shelved")
	}
	l4 := f.open(t, "x4", base.Rev)
	if l4.Reused() || f.shelf.Len() != 0 {
		t.Fatalf("an exec on an older revision: reused %v, %d on the shelf", l4.Reused(), f.shelf.Len())
	}
	if _, err := os.Stat(filepath.Join(l4.Mountpoint(), "d/new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("d/new.txt at the base revision: %v, want not there", err)
	}
	must(t, l4.Unmount(bg))
	if !f.unmounted(t, l3) {
		t.Fatal("the layer taken off the shelf is still there")
	}

	// A new head drops the layer shelved at an older one (the store's
	// OnCommit calls Moved), without waiting for an exec.
	l5 := f.open(t, "x5", core.Head)
	if _, shelved := f.done(t, l5); !shelved {
		t.Fatal("a read-only layer at the head was not shelved")
	}
	f.shelf.Moved(f.ws.ID, headOf(t, f))
	if f.shelf.Len() != 1 {
		t.Fatal("Moved to the layer's own revision dropped it")
	}
	f.shelf.Moved(f.ws.ID, headOf(t, f)+1)
	if f.shelf.Len() != 0 || !f.unmounted(t, l5) {
		t.Fatalf("after Moved to a later revision: %d on the shelf", f.shelf.Len())
	}
	if got := f.drafts(t); len(got) != 0 {
		t.Fatalf("drafts %v left", got)
	}
}

// TestShelfCrash: a shelved layer left by a process that died is what
// Recover expects of an exec that wrote nothing: no revision, no draft,
// no layer.
func TestShelfCrash(t *testing.T) {
	f := newShelfFixture(t)
	b := &core.Batch{}
	b.WriteFile("a.txt", []byte("a"), 0o644)
	base := f.commit(t, b)
	l := f.open(t, "x1", base.Rev)
	if _, shelved := f.done(t, l); !shelved {
		t.Fatal("not shelved")
	}
	l = f.open(t, "x2", base.Rev) // relabelled for the second exec
	if _, shelved := f.done(t, l); !shelved {
		t.Fatal("not shelved the second time")
	}
	// What a new process finds: the mount, its record and its draft.
	must(t, overlay.Recover(bg, f.st, f.layers))
	rec, err := overlay.RecoverDrafts(bg, f.st)
	must(t, err)
	for _, r := range rec {
		if r.Err != nil || r.Revision.Rev != 0 || r.Kept != "" {
			t.Fatalf("recovered %+v, want nothing committed", r)
		}
	}
	ws, err := f.st.WorkspaceByID(bg, f.ws.ID)
	must(t, err)
	entries, _ := os.ReadDir(f.layers)
	if ws.Head != base.Rev || len(f.drafts(t)) != 0 || len(entries) != 0 {
		t.Fatalf("after recovery: head %d (want %d), drafts %v, layers %d", ws.Head, base.Rev, f.drafts(t), len(entries))
	}
	f.shelf.Close() // the dead process's: what it held is gone, its errors say so
}

// TestShelfBounds: the shelf holds at most its size (the layer shelved
// longest ago goes first), and a layer left on it for its idle time is
// unmounted.
func TestShelfBounds(t *testing.T) {
	f := newShelfFixture(t)
	f.shelf.Close()
	f.shelf = overlay.NewShelf(2, time.Minute, nil)
	shelve := func(i int) *overlay.Layer {
		t.Helper()
		ws, err := f.st.CreateWorkspace(bg, "t", fmt.Sprintf("w%d", i))
		must(t, err)
		l := f.openIn(t, ws.ID, fmt.Sprintf("x%d", i), core.Head)
		if _, shelved := f.done(t, l); !shelved {
			t.Fatalf("layer %d not shelved", i)
		}
		return l
	}
	gone := func(l *overlay.Layer) bool {
		_, err := os.Stat(l.Mountpoint())
		return errors.Is(err, os.ErrNotExist)
	}
	var layers []*overlay.Layer
	for i := range 3 {
		layers = append(layers, shelve(i))
	}
	if f.shelf.Len() != 2 || gone(layers[1]) || gone(layers[2]) {
		t.Fatalf("a shelf of 2 after 3 layers: %d on it, gone %v %v, want the last two kept",
			f.shelf.Len(), gone(layers[1]), gone(layers[2]))
	}
	deadline := time.Now().Add(5 * time.Second)
	for !gone(layers[0]) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !gone(layers[0]) {
		t.Fatal("the first layer was not unmounted")
	}
	must(t, f.shelf.Close())
	if !gone(layers[1]) || !gone(layers[2]) {
		t.Fatal("Close left layers mounted")
	}

	f.shelf = overlay.NewShelf(2, 100*time.Millisecond, nil)
	l := shelve(3)
	if !f.unmounted(t, l) || f.shelf.Len() != 0 {
		t.Fatalf("after the idle time: %d on the shelf, drafts %v", f.shelf.Len(), f.drafts(t))
	}
}

// headOf is the head of f's workspace.
func headOf(t *testing.T, f *shelfFixture) int64 {
	t.Helper()
	ws, err := f.st.WorkspaceByID(bg, f.ws.ID)
	must(t, err)
	return ws.Head
}

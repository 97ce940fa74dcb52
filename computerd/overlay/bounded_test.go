package overlay_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"computerd/computerd/loopfs"
	"computerd/computerd/overlay"
	"computerd/core"
	"computerd/fsstore"
)

// openBounded opens a layer whose upper layer is a volume of size.
func (f *fixture) openBounded(t *testing.T, id string, size int64, m *loopfs.Maker, p *loopfs.Pool) *overlay.Layer {
	t.Helper()
	l, err := overlay.Open(bg, overlay.Options{Store: f.st, View: f.view, Workspace: f.ws.ID,
		Dir: filepath.Join(f.dir, "layer-"+id), UpperSize: size, Volumes: m, Pool: p,
		Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: id}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// pool opens a pool keeping one volume of size, closed at cleanup, and
// returns it and its Maker.
func (f *fixture) pool(t *testing.T, size int64) (*loopfs.Maker, *loopfs.Pool) {
	t.Helper()
	m := &loopfs.Maker{Dir: filepath.Join(f.dir, "templates")}
	p := &loopfs.Pool{Maker: m, Dir: filepath.Join(f.dir, "pool"), Size: size, Count: 1}
	must(t, p.Open(bg))
	t.Cleanup(func() { p.Close() })
	return m, p
}

// writeUntilFull writes 64 KiB pieces of distinct bytes to path until a
// write fails, and returns what it wrote and the error.
func writeUntilFull(path string) ([]byte, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []byte
	for i := 0; ; i++ {
		piece := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a, 0xc3}, 16<<10)
		n, err := f.Write(piece)
		all = append(all, piece[:n]...)
		if err != nil {
			return all, err
		}
	}
}

// A command that fills a bounded upper layer gets ENOSPC (root too: the
// bound is the volume's size), what fit is committed, and the layer's
// volume goes with Unmount.
func TestBoundedUpper(t *testing.T) {
	f := newFixture(t)
	f.commit(t, (&core.Batch{}).WriteFile("old", []byte("base"), 0o644))
	m := &loopfs.Maker{Dir: filepath.Join(f.dir, "templates")}
	size := loopfs.SizeClass(8 << 20)
	l := f.openBounded(t, "x1", size, m, nil)
	wrote, err := writeUntilFull(filepath.Join(l.Mountpoint(), "big"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("wrote %d bytes, then %v; want ENOSPC", len(wrote), err)
	}
	if int64(len(wrote)) > size || len(wrote) < 4<<20 {
		t.Fatalf("a volume of %d bytes took %d", size, len(wrote))
	}
	// Rewriting a file of the lower layer copies it up: fits too.
	if err := os.WriteFile(filepath.Join(l.Mountpoint(), "small"), []byte("x"), 0o644); !errors.Is(err, syscall.ENOSPC) && err != nil {
		t.Fatal(err)
	}
	rev, changed, err := l.Commit(bg)
	if err != nil || !changed {
		t.Fatalf("commit: %v %v", changed, err)
	}
	sn, err := f.st.Snapshot(bg, f.ws.ID, rev.Rev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sn.ReadFile(bg, "big")
	if err != nil || !bytes.Equal(got, wrote) {
		t.Fatalf("committed %d bytes (%v), the command wrote %d", len(got), err, len(wrote))
	}
	must(t, l.Unmount(bg))
	if _, err := os.Stat(filepath.Join(f.dir, "layer-x1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("layer left: %v", err)
	}
}

// A pool's volume serves a layer and comes back to the pool emptied: the
// next layer on it sees nothing of the last one's writes.
func TestBoundedUpperRecycled(t *testing.T) {
	f := newFixture(t)
	size := loopfs.SizeClass(8 << 20)
	m, p := f.pool(t, size)
	waitReady := func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if ents, _ := os.ReadDir(p.Dir); len(ents) > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no volume ready after 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitReady()
	l := f.openBounded(t, "a", size, m, p)
	must(t, os.WriteFile(filepath.Join(l.Mountpoint(), "secret"), []byte("a's"), 0o644))
	if _, _, err := l.Commit(bg); err != nil {
		t.Fatal(err)
	}
	must(t, l.Unmount(bg))
	waitReady()
	// A new workspace, so the lower layer has no "secret" either.
	w2, err := f.st.CreateWorkspace(bg, "t", "other")
	must(t, err)
	f.ws = w2
	l2 := f.openBounded(t, "b", size, m, p)
	defer l2.Unmount(bg)
	ents, err := os.ReadDir(l2.Mountpoint())
	if err != nil || len(ents) != 0 {
		t.Fatalf("the recycled volume shows %v (%v)", ents, err)
	}
}

// How long a layer takes to open and to unmount with its upper layer in a
// directory, on a new volume, and on a pool's volume (logged; a bound
// only against a regression to seconds).
func TestBoundedUpperCost(t *testing.T) {
	f := newFixture(t)
	size := loopfs.SizeClass(1 << 30)
	m, p := f.pool(t, size)
	const n = 10
	for _, tc := range []struct {
		name string
		size int64
		pool *loopfs.Pool
	}{{"directory", 0, nil}, {"new volume of 1 GiB", size, nil}, {"pool's volume of 1 GiB", size, p}} {
		var open, unmount time.Duration
		for i := range n {
			if tc.pool != nil {
				time.Sleep(50 * time.Millisecond) // as between execs: the volume is back
			}
			start := time.Now()
			l := f.openBounded(t, tc.name[:3]+string(rune('a'+i)), tc.size, m, tc.pool)
			open += time.Since(start)
			must(t, os.WriteFile(filepath.Join(l.Mountpoint(), "f"), []byte("x"), 0o644))
			if _, _, err := l.Commit(bg); err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			must(t, l.Unmount(bg))
			unmount += time.Since(start)
		}
		t.Logf("%s: open %v, unmount %v (mean of %d)", tc.name, open/n, unmount/n, n)
		if open/n > 2*time.Second {
			t.Errorf("%s: open takes %v", tc.name, open/n)
		}
	}
}

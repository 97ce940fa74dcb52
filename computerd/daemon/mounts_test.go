package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"computerd/computerd/metrics"
	"computerd/core"
	"computerd/fsstore"
)

// stuckDir is a FUSE file system whose lookup of "sub" waits until
// released: a kernel call on a mount directory that does not return, as
// when the FUSE server behind it waits on the store's writer.
type stuckDir struct {
	fs.Inode
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

var _ fs.NodeLookuper = (*stuckDir)(nil)

func (s *stuckDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == "sub" {
		s.once.Do(func() { close(s.entered) })
		<-s.release
	}
	return nil, syscall.ENOENT
}

// TestCommitHookDoesNotWaitForAMount: while a Mount call is stuck in the
// kernel on its mount directory, a commit to a mounted workspace (whose
// hook, in the store's writer, wakes the mounts) still completes.
func TestCommitHookDoesNotWaitForAMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root and /dev/fuse")
	}
	ctx := context.Background()
	data := t.TempDir()
	st := fsstore.New(data)
	if err := st.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	policy, err := newMountPolicy([]string{os.TempDir()}, data)
	if err != nil {
		t.Fatal(err)
	}
	ms := newMounts(data, policy, st, metrics.New(), slog.New(slog.DiscardHandler))
	if err := ms.Open(ctx); err != nil {
		t.Fatal(err)
	}
	st.OnCommit = func(ws int64, _ core.Revision) { ms.changed(ws) }
	ws, err := st.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Mount(ctx, "t", ws, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	defer ms.Close(ctx)

	stuck := &stuckDir{entered: make(chan struct{}), release: make(chan struct{})}
	top := t.TempDir()
	srv, err := fs.Mount(top, stuck, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, Name: "stuck"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Unmount()
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(stuck.release) }) }
	defer releaseAll()
	mounted := make(chan error, 1)
	go func() {
		_, err := ms.Mount(ctx, "t", ws, filepath.Join(top, "sub"))
		mounted <- err
	}()
	select {
	case <-stuck.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the mount directory was never looked up")
	}

	committed := make(chan error, 1)
	go func() {
		_, err := st.Commit(ctx, ws.ID, &core.Batch{Ops: []core.Op{{Kind: core.OpCreate, Path: "f", Data: []byte("x")}}}, fsstore.CommitInfo{})
		committed <- err
	}()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		releaseAll() // let the test end
		t.Fatal("a commit waited for a Mount stuck in the kernel")
	}
	releaseAll()
	if err := <-mounted; err == nil {
		t.Error("mount on a directory that is not there: no error")
	}
}

// The record of mounts keeps each mount's unique id; a record of an
// earlier version, directories alone, reads as mounts of no known id.
func TestMountRecord(t *testing.T) {
	ms := newMounts(t.TempDir(), nil, nil, metrics.New(), slog.New(slog.DiscardHandler))
	if err := os.MkdirAll(filepath.Dir(ms.record), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, record string
		want         []mountRecord
	}{
		{"current", `[{"dir":"/a","id":7},{"dir":"/b"}]`, []mountRecord{{Dir: "/a", ID: 7}, {Dir: "/b"}}},
		{"directories alone", `["/a","/b"]`, []mountRecord{{Dir: "/a"}, {Dir: "/b"}}},
		{"damaged", `[{"dir":`, nil},
	} {
		if err := os.WriteFile(ms.record, []byte(tc.record), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := ms.readRecord(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	ms.byDir = map[string]*hostMount{"/a": {id: 7}}
	ms.save()
	if got, want := ms.readRecord(), []mountRecord{{Dir: "/a", ID: 7}}; !slices.Equal(got, want) {
		t.Errorf("saved and read: %+v, want %+v", got, want)
	}
}

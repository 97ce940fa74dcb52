package fusefs_test

import (
	"context"
	"os"
	"testing"
	"time"

	"computerd/computerd/fusefs"
	"computerd/core"
	"computerd/fsstore"
)

// MustStore opens a store in a temporary directory.
func MustStore(tb testing.TB) *fsstore.Store {
	tb.Helper()
	st := fsstore.New(tb.TempDir())
	if err := st.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// MustWorkspace creates an empty workspace.
func MustWorkspace(tb testing.TB, st *fsstore.Store, name string) core.Workspace {
	tb.Helper()
	w, err := st.CreateWorkspace(context.Background(), "t", name)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// MustMount mounts a workspace at a fresh directory; the mount is undone
// when the test ends, even if it fails.
func MustMount(tb testing.TB, opt fusefs.Options) (*fusefs.Mount, string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root and /dev/fuse")
	}
	dir := tb.TempDir()
	if opt.QuietPeriod == 0 {
		opt.QuietPeriod = -1
	}
	m, err := fusefs.Open(dir, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Unmount(ctx)
		fusefs.CleanupStale(dir)
	})
	return m, dir
}

// Package storetest builds store contents for the tests of fsstore and of
// the packages above it: what their memory and speed bounds are measured
// against.
package storetest

import (
	"context"
	"fmt"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// ManyFiles makes workspace "many" of tenant "t" in s and commits n small
// files to it, 1,000 to a directory, in commits of at most 100,000 ops;
// it returns the workspace at its head (Diff(1, head) is n creates and
// n/1000 mkdirs).
func ManyFiles(tb testing.TB, s *fsstore.Store, n int) core.Workspace {
	tb.Helper()
	ctx := context.Background()
	w, err := s.CreateWorkspace(ctx, "t", "many")
	if err != nil {
		tb.Fatal(err)
	}
	var b core.Batch
	for i := range n {
		if i%1000 == 0 {
			b.Mkdir(fmt.Sprintf("d%04d", i/1000), 0o755)
		}
		b.WriteFile(fmt.Sprintf("d%04d/file-%07d.txt", i/1000, i), fmt.Appendf(nil, "file %d\n", i), 0o644)
		if len(b.Ops) >= 100_000 || i == n-1 {
			rev, err := s.Commit(ctx, w.ID, &b, fsstore.CommitInfo{})
			if err != nil {
				tb.Fatal(err)
			}
			w.Head = rev.Rev
			b = core.Batch{}
		}
	}
	return w
}

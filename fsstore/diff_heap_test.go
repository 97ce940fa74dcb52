package fsstore_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
	"computerd/fsstore/storetest"
	"computerd/internal/testheap"
)

// diffOps sizes TestDiffHeap: go test ./fsstore -run TestDiffHeap -v -diff-ops 1000000
var diffOps = flag.Int("diff-ops", 200_000, "files TestDiffHeap's diffs create and delete")

// A diff of many changes holds a bounded amount of heap: its ops go to
// disk past a few MiB, in their order, and come back one at a time.
func TestDiffHeap(t *testing.T) {
	n := *diffOps
	if testing.Short() {
		n = 20_000
	}
	s := fsstore.New(t.TempDir())
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := storetest.ManyFiles(t, s, n)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		from, to int64
		kind     core.OpKind
	}{
		{"creates", 1, w.Head, core.OpCreate},
		{"deletes", w.Head, 1, core.OpDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ops, kind int
			t0 := time.Now()
			grew := testheap.Growth(func() {
				d, err := s.OpenDiff(ctx, w.ID, tc.from, tc.to)
				if err != nil {
					t.Error(err)
					return
				}
				defer d.Close()
				err = d.Each(func(op core.Op) error {
					ops++
					if op.Kind == tc.kind {
						kind++
					}
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
			took := time.Since(t0)
			if kind < n {
				t.Fatalf("%d ops, %d of them %s, want at least %d", ops, kind, tc.kind, n)
			}
			t.Logf("diff of %d ops: heap grew %.1f MiB (%.0f bytes an op) in %v", ops, float64(grew)/(1<<20), float64(grew)/float64(ops), took)
			if grew > 24<<20 {
				t.Fatalf("a diff of %d ops grew the heap by %.1f MiB, want under 24 MiB", ops, float64(grew)/(1<<20))
			}
		})
	}
}

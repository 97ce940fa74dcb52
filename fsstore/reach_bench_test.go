package fsstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// reachBenchFiles is how many files the push-sized benchmarks commit.
const reachBenchFiles = 10000

// reachBenchStore is a store whose tenant "t" has reachBenchWorkspaces
// workspaces (the probes a refused hash costs grow with them), the first
// holding reachBenchFiles small files of distinct contents, and another
// tenant holding other files.
func reachBenchStore(b *testing.B) (*fsstore.Store, []*core.Content) {
	b.Helper()
	ctx := context.Background()
	s := fsstore.New(b.TempDir())
	if err := s.Open(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	const reachBenchWorkspaces = 20
	var src core.Workspace
	for i := range reachBenchWorkspaces {
		w, err := s.CreateWorkspace(ctx, "t", fmt.Sprintf("w%d", i))
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			src = w
		}
	}
	other, err := s.CreateWorkspace(ctx, "other", "w")
	if err != nil {
		b.Fatal(err)
	}
	var mine, theirs core.Batch
	contents := make([]*core.Content, reachBenchFiles)
	for i := range reachBenchFiles {
		data := []byte(fmt.Sprintf("file %d of tenant t\n", i))
		mine.WriteFile(fmt.Sprintf("f%d", i), data, 0o644)
		contents[i] = &core.Content{Size: int64(len(data)), Chunks: []core.ChunkRef{{Hash: sha256.Sum256(data), Len: len(data)}}}
		theirs.WriteFile(fmt.Sprintf("f%d", i), []byte(fmt.Sprintf("file %d of another tenant\n", i)), 0o644)
	}
	for _, c := range []struct {
		ws int64
		b  *core.Batch
	}{{src.ID, &mine}, {other.ID, &theirs}} {
		if _, err := s.Commit(ctx, c.ws, c.b, fsstore.CommitInfo{}); err != nil {
			b.Fatal(err)
		}
	}
	return s, contents
}

// BenchmarkConfinedCommit measures what confining costs, as pairs run in
// turn (so that a load that comes and goes weighs on both alike) and
// reported as the medians of each: a one-file commit naming a chunk the
// tenant holds (an ops request), a commit of reachBenchFiles files naming
// chunks the tenant holds without sending them (a push that leaves them
// out: one reach query each) or sending them (what an executor's push
// does), unconfined against confined; and a refused hash, unknown against
// another tenant's.
//
//	go test -run '^$' -bench BenchmarkConfinedCommit -benchtime 2000x ./fsstore
func BenchmarkConfinedCommit(b *testing.B) {
	ctx := context.Background()
	s, contents := reachBenchStore(b)
	n := 0
	fresh := func(b *testing.B) int64 {
		b.Helper()
		n++
		w, err := s.CreateWorkspace(ctx, "t", fmt.Sprintf("dst%d", n))
		if err != nil {
			b.Fatal(err)
		}
		return w.ID
	}
	files := func(contents []*core.Content) *core.Changeset {
		cs := &core.Changeset{}
		for i, c := range contents {
			cs.Ops = append(cs.Ops, core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("g%d", i), Mode: 0o644,
				Content: &core.Content{Size: c.Size, Chunks: []core.ChunkRef{c.Chunks[0]}}})
		}
		return cs
	}
	// pairs times a and c in turn, n times, and reports their medians.
	pairs := func(b *testing.B, n int, aName string, a func(i int) error, cName string, c func(i int) error) {
		b.Helper()
		var ta, tc []time.Duration
		for i := range n {
			start := time.Now()
			errA := a(i)
			ta = append(ta, time.Since(start))
			start = time.Now()
			errC := c(i)
			tc = append(tc, time.Since(start))
			if errA != nil || errC != nil {
				b.Fatal(errA, errC)
			}
		}
		b.ReportMetric(float64(median(ta).Nanoseconds()), aName+"-ns")
		b.ReportMetric(float64(median(tc).Nanoseconds()), cName+"-ns")
		b.ReportMetric(0, "ns/op")
	}
	b.Run("one-file", func(b *testing.B) {
		ws := fresh(b)
		commit := func(confine bool) func(int) error {
			return func(i int) error {
				c := contents[i%len(contents)]
				_, err := s.Commit(ctx, ws, (&core.Batch{}).Add(core.Op{Kind: core.OpCreate, Path: "x", Mode: 0o644, Content: c}), fsstore.CommitInfo{Confine: confine})
				return err
			}
		}
		pairs(b, b.N, "plain", commit(false), "confined", commit(true))
	})
	b.Run("files-held", func(b *testing.B) {
		commit := func(confine bool) func(int) error {
			return func(int) error {
				ws := fresh(b)
				_, err := s.Apply(ctx, ws, files(contents), fsstore.CommitInfo{Confine: confine})
				return err
			}
		}
		pairs(b, min(b.N, 5), "plain", commit(false), "confined", commit(true))
	})
	b.Run("files-sent", func(b *testing.B) {
		commit := func(confine bool) func(int) error {
			return func(int) error {
				ws := fresh(b)
				up := s.NewUploader()
				defer up.Close()
				cs := files(contents)
				for i, c := range contents {
					if err := up.PutChunk(ctx, c.Chunks[0].Hash, []byte(fmt.Sprintf("file %d of tenant t\n", i))); err != nil {
						return err
					}
				}
				if err := up.Flush(ctx); err != nil {
					return err
				}
				up.Identify(cs)
				_, err := s.Apply(ctx, ws, cs, fsstore.CommitInfo{Confine: confine, Sent: up})
				return err
			}
		}
		pairs(b, min(b.N, 5), "plain", commit(false), "confined", commit(true))
	})
	// A refused hash: unknown, or another tenant's; the two should cost the same.
	b.Run("refused", func(b *testing.B) {
		ws := fresh(b)
		theirs := []byte("file 0 of another tenant\n")
		refuse := func(unknown bool) func(int) error {
			return func(i int) error {
				h := core.Hash(sha256.Sum256(theirs))
				if unknown {
					h[0], h[1], h[2] = byte(i), byte(i>>8), byte(i>>16)
				}
				_, err := s.Commit(ctx, ws, (&core.Batch{}).Add(core.Op{Kind: core.OpCreate, Path: "x", Mode: 0o644,
					Content: &core.Content{Size: int64(len(theirs)), Chunks: []core.ChunkRef{{Hash: h, Len: len(theirs)}}}}), fsstore.CommitInfo{Confine: true})
				if !errors.Is(err, core.ErrMissingChunk) {
					return fmt.Errorf("a hash the tenant does not hold: %v, want ErrMissingChunk", err)
				}
				return nil
			}
		}
		pairs(b, b.N, "other-tenant", refuse(false), "unknown", refuse(true))
	})
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

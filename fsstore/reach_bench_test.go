package fsstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

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

// BenchmarkConfinedCommit measures what confining costs: a one-file
// commit naming a chunk (an ops request), and a commit of
// reachBenchFiles files naming chunks the tenant holds without sending
// them (a push that leaves them out: one reach query each) or sending
// them (what an executor's push does), each confined and not.
//
//	go test -run '^$' -bench BenchmarkConfinedCommit -benchtime 20x ./fsstore
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
	commit := func(b *testing.B, ws int64, files []*core.Content, info fsstore.CommitInfo) {
		b.Helper()
		var batch core.Batch
		for i, c := range files {
			batch.Add(core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("g%d", i), Mode: 0o644, Content: c})
		}
		if _, err := s.Commit(ctx, ws, &batch, info); err != nil {
			b.Fatal(err)
		}
	}
	for _, confine := range []bool{false, true} {
		b.Run(fmt.Sprintf("one-file/confine=%v", confine), func(b *testing.B) {
			ws := fresh(b)
			b.ResetTimer()
			for i := range b.N {
				commit(b, ws, contents[i%len(contents):i%len(contents)+1], fsstore.CommitInfo{Confine: confine})
			}
		})
		b.Run(fmt.Sprintf("files-held/confine=%v", confine), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ws := fresh(b)
				b.StartTimer()
				commit(b, ws, contents, fsstore.CommitInfo{Confine: confine})
			}
		})
		b.Run(fmt.Sprintf("files-sent/confine=%v", confine), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ws := fresh(b)
				up := s.NewUploader()
				cs := &core.Changeset{}
				for i, c := range contents {
					data := []byte(fmt.Sprintf("file %d of tenant t\n", i))
					if err := up.PutChunk(ctx, c.Chunks[0].Hash, data); err != nil {
						b.Fatal(err)
					}
					cs.Ops = append(cs.Ops, core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("g%d", i), Mode: 0o644,
						Content: &core.Content{Size: c.Size, Chunks: []core.ChunkRef{c.Chunks[0]}}})
				}
				if err := up.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				up.Identify(cs)
				b.StartTimer()
				if _, err := s.Apply(ctx, ws, cs, fsstore.CommitInfo{Confine: confine, Sent: up}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				up.Close()
				b.StartTimer()
			}
		})
	}
	// A refused hash: unknown, or another tenant's (referenced by one
	// row there); the two should cost the same.
	theirs := []byte("file 0 of another tenant\n")
	for _, name := range []string{"unknown", "other-tenant"} {
		b.Run("one-file-refused/"+name, func(b *testing.B) {
			ws := fresh(b)
			h, size := core.Hash(sha256.Sum256(theirs)), len(theirs)
			b.ResetTimer()
			for i := range b.N {
				if name == "unknown" {
					h[0], h[1], h[2] = byte(i), byte(i>>8), byte(i>>16)
				}
				_, err := s.Commit(ctx, ws, (&core.Batch{}).Add(core.Op{Kind: core.OpCreate, Path: "x", Mode: 0o644,
					Content: &core.Content{Size: int64(size), Chunks: []core.ChunkRef{{Hash: h, Len: size}}}}), fsstore.CommitInfo{Confine: true})
				if err == nil {
					b.Fatal("a hash the tenant does not hold was accepted")
				}
			}
		})
	}
}

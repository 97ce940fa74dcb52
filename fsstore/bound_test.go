package fsstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

func TestBoundLimit(t *testing.T) {
	var b fsstore.Bound
	if got := b.Limit(); got != fsstore.BoundFloor {
		t.Fatalf("limit of a request that sent nothing: %d, want the floor %d", got, fsstore.BoundFloor)
	}
	if err := b.Make(fsstore.BoundFloor); err != nil {
		t.Fatalf("making the floor: %v", err)
	}
	err := b.Make(1)
	var be *fsstore.BoundError
	if !errors.Is(err, core.ErrTooLarge) || !errors.As(err, &be) || be.Made != fsstore.BoundFloor+1 || be.Limit != fsstore.BoundFloor {
		t.Fatalf("one byte past the floor: %v, want a BoundError of %d made over %d", err, fsstore.BoundFloor+1, fsstore.BoundFloor)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(fsstore.BoundFloor)) || !strings.Contains(err.Error(), fmt.Sprint(fsstore.BoundRatio)) {
		t.Fatalf("the error does not name the limit: %v", err)
	}
	// What is sent later raises the limit.
	b.Sent(1 << 20)
	if got, want := b.Limit(), int64(fsstore.BoundRatio)<<20; got != want {
		t.Fatalf("limit after 1 MiB sent: %d, want %d", got, want)
	}
	if err := b.Make(1); err != nil {
		t.Fatalf("made within 1000 times 1 MiB: %v", err)
	}
	b.Sent(core.MaxFileSize / 10) // no overflow
	if got := b.Limit(); got != core.MaxFileSize {
		t.Fatalf("limit after sending a lot: %d, want %d", got, core.MaxFileSize)
	}
}

// A commit given a Bound counts the zeros its ops open past the ends of
// files, and fails past the bound with nothing changed; shortening a file,
// data the ops carry and commits without a Bound (execs, mounts) are not
// limited.
func TestCommitBoundHoles(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	ws, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	big := int64(fsstore.BoundFloor)
	mustWrite(t, s, ws.ID, "f", "data")
	if _, err := s.Commit(ctx, ws.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpCreate, Path: "huge", Data: []byte{}}, core.Op{Kind: core.OpTruncate, Path: "huge", Size: 1 << 50}), fsstore.CommitInfo{}); err != nil {
		t.Fatalf("a lengthening truncate without a Bound: %v", err)
	}
	stored, err := s.Put(ctx, strings.NewReader("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := stored.Chunks[0] // one 16-byte chunk
	for _, tc := range []struct {
		name string
		sent int64
		ops  []core.Op
		made int64 // -1: over the bound
	}{
		{"truncate to the floor", 0, []core.Op{{Kind: core.OpTruncate, Path: "f", Size: big + 4}}, big},
		{"truncate past the floor", 0, []core.Op{{Kind: core.OpTruncate, Path: "f", Size: big + 5}}, -1},
		{"truncate past the floor, 1 MiB sent", 1 << 20, []core.Op{{Kind: core.OpTruncate, Path: "f", Size: 512 << 20}}, 512<<20 - 4},
		{"truncates adding up", 0, []core.Op{{Kind: core.OpTruncate, Path: "f", Size: big/2 + 4}, {Kind: core.OpCreate, Path: "g", Data: []byte{}}, {Kind: core.OpTruncate, Path: "g", Size: big/2 + 1}}, -1},
		{"shortening", 0, []core.Op{{Kind: core.OpTruncate, Path: "huge", Size: 1 << 49}}, 0},
		{"write past the end", 0, []core.Op{{Kind: core.OpWrite, Path: "f", Offset: 1 << 40, Data: []byte("x")}}, -1},
		{"write at the end", 0, []core.Op{{Kind: core.OpWrite, Path: "f", Offset: 4, Data: make([]byte, 1000)}}, 0},
		{"write inside", 0, []core.Op{{Kind: core.OpWrite, Path: "huge", Offset: 1 << 45, Data: []byte("x")}}, 0},
		{"content past its chunks", 0, []core.Op{{Kind: core.OpCreate, Path: "c", Content: &core.Content{Size: 1 << 40, Chunks: []core.ChunkRef{chunk}}}}, -1},
		{"content within", 0, []core.Op{{Kind: core.OpCreate, Path: "c", Content: &core.Content{Size: 1 << 20, Chunks: []core.ChunkRef{chunk}}}}, 1<<20 - 16},
		{"a chunk far out", 0, []core.Op{{Kind: core.OpCreate, Path: "c", Content: &core.Content{Size: 16<<40 + 16, Chunks: []core.ChunkRef{{Index: 1 << 40, Hash: chunk.Hash, Len: 16}}}}}, -1},
		{"a create replacing a big file", 0, []core.Op{{Kind: core.OpCreate, Path: "huge", Data: []byte("small")}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := s.Snapshot(ctx, ws.ID, core.Head)
			if err != nil {
				t.Fatal(err)
			}
			var b fsstore.Bound
			b.Sent(tc.sent)
			rev, err := s.Commit(ctx, ws.ID, &core.Batch{Ops: tc.ops}, fsstore.CommitInfo{Bound: &b})
			if tc.made < 0 {
				var be *fsstore.BoundError
				if !errors.As(err, &be) || !errors.Is(err, core.ErrTooLarge) {
					t.Fatalf("commit: %v, want a BoundError", err)
				}
				after, err := s.Snapshot(ctx, ws.ID, core.Head)
				if err != nil || after.Rev != before.Rev {
					t.Fatalf("head %d after the refused commit (%v), want %d", after.Rev, err, before.Rev)
				}
				return
			}
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
			if b.Made() != tc.made {
				t.Fatalf("made %d, want %d", b.Made(), tc.made)
			}
			// Undo, so that each case starts from the same tree.
			if _, err := s.Restore(ctx, ws.ID, before.Rev, "", fsstore.CommitInfo{}); err != nil {
				t.Fatalf("restore to %d after revision %d: %v", before.Rev, rev.Rev, err)
			}
		})
	}
}

// zeroSource gives zeros without end, as archive/tar does for a sparse
// entry's hole; once ctx is done it gives at most a few reads more.
type zeroSource struct {
	ctx   context.Context
	after atomic.Int64 // reads since ctx ended
	read  atomic.Int64
}

func (z *zeroSource) Read(p []byte) (int, error) {
	if z.ctx.Err() != nil && z.after.Add(1) > 2 {
		return 0, errors.New("still read after its caller had gone")
	}
	clear(p)
	z.read.Add(int64(len(p)))
	return len(p), nil
}

// Put stops when its context ends, even while every chunk is zeros and
// nothing is written (it checked the context only in writes, so a
// sparse entry's hole kept it reading after the request had gone).
func TestPutStopsWhenContextEnds(t *testing.T) {
	s := fsstore.New(t.TempDir()) // the default chunk size, as the daemon's
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	src := &zeroSource{ctx: ctx}
	up := s.NewUploader()
	defer up.Close()
	done := make(chan error, 1)
	go func() {
		_, err := up.Put(ctx, src)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	cancelled := time.Now()
	select {
	case err := <-done:
		t.Logf("%.1f GiB of zeros read; Put returned %v after the cancel: %v", float64(src.read.Load())/(1<<30), time.Since(cancelled), err)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Put still reading 5 s after its context ended")
	}
}

package syncproto

import (
	"context"
	"crypto/sha256"
	"flag"
	"io"
	"os"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
	"computerd/fsstore/storetest"
	"computerd/internal/testheap"
)

// pullFiles sizes TestPullHeap: go test ./syncproto -run TestPullHeap -v -pull-files 1000000
var pullFiles = flag.Int("pull-files", 100_000, "files of the tree TestPullHeap pulls")

// The home answers a pull (full or incremental) and a fetch of a
// changeset of many ops with a bounded amount of heap: the ops are read
// from the store's diff, or spooled, one at a time, and the chunks they
// name are sorted out on disk; the stream is the one the executor reads.
func TestPullHeap(t *testing.T) {
	n := *pullFiles
	if testing.Short() {
		n = 10_000
	}
	ctx := context.Background()
	s := fsstore.New(t.TempDir())
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := storetest.ManyFiles(t, s, n)
	h := &Home{Store: s}
	for _, tc := range []struct {
		name   string
		answer func(io.Writer) error
		ops    int // at least
		chunks int
	}{
		{"full pull", func(out io.Writer) error { return h.Pull(ctx, out, w, PullRequest{}) }, n, n},
		{"incremental pull", func(out io.Writer) error {
			return h.Pull(ctx, out, w, PullRequest{Have: 1, InlineMax: 1 << 40})
		}, n, n},
		{"fetch", func(out io.Writer) error {
			return h.Fetch(ctx, out, w, FetchRequest{From: 1, To: w.Head, Hashes: []core.Hash{core.Hash(sha256.Sum256([]byte("file 0\n")))}})
		}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.CreateTemp(t.TempDir(), "stream")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			t0 := time.Now()
			grew := testheap.Growth(func() {
				if err := tc.answer(f); err != nil {
					t.Error(err)
				}
			})
			took := time.Since(t0)
			size, _ := f.Seek(0, io.SeekCurrent)
			f.Seek(0, io.SeekStart)
			dec := NewDecoder(f)
			var hdr PullHeader
			if err := dec.Header(&hdr); err != nil {
				t.Fatal(err)
			}
			chunks := 0
			var cs *Received
			for cs == nil {
				_, _, c, err := dec.Next()
				if err != nil {
					t.Fatal(err)
				}
				if c == nil {
					chunks++
				}
				cs = c
			}
			if cs.Ops.Len() < tc.ops || chunks != tc.chunks {
				t.Fatalf("%d ops, %d chunks; want at least %d ops and %d chunks", cs.Ops.Len(), chunks, tc.ops, tc.chunks)
			}
			t.Logf("%s of %d ops, %d chunks (%.1f MiB): heap grew %.1f MiB in %v", tc.name, cs.Ops.Len(), chunks,
				float64(size)/(1<<20), float64(grew)/(1<<20), took)
			if grew > 24<<20 {
				t.Fatalf("%s grew the heap by %.1f MiB, want under 24 MiB", tc.name, float64(grew)/(1<<20))
			}
		})
	}
}

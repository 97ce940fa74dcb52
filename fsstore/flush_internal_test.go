package fsstore

import (
	"context"
	"strings"
	"testing"

	"computerd/core"
)

// TestCommitsFlushed checks the level each kind of transaction commits
// at: every commit FULL (on the disk when it returns) but a transaction
// of chunks alone, which the commit naming them carries to the disk;
// everything NORMAL with NoFsync. The power-cut test (powercut_test.go)
// checks what that keeps.
func TestCommitsFlushed(t *testing.T) {
	const normal, full = 1, 2 // PRAGMA synchronous
	for _, tc := range []struct {
		name          string
		noFsync       bool
		commit, chunk int
	}{
		{"default", false, full, normal},
		{"nofsync", true, normal, normal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := New(t.TempDir())
			s.NoFsync = tc.noFsync
			if err := s.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			level := func() int {
				var n int
				if err := s.wconn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			inWrite := func() int {
				var n int
				if err := s.write(ctx, func() error { n = level(); return nil }); err != nil {
					t.Fatal(err)
				}
				return n
			}
			inChunks := func() int {
				s.wmu.Lock()
				defer s.wmu.Unlock()
				var n int
				if err := s.inTxChunks(ctx, 0, func() error { n = level(); return nil }); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if got := inWrite(); got != tc.commit {
				t.Errorf("a write after Open commits at synchronous=%d, want %d", got, tc.commit)
			}
			if got := inChunks(); got != tc.chunk {
				t.Errorf("a transaction of chunks commits at synchronous=%d, want %d", got, tc.chunk)
			}
			// An upload's chunks, then the commit naming them.
			w, err := s.CreateWorkspace(ctx, "t", "w")
			if err != nil {
				t.Fatal(err)
			}
			up := s.NewUploader()
			defer up.Close()
			c, err := up.Put(ctx, strings.NewReader("hello"))
			if err != nil {
				t.Fatal(err)
			}
			if err := up.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := level(); got != tc.chunk {
				t.Errorf("after an upload's chunks the writer is at synchronous=%d, want %d", got, tc.chunk)
			}
			if _, err := s.Commit(ctx, w.ID, &core.Batch{Ops: []core.Op{{Kind: core.OpCreate, Path: "f", Content: c}}}, CommitInfo{Source: core.SourceAPI}); err != nil {
				t.Fatal(err)
			}
			if got := level(); got != tc.commit {
				t.Errorf("the commit naming them left the writer at synchronous=%d, want %d", got, tc.commit)
			}
			if got := inWrite(); got != tc.commit {
				t.Errorf("a write after the commit commits at synchronous=%d, want %d", got, tc.commit)
			}
		})
	}
}

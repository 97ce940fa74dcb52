package fsstore_test

import (
	"context"
	"errors"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// TestCommitKey checks that a commit with an idempotency key some revision
// already holds applies nothing and answers that revision, and that keys
// belong to their workspace.
func TestCommitKey(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.CreateWorkspace(ctx, "t", "other")
	if err != nil {
		t.Fatal(err)
	}
	appendX := func(ws int64, key string) core.Revision {
		t.Helper()
		r, err := s.Commit(ctx, ws, (&core.Batch{}).Add(core.Op{Kind: core.OpCreate, Path: "f", Data: []byte("x")}), fsstore.CommitInfo{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := appendX(w.ID, "k1")
	again := appendX(w.ID, "k1")
	if again.Rev != first.Rev {
		t.Errorf("retry committed revision %d, want the first's %d", again.Rev, first.Rev)
	}
	if head, _ := s.WorkspaceByID(ctx, w.ID); head.Head != first.Rev {
		t.Errorf("head %d after a retried commit, want %d", head.Head, first.Rev)
	}
	if got, err := s.RevisionByKey(ctx, w.ID, "k1"); err != nil || got.Rev != first.Rev {
		t.Errorf("RevisionByKey: %+v %v", got, err)
	}
	if _, err := s.RevisionByKey(ctx, w.ID, "k2"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("unknown key: %v", err)
	}
	// The same key in another workspace is another mutation.
	if r := appendX(other.ID, "k1"); r.Rev != 2 {
		t.Errorf("other workspace's commit: revision %d, want 2", r.Rev)
	}
	if r := appendX(w.ID, "k2"); r.Rev != first.Rev+1 {
		t.Errorf("new key: revision %d, want %d", r.Rev, first.Rev+1)
	}
}

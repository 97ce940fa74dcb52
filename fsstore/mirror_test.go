package fsstore_test

import (
	"context"
	"errors"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// A mirror's home revision is recorded with the commit that makes it, or
// alone for the head; a workspace deleted forgets it.
func TestMirrorState(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "m")
	if err != nil {
		t.Fatal(err)
	}
	mirror := func(want, wantHome int64) {
		t.Helper()
		if rev, home, err := s.Mirror(ctx, w.ID); err != nil || rev != want || home != wantHome {
			t.Fatalf("mirror: local@%d = home@%d %v, want local@%d = home@%d", rev, home, err, want, wantHome)
		}
	}
	mirror(0, 0)
	r, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("f", []byte("x"), 0o644), fsstore.CommitInfo{Source: core.SourceSync, HomeRev: 5})
	if err != nil {
		t.Fatal(err)
	}
	mirror(r.Rev, 5)
	if err := s.RecordMirror(ctx, w.ID, r.Rev, 6); err != nil {
		t.Fatal(err)
	}
	mirror(r.Rev, 6)
	// A commit without HomeRev leaves the row as it was: the head moved
	// past it, which is how a reader tells the mirror changed locally.
	r2, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("g", []byte("y"), 0o644), fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	mirror(r.Rev, 6)
	if err := s.RecordMirror(ctx, w.ID, r.Rev, 7); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("RecordMirror of a revision that is not the head: %v", err)
	}
	if err := s.RecordMirror(ctx, w.ID, r2.Rev, 7); err != nil {
		t.Fatal(err)
	}
	mirror(r2.Rev, 7)
	if err := s.DeleteWorkspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	mirror(0, 0)
}

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
	mirror := func(want, wantHome int64, wantWS ...int64) {
		t.Helper()
		m, err := s.Mirror(ctx, w.ID)
		if err != nil || m.Rev != want || m.HomeRev != wantHome || (len(wantWS) > 0 && m.HomeWS != wantWS[0]) {
			t.Fatalf("mirror: local@%d = home %d@%d %v, want local@%d = home@%d %v", m.Rev, m.HomeWS, m.HomeRev, err, want, wantHome, wantWS)
		}
	}
	mirror(0, 0, 0)
	r, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("f", []byte("x"), 0o644), fsstore.CommitInfo{Source: core.SourceSync, HomeRev: 5, HomeWS: 9})
	if err != nil {
		t.Fatal(err)
	}
	mirror(r.Rev, 5, 9)
	if err := s.RecordMirror(ctx, w.ID, fsstore.Mirrored{Rev: r.Rev, HomeRev: 6, HomeWS: 11}); err != nil {
		t.Fatal(err)
	}
	mirror(r.Rev, 6, 11)
	// A commit without HomeRev leaves the row as it was: the head moved
	// past it, which is how a reader tells the mirror changed locally.
	r2, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("g", []byte("y"), 0o644), fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	mirror(r.Rev, 6)
	if err := s.RecordMirror(ctx, w.ID, fsstore.Mirrored{Rev: r.Rev, HomeRev: 7}); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("RecordMirror of a revision that is not the head: %v", err)
	}
	if err := s.RecordMirror(ctx, w.ID, fsstore.Mirrored{Rev: r2.Rev, HomeRev: 7}); err != nil {
		t.Fatal(err)
	}
	mirror(r2.Rev, 7)
	if err := s.DeleteWorkspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	mirror(0, 0)
	// What an executor knew of its home.
	if h, err := s.ExecutorHome(ctx); err != nil || h != (fsstore.ExecutorHome{}) {
		t.Fatalf("executor home of a new store: %+v %v", h, err)
	}
	want := fsstore.ExecutorHome{URL: "https://home:7777", Tenant: "t"}
	if err := s.SetExecutorHome(ctx, want); err != nil {
		t.Fatal(err)
	}
	if h, err := s.ExecutorHome(ctx); err != nil || h != want {
		t.Fatalf("executor home: %+v %v, want %+v", h, err, want)
	}
}

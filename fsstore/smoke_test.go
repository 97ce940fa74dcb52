package fsstore_test

import (
	"context"
	"errors"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	b := &core.Batch{}
	b.Mkdir("a", 0o755).WriteFile("a/x", []byte("hello world, this is longer than sixteen bytes"), 0o644)
	r, err := s.Commit(ctx, w.ID, b, fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	sn, err := s.Snapshot(ctx, w.ID, r.Rev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sn.ReadFile(ctx, "a/x")
	if err != nil || string(got) != "hello world, this is longer than sixteen bytes" {
		t.Fatalf("read %q %v", got, err)
	}
	r2, err := s.Commit(ctx, w.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpRename, From: "a", Path: "b"}), fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Diff(ctx, w.ID, r.Rev, r2.Rev)
	if err != nil {
		t.Fatal(err)
	}
	// A rename is one op, not a delete plus a subtree of creates; besides
	// it only the root's new mtime.
	renames := 0
	for _, op := range cs.Ops {
		switch {
		case op.Kind == core.OpRename && op.From == "a" && op.Path == "b":
			renames++
		case op.Kind == core.OpUtimes && op.Path == "":
		default:
			t.Errorf("diff of a rename has %v", op)
		}
	}
	if renames != 1 {
		t.Errorf("diff of a rename: %v, want one rename a -> b", cs.Ops)
	}
	f, err := s.Fork(ctx, w.ID, r.Rev, "f")
	if err != nil {
		t.Fatal(err)
	}
	sn, _ = s.Snapshot(ctx, f.ID, core.Head)
	if _, err := sn.Stat(ctx, "a/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, f.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpDelete, Path: "a"}), fsstore.CommitInfo{}); !errors.Is(err, core.ErrNotEmpty) {
		t.Fatal(err)
	}
}

// TestRevisionInfo checks that one revision is described as Log does it,
// and that a revision never made is core.ErrUnknownRevision.
func TestRevisionInfo(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("f", []byte("x"), 0o644), fsstore.CommitInfo{Source: core.SourceExec, ExecID: "e1", Message: "m"})
	if err != nil {
		t.Fatal(err)
	}
	log, err := s.Log(ctx, w.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.RevisionInfo(ctx, w.ID, r.Rev)
	if err != nil || got != log[0] || got.ExecID != "e1" || got.Message != "m" {
		t.Fatalf("RevisionInfo: %+v %v, log %+v", got, err, log[0])
	}
	if rev, err := s.ExecRevision(ctx, w.ID, "e1"); err != nil || rev != r.Rev {
		t.Fatalf("ExecRevision: %d %v", rev, err)
	}
	if _, err := s.RevisionInfo(ctx, w.ID, r.Rev+5); !errors.Is(err, core.ErrUnknownRevision) {
		t.Fatalf("missing revision: %v", err)
	}
}

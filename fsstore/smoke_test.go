package fsstore_test

import (
	"context"
	"errors"
	"testing"

	"computerd/fsstore"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	b := &fsstore.Batch{}
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
	r2, err := s.Commit(ctx, w.ID, (&fsstore.Batch{}).Add(fsstore.Op{Kind: fsstore.OpRename, From: "a", Path: "b"}), fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Diff(ctx, w.ID, r.Rev, r2.Rev)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range cs.Ops {
		t.Log(op)
	}
	f, err := s.Fork(ctx, w.ID, r.Rev, "f")
	if err != nil {
		t.Fatal(err)
	}
	sn, _ = s.Snapshot(ctx, f.ID, fsstore.Head)
	if _, err := sn.Stat(ctx, "a/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, f.ID, (&fsstore.Batch{}).Add(fsstore.Op{Kind: fsstore.OpDelete, Path: "a"}), fsstore.CommitInfo{}); !errors.Is(err, fsstore.ErrNotEmpty) {
		t.Fatal(err)
	}
}

package fsstore_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

func TestCommitNodes(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := s.Snapshot(ctx, w.ID, 0)
	root := sn.RootIno()
	first, err := s.ReserveInos(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	// An ordinary commit never takes a reserved number.
	rev, err := s.Commit(ctx, w.ID, new(core.Batch).WriteFile("plain", []byte("p"), 0), fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	sn, _ = s.Snapshot(ctx, w.ID, rev.Rev)
	if st, _ := sn.Stat(ctx, "plain"); st.Ino >= first && st.Ino < first+10 {
		t.Fatalf("plain got reserved inode %d", st.Ino)
	}
	dirA, dirB, file := first, first+1, first+2
	content, err := s.Put(ctx, bytes.NewReader(bytes.Repeat([]byte("x"), 40)))
	if err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1234567890, 42).UnixNano()
	ops := []fsstore.NodeOp{
		{Kind: core.OpMkdir, Dir: root, Name: "a", Ino: dirA, Mode: 0o750},
		{Kind: core.OpMkdir, Dir: dirA, Name: "b", Ino: dirB},
		{Kind: core.OpCreate, Dir: dirB, Name: "f", Ino: file},
		// Renaming a directory: later ops name entries by directory inode,
		// so they follow it.
		{Kind: core.OpRename, FromDir: root, FromName: "a", Dir: root, Name: "z"},
		{Kind: core.OpLink, Dir: dirA, Name: "hard", Ino: file},
		{Kind: core.OpWrite, Ino: file, Content: content, Holes: []int64{1}},
		{Kind: core.OpTruncate, Ino: file, Size: 50},
		{Kind: core.OpChmod, Ino: file, Mode: 0o600},
		{Kind: core.OpChown, Ino: file, UID: 7, GID: 8},
		{Kind: core.OpUtimes, Ino: file, Mtime: mt},
	}
	rev, err = s.CommitNodes(ctx, w.ID, ops, fsstore.CommitInfo{Source: core.SourceMount})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Changes != len(ops) {
		t.Fatalf("changes %d", rev.Changes)
	}
	sn, _ = s.Snapshot(ctx, w.ID, rev.Rev)
	for p, want := range map[string]uint64{"z": dirA, "z/b": dirB, "z/b/f": file, "z/hard": file} {
		st, err := sn.Stat(ctx, p)
		if err != nil || st.Ino != want {
			t.Fatalf("%s: ino %d, want %d (%v)", p, st.Ino, want, err)
		}
	}
	st, _ := sn.Stat(ctx, "z/b/f")
	if st.Size != 50 || st.Nlink != 2 || st.Mode.Perm() != 0o600 || st.UID != 7 || st.GID != 8 || st.Mtime.UnixNano() != mt {
		t.Fatalf("f: %+v", st)
	}
	data, _ := sn.ReadFile(ctx, "z/hard")
	want := append(bytes.Repeat([]byte("x"), 16), make([]byte, 16)...) // chunk 1 became a hole
	want = append(want, bytes.Repeat([]byte("x"), 8)...)
	want = append(want, make([]byte, 10)...)
	if !bytes.Equal(data, want) {
		t.Fatalf("data %q, want %q", data, want)
	}
	if dst, _ := sn.Stat(ctx, "z"); dst.Mode.Perm() != 0o750 {
		t.Fatalf("z mode %v", dst.Mode)
	}
	sts, err := sn.ReadDirStat(ctx, dirA)
	if err != nil || len(sts) != 2 || sts[0].Name != "b" || sts[1].Name != "hard" || sts[1].Size != 50 {
		t.Fatalf("ReadDirStat %+v %v", sts, err)
	}
	// A failing op changes nothing.
	before := rev.Rev
	_, err = s.CommitNodes(ctx, w.ID, []fsstore.NodeOp{
		{Kind: core.OpDelete, Dir: dirA, Name: "hard"},
		{Kind: core.OpDelete, Dir: dirA, Name: "missing"},
	}, fsstore.CommitInfo{})
	if !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	if w2, _ := s.WorkspaceByID(ctx, w.ID); w2.Head != before {
		t.Fatal("failed commit moved the head")
	}
	// Conflicts by path against Base.
	if _, err := s.Commit(ctx, w.ID, new(core.Batch).WriteFile("z/b/f", []byte("api"), 0), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	_, err = s.CommitNodes(ctx, w.ID, []fsstore.NodeOp{{Kind: core.OpTruncate, Ino: file, Size: 1}}, fsstore.CommitInfo{Base: before})
	var ce *core.ConflictError
	if !errors.As(err, &ce) || len(ce.Paths) != 1 || ce.Paths[0] != "z/b/f" {
		t.Fatalf("conflict: %v", err)
	}
	if _, err := s.CommitNodes(ctx, w.ID, []fsstore.NodeOp{{Kind: core.OpCreate, Dir: root, Name: "other", Ino: first + 3}}, fsstore.CommitInfo{Base: before}); err != nil {
		t.Fatalf("unrelated change after base: %v", err)
	}
}

func TestDrafts(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, _ := s.CreateWorkspace(ctx, "t", "w")
	s.Commit(ctx, w.ID, new(core.Batch).WriteFile("a", []byte("a"), 0), fsstore.CommitInfo{})
	d, err := s.CreateDraft(ctx, w.ID, 0, "exec-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Origin != w.ID || d.OriginRev != 2 || d.Tenant != "t" || d.Label != "exec-1" {
		t.Fatalf("draft %+v", d)
	}
	if _, err := s.CreateDraft(ctx, w.ID, 0, "exec-1"); !errors.Is(err, core.ErrWorkspaceExists) {
		t.Fatalf("duplicate label: %v", err)
	}
	if ws, _ := s.Workspaces(ctx, "t"); len(ws) != 1 {
		t.Fatalf("tenant lists %v", ws)
	}
	if ds, _ := s.Drafts(ctx); len(ds) != 1 || ds[0].ID != d.ID {
		t.Fatalf("drafts %v", ds)
	}
	sn, _ := s.Snapshot(ctx, d.ID, 0)
	if b, _ := sn.ReadFile(ctx, "a"); string(b) != "a" {
		t.Fatal("draft does not read through")
	}
	kept, err := s.KeepDraft(ctx, d.ID, "w.kept")
	if err != nil {
		t.Fatal(err)
	}
	if kept.Tenant != "t" || kept.Name != "w.kept" {
		t.Fatalf("kept %+v", kept)
	}
	if ws, _ := s.Workspaces(ctx, "t"); len(ws) != 2 {
		t.Fatalf("tenant lists %v", ws)
	}
	if ds, _ := s.Drafts(ctx); len(ds) != 0 {
		t.Fatalf("drafts %v", ds)
	}
}

package fsstore_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// A changeset that conflicts is kept whole in a fork at its base, in one
// transaction; a retry with the same exec id finds that fork.
func TestApplyOrKeep(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("a", []byte("base"), 0o644).WriteFile("b", []byte("b"), 0o644), fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	change := func(p, content string) *core.Changeset {
		return &core.Changeset{From: base.Rev, Ops: []core.Op{{Kind: core.OpCreate, Path: p, Data: []byte(content), Mode: 0o644}}}
	}
	// No conflict: applied to the workspace like Apply.
	res, err := s.ApplyOrKeep(ctx, w.ID, change("c", "c"), fsstore.CommitInfo{ExecID: "p1", Base: base.Rev}, "w.conflict-p1")
	if err != nil || res.Conflict != nil || res.Copy.ID != 0 || res.Revision.Rev != base.Rev+1 || res.Revision.ExecID != "p1" {
		t.Fatalf("push without conflict: %+v %v", res, err)
	}
	// The workspace changes a since base; a changeset of a is kept.
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("a", []byte("head"), 0o644), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	head, _ := s.WorkspaceByID(ctx, w.ID)
	cs := change("a", "pushed")
	cs.Ops = append(cs.Ops, core.Op{Kind: core.OpCreate, Path: "d", Data: []byte("d"), Mode: 0o644})
	info := fsstore.CommitInfo{Source: core.SourceExec, ExecID: "p2", Base: base.Rev, Message: "make"}
	res, err = s.ApplyOrKeep(ctx, w.ID, cs, info, "w.conflict-p2")
	if err != nil || !reflect.DeepEqual(res.Conflict, []string{"a"}) || res.Copy.Name != "w.conflict-p2" || res.Duplicate {
		t.Fatalf("conflicting push: %+v %v", res, err)
	}
	if after, _ := s.WorkspaceByID(ctx, w.ID); after.Head != head.Head {
		t.Fatalf("a kept changeset moved the workspace from %d to %d", head.Head, after.Head)
	}
	if res.Copy.BaseID != w.ID || res.Copy.BaseRev != base.Rev || res.Copy.Head != 2 || res.Revision.Rev != 2 ||
		res.Revision.ExecID != "p2" || res.Revision.Source != core.SourceExec || res.Revision.Message != "make" {
		t.Fatalf("the copy: %+v, its revision %+v", res.Copy, res.Revision)
	}
	sn, err := s.Snapshot(ctx, res.Copy.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"a": "pushed", "b": "b", "d": "d"} {
		if got, err := sn.ReadFile(ctx, p); err != nil || string(got) != want {
			t.Errorf("copy's %s = %q %v, want %q", p, got, err, want)
		}
	}
	if _, err := sn.Stat(ctx, "c"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("the copy holds c, which came after its base: %v", err)
	}
	// A retry finds the copy, whatever name it is given, and writes nothing.
	again, err := s.ApplyOrKeep(ctx, w.ID, cs, info, "other-name")
	if err != nil || !again.Duplicate || again.Copy.ID != res.Copy.ID || again.Revision.Rev != res.Revision.Rev ||
		!reflect.DeepEqual(again.Conflict, res.Conflict) {
		t.Fatalf("retry: %+v %v, first %+v", again, err, res)
	}
	if _, err := s.Workspace(ctx, "t", "other-name"); !errors.Is(err, core.ErrWorkspaceNotFound) {
		t.Fatalf("a retry made a second copy: %v", err)
	}
	// Another push whose copy's name is taken gets the next one.
	info.ExecID = "p3"
	res3, err := s.ApplyOrKeep(ctx, w.ID, cs, info, "w.conflict-p2")
	if err != nil || res3.Copy.Name != "w.conflict-p2-2" || res3.Duplicate {
		t.Fatalf("copy name taken: %+v %v", res3, err)
	}
	// A changeset that fails on the copy leaves no copy: one transaction.
	bad := change("a", "x")
	bad.Ops = append(bad.Ops, core.Op{Kind: core.OpWrite, Path: "missing", Data: []byte("x")})
	info.ExecID = "p4"
	if _, err := s.ApplyOrKeep(ctx, w.ID, bad, info, "w.conflict-p4"); err == nil {
		t.Fatal("a changeset with a failing op was kept")
	}
	if _, err := s.Workspace(ctx, "t", "w.conflict-p4"); !errors.Is(err, core.ErrWorkspaceNotFound) {
		t.Fatalf("a failed keep left its copy: %v", err)
	}
	// The next workspace made (which may take the rolled-back copy's id)
	// reads as itself.
	n, err := s.CreateWorkspace(ctx, "t", "n")
	if err != nil {
		t.Fatal(err)
	}
	if sn, err := s.Snapshot(ctx, n.ID, core.Head); err != nil {
		t.Fatal(err)
	} else if _, err := sn.Stat(ctx, "a"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a new workspace reads through to w: %v", err)
	}
}

// A tree whose base is gone is kept whole as a fork of the head, never
// applied to the workspace; a retry finds that copy.
func TestKeepTree(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	head, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("a", []byte("home"), 0o644).WriteFile("h", []byte("h"), 0o644), fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	tree := &fsstore.PackedOps{}
	for _, op := range []core.Op{
		{Kind: core.OpMkdir, Path: "d", Mode: 0o755},
		{Kind: core.OpCreate, Path: "a", Data: []byte("mine"), Mode: 0o644},
		{Kind: core.OpCreate, Path: "d/e", Data: []byte("e"), Mode: 0o600},
	} {
		if err := tree.Add(op); err != nil {
			t.Fatal(err)
		}
	}
	info := fsstore.CommitInfo{Source: core.SourceExec, ExecID: "x1", Message: "make"}
	res, err := s.KeepTreePacked(ctx, w.ID, tree, info, "w.conflict-x1")
	if err != nil || res.Copy.Name != "w.conflict-x1" || res.Copy.BaseID != w.ID || res.Copy.BaseRev != head.Rev ||
		res.Revision.Rev != 2 || res.Revision.ExecID != "x1" || res.Duplicate || res.Conflict != nil {
		t.Fatalf("kept tree: %+v %v", res, err)
	}
	if after, _ := s.WorkspaceByID(ctx, w.ID); after.Head != head.Rev {
		t.Fatalf("a kept tree moved the workspace from %d to %d", head.Rev, after.Head)
	}
	sn, err := s.Snapshot(ctx, res.Copy.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"a": "mine", "d/e": "e"} {
		if got, err := sn.ReadFile(ctx, p); err != nil || string(got) != want {
			t.Errorf("copy's %s = %q %v, want %q", p, got, err, want)
		}
	}
	if _, err := sn.Stat(ctx, "h"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("the copy holds h, which the kept tree does not: %v", err)
	}
	again, err := s.KeepTreePacked(ctx, w.ID, tree, info, "w.conflict-x1")
	if err != nil || !again.Duplicate || again.Copy.ID != res.Copy.ID || again.Revision.Rev != res.Revision.Rev {
		t.Fatalf("retry: %+v %v, first %+v", again, err, res)
	}
}

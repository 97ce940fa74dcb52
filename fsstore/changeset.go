package fsstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"computerd/core"
)

// Apply commits a changeset as one new revision of ws (see Changeset for
// how its ops are read). If info.Base is zero it defaults to cs.From, so a
// changeset made against an older revision commits only if none of its
// paths changed since; otherwise it fails with a *ConflictError.
func (s *Store) Apply(ctx context.Context, ws int64, cs *core.Changeset, info CommitInfo) (core.Revision, error) {
	ops, err := cleanOps(cs.Ops)
	if err != nil {
		return core.Revision{}, err
	}
	return s.applyOps(ctx, ws, cs.From, sliceOps(ops), info)
}

// ApplyPacked is Apply of the changeset from..(ops), whose ops
// PackedOps.Add has checked: it reads them one at a time, never unpacked
// whole (a sync pull's changeset).
func (s *Store) ApplyPacked(ctx context.Context, ws int64, from int64, ops *PackedOps, info CommitInfo) (core.Revision, error) {
	return s.applyOps(ctx, ws, from, ops, info)
}

func (s *Store) applyOps(ctx context.Context, ws int64, from int64, ops opList, info CommitInfo) (core.Revision, error) {
	if info.Base == 0 {
		info.Base = from
	}
	rev, _, err := s.commit(ctx, ws, info, ops, func(t *wtx) error { return t.applyChangeset(ops) })
	return rev, err
}

// removal is an entry a changeset takes away, resolved against the base.
type removal struct {
	op     int // its index among the changeset's ops
	depth  int
	parent uint64
	name   string
	ino    uint64
}

// applyChangeset applies ops as a changeset (see core.Changeset). It
// keeps indexes of the ops, not the ops, so that a PackedOps is read one
// op at a time.
func (t *wtx) applyChangeset(ops opList) error {
	var removals []removal
	type add struct{ op, depth int }
	var adds []add
	var links, edits []int
	moved := map[string]uint64{} // rename source path -> inode
	for i := range ops.Len() {
		op := ops.Op(i)
		switch op.Kind {
		case core.OpDelete, core.OpDeleteAll, core.OpRename:
			p := op.Path
			if op.Kind == core.OpRename {
				if op.Exchange {
					return opError(op, fmt.Errorf("exchange in a changeset: %w", core.ErrInvalidArgument))
				}
				p = op.From
			}
			if p == "" {
				if op.Kind == core.OpDeleteAll {
					removals = append(removals, removal{op: i, ino: t.v.root})
					continue
				}
				return opError(op, core.ErrInvalidArgument)
			}
			parent, name, err := t.parentOf(p)
			if err != nil {
				return opError(op, err)
			}
			ino, _, err := t.lookup(parent.ino, name)
			if errors.Is(err, core.ErrNotFound) && op.Kind == core.OpDeleteAll {
				continue
			} else if err != nil {
				return pathErr(string(op.Kind), p, err)
			}
			removals = append(removals, removal{op: i, depth: depth(p), parent: parent.ino, name: name, ino: ino})
			if op.Kind == core.OpRename {
				adds = append(adds, add{i, depth(op.Path)})
				moved[op.From] = ino
			}
		case core.OpMkdir, core.OpCreate, core.OpSymlink, core.OpMknod:
			adds = append(adds, add{i, depth(op.Path)})
		case core.OpLink:
			links = append(links, i)
		default:
			edits = append(edits, i)
		}
	}
	// Remove, deepest first, so directories are empty when their turn comes.
	sort.SliceStable(removals, func(i, j int) bool { return removals[i].depth > removals[j].depth })
	for _, r := range removals {
		if err := t.removeResolved(r, ops.Op(r.op)); err != nil {
			return opError(ops.Op(r.op), err)
		}
	}
	// Add, shallowest first, so parents exist when their children come.
	sort.SliceStable(adds, func(i, j int) bool { return adds[i].depth < adds[j].depth })
	for _, a := range adds {
		op := ops.Op(a.op)
		var err error
		if op.Kind == core.OpRename {
			err = t.attach(op.Path, moved[op.From])
		} else {
			err = t.apply(op)
		}
		if err != nil {
			return opError(op, err)
		}
	}
	for _, i := range append(links, edits...) {
		op := ops.Op(i)
		if err := t.apply(op); err != nil {
			return opError(op, err)
		}
	}
	return nil
}

// removeResolved removes what r, resolved from op, names.
func (t *wtx) removeResolved(r removal, op core.Op) error {
	in, err := t.inode(r.ino)
	if err != nil {
		return err
	}
	switch op.Kind {
	case core.OpRename:
		// Detach only; the inode is attached at its new name later.
		if in.isDir() {
			t.movedDirs()
			t.touchDir(r.parent, -1)
		} else {
			t.touchDir(r.parent, 0)
			in.forgetLink(r.parent, r.name) // attach records the new name
		}
		return t.setEntry(r.parent, r.name, 0, 0)
	case core.OpDeleteAll:
		if in.isDir() {
			if err := t.emptyDir(in); err != nil {
				return err
			}
		}
		if r.ino == t.v.root {
			return nil
		}
	default:
		if in.isDir() {
			children, err := t.v.list(in.ino)
			if err != nil {
				return err
			}
			if len(children) > 0 {
				return core.ErrNotEmpty
			}
		}
	}
	return t.unlink(r.parent, r.name, in)
}

// attach links a detached inode at path p.
func (t *wtx) attach(p string, ino uint64) error {
	parent, name, err := t.parentOf(p)
	if err != nil {
		return err
	}
	if err := t.free(parent, name); err != nil {
		return err
	}
	in, err := t.inode(ino)
	if err != nil {
		return err
	}
	return t.add(parent, name, in)
}

// Restore makes the tree at path p (the whole tree if p is "") look as it
// did at revision rev, as a new revision. Paths outside p are untouched. If
// nothing differs, no revision is made and the head revision is returned.
func (s *Store) Restore(ctx context.Context, ws int64, rev int64, p string, info CommitInfo) (core.Revision, error) {
	clean, err := core.CleanPath(p)
	if err != nil {
		return core.Revision{}, err
	}
	w, err := s.WorkspaceByID(ctx, ws)
	if err != nil {
		return core.Revision{}, err
	}
	cs, err := s.Diff(ctx, ws, w.Head, rev)
	if err != nil {
		return core.Revision{}, err
	}
	ops, err := s.restrict(ctx, ws, rev, cs.Ops, clean)
	if err != nil {
		return core.Revision{}, err
	}
	if len(ops) == 0 {
		log, err := s.Log(ctx, ws, 1)
		if err != nil || len(log) == 0 {
			return core.Revision{}, err
		}
		return log[0], nil
	}
	if info.Source == "" {
		info.Source = core.SourceRestore
	}
	if info.Message == "" {
		info.Message = fmt.Sprintf("restore %q from revision %d", clean, rev)
	}
	info.Base = cs.From
	return s.Apply(ctx, ws, &core.Changeset{From: cs.From, To: cs.To, Ops: ops}, info)
}

// restrict keeps the ops of a changeset that touch only the subtree at root.
// A rename across the subtree's edge becomes a delete (moving out) or a
// fresh copy of the old file (moving in), so nothing outside changes.
func (s *Store) restrict(ctx context.Context, ws, rev int64, ops []core.Op, root string) ([]core.Op, error) {
	if root == "" {
		return ops, nil
	}
	// If an ancestor of root is replaced or moved, the ops' paths say
	// nothing about what root holds; if an entry moves in from outside, it
	// must be copied, with what the diff does beneath it and the hard links
	// it has there. Either way, replace the subtree wholesale.
	for _, op := range ops {
		var paths []string
		switch op.Kind {
		case core.OpRename:
			paths = []string{op.From, op.Path}
		case core.OpDelete, core.OpDeleteAll, core.OpMkdir, core.OpCreate, core.OpSymlink, core.OpMknod:
			paths = []string{op.Path}
		}
		for _, p := range paths {
			if p != root && inSubtree(root, p) {
				return s.replaceOps(ctx, ws, rev, root)
			}
		}
		if (op.Kind == core.OpRename || op.Kind == core.OpLink) && inSubtree(op.Path, root) && !inSubtree(op.From, root) {
			return s.replaceOps(ctx, ws, rev, root)
		}
	}
	var out []core.Op
	for _, op := range ops {
		in := inSubtree(op.Path, root)
		switch {
		case op.Kind == core.OpRename && !in && inSubtree(op.From, root):
			// What moves out goes with everything beneath it.
			out = append(out, core.Op{Kind: core.OpDeleteAll, Path: op.From})
		case in:
			out = append(out, op)
		}
	}
	return out, nil
}

// replaceOps replaces the subtree at root with a copy of it as it was at rev.
func (s *Store) replaceOps(ctx context.Context, ws, rev int64, root string) ([]core.Op, error) {
	exists := func(rev int64) (bool, error) {
		sn, err := s.Snapshot(ctx, ws, rev)
		if err != nil {
			return false, err
		}
		_, err = sn.Stat(ctx, root)
		if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrNotDir) {
			return false, nil
		}
		return err == nil, err
	}
	then, err := exists(rev)
	if err != nil {
		return nil, err
	}
	now, err := exists(core.Head)
	if err != nil {
		return nil, err
	}
	var out []core.Op
	if now {
		out = append(out, core.Op{Kind: core.OpDeleteAll, Path: root})
	}
	if then {
		cp, err := s.copyOps(ctx, ws, rev, root)
		if err != nil {
			return nil, err
		}
		out = append(out, cp...)
	}
	return out, nil
}

// copyOps recreates the entry at p (and what lies beneath it) as it was at
// rev; hard links within it stay hard links.
func (s *Store) copyOps(ctx context.Context, ws, rev int64, p string) ([]core.Op, error) {
	sn, err := s.Snapshot(ctx, ws, rev)
	if err != nil {
		return nil, err
	}
	v, err := sn.view(ctx)
	if err != nil {
		return nil, err
	}
	var ops, links, times []core.Op
	seen := map[uint64]string{} // inode -> the path it was copied to
	err = sn.Walk(ctx, p, func(q string, st core.Stat) error {
		if first, ok := seen[st.Ino]; ok && !st.IsDir() {
			links = append(links, core.Op{Kind: core.OpLink, From: first, Path: q})
			return nil
		}
		seen[st.Ino] = q
		in, err := v.inode(st.Ino)
		if err != nil {
			return err
		}
		d := &differ{va: v, vb: v, cs: v.cs, sink: func(op core.Op) error { // the add, then its attributes
			if opPhase(op.Kind) == opPhase(core.OpUtimes) {
				times = append(times, op)
			} else {
				ops = append(ops, op)
			}
			return nil
		}}
		return d.created(in, []string{q})
	})
	return append(append(ops, links...), times...), err
}

package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"

	"computerd/core"
)

// Diff returns the changeset that turns revision from of workspace ws into
// revision to (either may be the older). It reads only the rows born
// between the two revisions, so it costs O(changes), not O(tree).
func (s *Store) Diff(ctx context.Context, ws int64, from, to int64) (*core.Changeset, error) {
	a, err := s.Snapshot(ctx, ws, from)
	if err != nil {
		return nil, err
	}
	b, err := s.Snapshot(ctx, ws, to)
	if err != nil {
		return nil, err
	}
	va, err := a.view(ctx)
	if err != nil {
		return nil, err
	}
	vb, err := b.view(ctx)
	if err != nil {
		return nil, err
	}
	d, err := diffViews(ctx, s.rq, ws, va, vb)
	if err = b.settle(ctx, a.settle(ctx, err)); err != nil {
		return nil, err
	}
	return &core.Changeset{From: a.Rev, To: b.Rev, Ops: d.ops}, nil
}

// differ accumulates the ops of one diff, by phase.
type differ struct {
	va, vb  *view
	cs      int64
	// ops holds the ops of every phase as they are found; finish puts
	// them in phase order (see opPhase).
	ops []core.Op
	// changed lists the paths that changed in content or structure (not
	// directory attributes, which every entry change also touches).
	changed []string
	// entryDirs holds the directories whose entries differ: applying the
	// diff moves their mtimes, so their times are always restated.
	entryDirs map[uint64]bool
}

// diffViews compares two views of workspace ws whose revisions differ only
// by the rows born between them in ws's own layer.
func diffViews(ctx context.Context, q *queries, ws int64, va, vb *view) (*differ, error) {
	ra, rb := va.layers[0].rev, vb.layers[0].rev
	lo, hi := min(ra, rb), max(ra, rb)
	d := &differ{va: va, vb: vb, cs: va.cs, entryDirs: map[uint64]bool{}}
	removed := map[uint64][]dirEntryKey{}
	added := map[uint64][]dirEntryKey{}
	inos := map[uint64]bool{}
	extents := map[uint64][]int64{}

	// Entries.
	rows, err := q.changedDentries.QueryContext(ctx, ws, lo, hi)
	if err != nil {
		return nil, wrapDB("diff entries", err)
	}
	var keys []dirEntryKey
	for rows.Next() {
		var k dirEntryKey
		var name []byte
		if err := rows.Scan(&k.parent, &name); err != nil {
			rows.Close()
			return nil, wrapDB("diff entries", err)
		}
		k.name = string(name)
		keys = append(keys, k)
	}
	rows.Close()
	for _, k := range keys {
		a, err := lookupOrZero(va, k)
		if err != nil {
			return nil, err
		}
		b, err := lookupOrZero(vb, k)
		if err != nil {
			return nil, err
		}
		if a == b {
			continue
		}
		d.entryDirs[k.parent] = true
		inos[k.parent] = true
		if a != 0 {
			removed[a] = append(removed[a], k)
			inos[a] = true
		}
		if b != 0 {
			added[b] = append(added[b], k)
			inos[b] = true
		}
	}
	// Inodes and extents.
	if err := scanInos(ctx, q.changedInodes, ws, lo, hi, func(ino uint64, _ int64) { inos[ino] = true }); err != nil {
		return nil, err
	}
	if err := scanInos(ctx, q.changedExtents, ws, lo, hi, func(ino uint64, idx int64) {
		inos[ino] = true
		extents[ino] = append(extents[ino], idx)
	}); err != nil {
		return nil, err
	}
	for ino := range inos {
		if err := d.inode(ino, removed[ino], added[ino], extents[ino]); err != nil {
			return nil, err
		}
	}
	d.finish()
	return d, nil
}

func lookupOrZero(v *view, k dirEntryKey) (uint64, error) {
	ino, _, err := v.lookup(k.parent, k.name)
	if errors.Is(err, core.ErrNotFound) {
		return 0, nil
	}
	return ino, err
}

func scanInos(ctx context.Context, st *sql.Stmt, ws, lo, hi int64, fn func(uint64, int64)) error {
	rows, err := st.QueryContext(ctx, ws, lo, hi)
	if err != nil {
		return wrapDB("diff", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		var ino uint64
		var idx int64
		if len(cols) == 2 {
			err = rows.Scan(&ino, &idx)
		} else {
			err = rows.Scan(&ino)
		}
		if err != nil {
			return wrapDB("diff", err)
		}
		fn(ino, idx)
	}
	return wrapDB("diff", rows.Err())
}

func (d *differ) pathA(k dirEntryKey) (string, error) {
	dp, err := d.va.dirPath(k.parent)
	return joinPath(dp, k.name), err
}

func (d *differ) pathB(k dirEntryKey) (string, error) {
	dp, err := d.vb.dirPath(k.parent)
	return joinPath(dp, k.name), err
}

func (d *differ) paths(pathOf func(dirEntryKey) (string, error), keys []dirEntryKey) ([]string, error) {
	out := make([]string, len(keys))
	for i, k := range keys {
		var err error
		if out[i], err = pathOf(k); err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	return out, nil
}

func inodeOrNil(v *view, ino uint64) (*inode, error) {
	in, err := v.inode(ino)
	if errors.Is(err, core.ErrNotFound) {
		return nil, nil
	}
	return in, err
}

// inode emits the ops for one inode that changed between the views.
func (d *differ) inode(ino uint64, removed, added []dirEntryKey, idxs []int64) error {
	ia, err := inodeOrNil(d.va, ino)
	if err != nil {
		return err
	}
	ib, err := inodeOrNil(d.vb, ino)
	if err != nil {
		return err
	}
	pa, err := d.paths(d.pathA, removed)
	if err != nil {
		return err
	}
	pb, err := d.paths(d.pathB, added)
	if err != nil {
		return err
	}
	switch {
	case ib == nil:
		for _, p := range pa {
			d.ops = append(d.ops, core.Op{Kind: core.OpDelete, Path: p})
			d.changed = append(d.changed, p)
		}
		return nil
	case ia == nil:
		if len(pb) == 0 {
			return nil // born and gone between the views
		}
		return d.created(ib, pb)
	}
	n := min(len(pa), len(pb))
	for i := 0; i < n; i++ {
		d.ops = append(d.ops, core.Op{Kind: core.OpRename, From: pa[i], Path: pb[i]})
		d.changed = append(d.changed, pa[i], pb[i])
	}
	for _, p := range pa[n:] {
		d.ops = append(d.ops, core.Op{Kind: core.OpDelete, Path: p})
		d.changed = append(d.changed, p)
	}
	if len(pb) > n {
		from := ""
		if n > 0 {
			from = pb[0]
		} else {
			all, err := d.vb.pathsOf(ino)
			if err != nil {
				return err
			}
			for _, p := range all {
				if !containsString(pb, p) {
					from = p
					break
				}
			}
		}
		for _, p := range pb[n:] {
			d.ops = append(d.ops, core.Op{Kind: core.OpLink, From: from, Path: p})
			d.changed = append(d.changed, p)
		}
	}
	// Changes to the inode itself, under one of its current names.
	name, err := d.someName(ib, pb)
	if err != nil {
		return err
	}
	n0 := len(d.changed)
	if ib.isReg() {
		if err := d.content(ia, ib, name, idxs); err != nil {
			return err
		}
	}
	d.attrs(ia, ib, name)
	if len(d.changed) > n0 && !ib.isDir() && ib.nlink > 1 {
		// The file changed under every one of its names, for conflicts.
		all, err := d.vb.pathsOf(ib.ino)
		if err != nil {
			return err
		}
		for _, p := range all {
			if p != name {
				d.changed = append(d.changed, p)
			}
		}
	}
	return nil
}

// someName finds a path of in in the result view.
func (d *differ) someName(in *inode, added []string) (string, error) {
	if len(added) > 0 {
		return added[0], nil
	}
	if in.isDir() {
		return d.vb.dirPath(in.ino)
	}
	if in.parent != 0 {
		dp, err := d.vb.dirPath(in.parent)
		return joinPath(dp, in.name), err
	}
	all, err := d.vb.pathsOf(in.ino)
	if err != nil {
		return "", err
	}
	if len(all) == 0 {
		return "", fmt.Errorf("diff: inode %d has no name", in.ino)
	}
	return all[0], nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// created emits the ops that make a new inode under its names pb.
func (d *differ) created(in *inode, pb []string) error {
	p := pb[0]
	for _, q := range pb {
		d.changed = append(d.changed, q)
	}
	switch {
	case in.isDir():
		d.ops = append(d.ops, core.Op{Kind: core.OpMkdir, Path: p, Mode: fileMode(in.mode)})
	case in.isSymlink():
		d.ops = append(d.ops, core.Op{Kind: core.OpSymlink, Path: p, Target: in.target, Mtime: in.mtime})
	case in.isSpecial():
		d.ops = append(d.ops, core.Op{Kind: core.OpMknod, Path: p, Mode: fileMode(in.mode), Rdev: in.rdev, Mtime: in.mtime})
	default:
		es, err := d.vb.extents(in.ino, 0, (in.size+d.cs-1)/d.cs)
		if err != nil {
			return err
		}
		refs, err := d.refs(es)
		if err != nil {
			return err
		}
		d.ops = append(d.ops, core.Op{Kind: core.OpCreate, Path: p, Mode: fileMode(in.mode), Content: &core.Content{Size: in.size, Chunks: refs}, Mtime: in.mtime})
	}
	for _, q := range pb[1:] {
		d.ops = append(d.ops, core.Op{Kind: core.OpLink, From: p, Path: q})
	}
	if in.uid != 0 || in.gid != 0 {
		d.ops = append(d.ops, core.Op{Kind: core.OpChown, Path: p, UID: in.uid, GID: in.gid})
	}
	if in.isDir() {
		// Entries added beneath it would move a time set earlier.
		d.ops = append(d.ops, core.Op{Kind: core.OpUtimes, Path: p, Mtime: in.mtime})
	}
	return nil
}

func (d *differ) refs(es []extent) ([]core.ChunkRef, error) {
	refs := make([]core.ChunkRef, len(es))
	for i, e := range es {
		var h []byte
		if err := d.vb.q.chunkInfo.QueryRowContext(d.vb.ctx, e.chunk).Scan(&h, &refs[i].Len); err != nil {
			return nil, wrapDB("chunk info", err)
		}
		copy(refs[i].Hash[:], h)
		refs[i].Index, refs[i].Row = e.idx, e.chunk
	}
	return refs, nil
}

// content emits the writes and truncates that turn ia's bytes into ib's.
func (d *differ) content(ia, ib *inode, p string, idxs []int64) error {
	var writes []extent
	hole := int64(-1)
	for _, idx := range idxs {
		if idx*d.cs >= ib.size {
			continue
		}
		ca, err := d.va.extentAt(ia.ino, idx)
		if err != nil {
			return err
		}
		cb, err := d.vb.extentAt(ib.ino, idx)
		if err != nil {
			return err
		}
		switch {
		case ca == cb:
		case cb == 0:
			if hole < 0 || idx < hole {
				hole = idx
			}
		default:
			writes = append(writes, extent{idx, cb})
		}
	}
	if hole >= 0 {
		// Data became a hole: cut the file there and rewrite what follows.
		d.ops = append(d.ops, core.Op{Kind: core.OpTruncate, Path: p, Size: hole * d.cs})
		kept := writes[:0]
		for _, w := range writes {
			if w.idx < hole {
				kept = append(kept, w)
			}
		}
		rest, err := d.vb.extents(ib.ino, hole, (ib.size+d.cs-1)/d.cs)
		if err != nil {
			return err
		}
		writes = append(kept, rest...)
	}
	if len(writes) > 0 {
		refs, err := d.refs(writes)
		if err != nil {
			return err
		}
		d.ops = append(d.ops, core.Op{Kind: core.OpWrite, Path: p, Content: &core.Content{Chunks: refs}})
	}
	if hole >= 0 || ia.size != ib.size || len(writes) > 0 {
		d.ops = append(d.ops, core.Op{Kind: core.OpTruncate, Path: p, Size: ib.size})
		d.changed = append(d.changed, p)
	}
	return nil
}

// attrs emits the attribute changes of an inode present in both views.
func (d *differ) attrs(ia, ib *inode, p string) {
	changed := false
	if ia.mode != ib.mode {
		d.ops = append(d.ops, core.Op{Kind: core.OpChmod, Path: p, Mode: fileMode(ib.mode)})
		changed = true
	}
	if ia.uid != ib.uid || ia.gid != ib.gid {
		d.ops = append(d.ops, core.Op{Kind: core.OpChown, Path: p, UID: ib.uid, GID: ib.gid})
		changed = true
	}
	if ia.mtime != ib.mtime || ib.isDir() && d.entryDirs[ib.ino] {
		d.ops = append(d.ops, core.Op{Kind: core.OpUtimes, Path: p, Mtime: ib.mtime})
		changed = changed || !ib.isDir()
	}
	if changed && !ib.isDir() {
		d.changed = append(d.changed, p)
	}
}

// finish orders the ops: removals deepest first, then renames, additions
// shallowest first, links, and edits grouped by path.
// opPhase orders a changeset's ops: deletes (base paths), renames, adds
// (mkdir, create, symlink), links, then content and attributes.
func opPhase(k core.OpKind) int {
	switch k {
	case core.OpDelete:
		return 0
	case core.OpRename:
		return 1
	case core.OpMkdir, core.OpCreate, core.OpSymlink, core.OpMknod:
		return 2
	case core.OpLink:
		return 3
	}
	return 4
}

// finish sorts the ops in place, by phase, then by path (deletes deepest
// first), keeping the order they were found in otherwise.
func (d *differ) finish() {
	sort.SliceStable(d.ops, func(i, j int) bool {
		a, b := d.ops[i], d.ops[j]
		if pa, pb := opPhase(a.Kind), opPhase(b.Kind); pa != pb {
			return pa < pb
		}
		if a.Kind == core.OpDelete {
			return a.Path > b.Path
		}
		return a.Path < b.Path
	})
	sort.Strings(d.changed)
}

// checkConflict fails if ops touch a path that changed between base and the head.
func (s *Store) checkConflict(ctx context.Context, t *wtx, base int64, ops opList) error {
	head := t.rev - 1
	w := core.Workspace{ID: t.ws.id, Name: t.ws.name, Head: head}
	if err := s.checkRev(ctx, s.wconn, w, base); err != nil {
		return err
	}
	vBase, err := s.newView(ctx, s.wq, s.wconn, t.ws, base)
	if err != nil {
		return err
	}
	vHead, err := s.newView(ctx, s.wq, s.wconn, t.ws, head)
	if err != nil {
		return err
	}
	d, err := diffViews(ctx, s.wq, t.ws.id, vBase, vHead)
	if err != nil {
		return err
	}
	var conflicts []string
	seen := map[string]bool{}
	for i := range ops.Len() {
		op := ops.Op(i)
		attr := op.Kind == core.OpChmod || op.Kind == core.OpChown || op.Kind == core.OpUtimes
		paths := []string{op.Path}
		if op.Kind == core.OpRename || op.Kind == core.OpLink {
			paths = append(paths, op.From)
		}
		for _, p := range paths {
			for _, c := range d.changed {
				hit := c == p
				if !attr {
					hit = hit || inSubtree(c, p) || inSubtree(p, c)
				}
				if hit && !seen[c] {
					seen[c] = true
					conflicts = append(conflicts, c)
				}
			}
		}
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return &core.ConflictError{Base: base, Head: head, Paths: conflicts}
	}
	return nil
}

package fsstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	"computerd/core"
)

// Diff returns the changeset that turns revision from of workspace ws into
// revision to (either may be the older). It reads only the rows born
// between the two revisions, so it costs O(changes), not O(tree); it
// holds every op in memory (about 300 bytes each), so a caller that can
// take the ops one at a time uses OpenDiff.
func (s *Store) Diff(ctx context.Context, ws int64, from, to int64) (*core.Changeset, error) {
	d, err := s.OpenDiff(ctx, ws, from, to)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	cs := &core.Changeset{From: d.From, To: d.To}
	if d.Len() > 0 {
		cs.Ops = make([]core.Op, 0, d.Len())
	}
	return cs, d.Each(func(op core.Op) error {
		cs.Ops = append(cs.Ops, op)
		return nil
	})
}

// DiffStream is the changeset between two revisions (as Diff makes it),
// held packed in an OpSpool: in memory up to a few MiB, on disk beyond,
// so a diff of any size costs a bounded amount of memory. Close it when
// done.
type DiffStream struct {
	From, To int64
	s        *Store
	to       *Snapshot // of To, which the chunks are read at
	ops      *OpSpool
	chunks   *spill // the distinct chunks the ops name, once EachChunk has run
}

// OpenDiff works out the changeset that turns revision from of workspace
// ws into revision to, as Diff does, and returns it to be read op by op.
// Every failure to read either revision comes from OpenDiff, before the
// first op is read.
func (s *Store) OpenDiff(ctx context.Context, ws int64, from, to int64) (*DiffStream, error) {
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
	d := &DiffStream{From: a.Rev, To: b.Rev, s: s, to: b, ops: newSortedOpSpool(s.Dir)}
	err = diffViews(ctx, s.rq, ws, va, vb, s.Dir, d.ops, nil)
	if err = b.settle(ctx, a.settle(ctx, err)); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Len returns how many ops the changeset holds.
func (d *DiffStream) Len() int { return d.ops.Len() }

// Each calls fn with each op of the changeset, in order. It may be called
// more than once.
func (d *DiffStream) Each(fn func(core.Op) error) error { return d.ops.Each(fn) }

// EachChunk calls fn once with each distinct chunk (by hash) that the
// changeset's content ops name, in the order of their hashes. The first
// call sorts them out of the ops, through a spill of its own, so it costs
// a bounded amount of memory however many there are.
func (d *DiffStream) EachChunk(fn func(core.ChunkRef) error) error {
	if d.chunks == nil {
		d.chunks = newSpill(d.s.Dir)
		var rec []byte
		err := d.Each(func(op core.Op) error {
			if op.Content == nil {
				return nil
			}
			for _, ref := range op.Content.Chunks {
				if ref.Hash == (core.Hash{}) {
					continue
				}
				rec = append(rec[:0], ref.Hash[:]...)
				rec = binary.BigEndian.AppendUint64(rec, uint64(ref.Row))
				rec = binary.BigEndian.AppendUint64(rec, uint64(ref.Len))
				if err := d.chunks.add(rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	var last core.Hash
	first := true
	return d.chunks.each(func(rec []byte) error {
		ref := core.ChunkRef{Hash: core.Hash(rec[:32]), Row: int64(binary.BigEndian.Uint64(rec[32:])), Len: int(binary.BigEndian.Uint64(rec[40:]))}
		if !first && ref.Hash == last {
			return nil
		}
		first, last = false, ref.Hash
		return fn(ref)
	})
}

// ReadChunk reads the bytes of a chunk EachChunk gave into buf (grown if
// too small), and checks them against the chunk's hash. If revision To
// has been pruned since OpenDiff, it fails with core.ErrUnknownRevision.
func (d *DiffStream) ReadChunk(ctx context.Context, ref core.ChunkRef, buf []byte) ([]byte, error) {
	buf, err := d.readChunk(ctx, ref, buf)
	return buf, d.to.settle(ctx, err)
}

func (d *DiffStream) readChunk(ctx context.Context, ref core.ChunkRef, buf []byte) ([]byte, error) {
	var data sql.RawBytes
	rows, err := d.s.rq.chunkData.QueryContext(ctx, ref.Row)
	if err != nil {
		return nil, wrapDB("read chunk", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, wrapDB("read chunk", err)
		}
		return nil, fmt.Errorf("chunk %s: %w", ref.Hash, core.ErrNotFound)
	}
	if err := rows.Scan(&data); err != nil {
		return nil, wrapDB("read chunk", err)
	}
	buf = append(buf[:0], data...)
	if len(buf) != ref.Len || sha256.Sum256(buf) != [32]byte(ref.Hash) {
		return nil, fmt.Errorf("chunk %s: its bytes do not match its hash", ref.Hash)
	}
	return buf, nil
}

// Close releases the files the stream's spills hold, if any.
func (d *DiffStream) Close() {
	d.ops.Close()
	if d.chunks != nil {
		d.chunks.close()
	}
}

// differ works out the ops of one diff, one changed inode at a time.
type differ struct {
	va, vb *view
	cs     int64
	// sink takes each op as it is found (nil: only changed is wanted).
	sink func(core.Op) error
	// changed takes the paths that changed in content or structure (not
	// directory attributes, which every entry change also touches), if
	// wanted (see checkConflict); noted counts them.
	changed *spill
	noted   int
	err     error // the first failure of sink or changed
	// entryDir is whether the entries of the directory inode at hand
	// differ: applying the diff moves its mtime, so its time is restated.
	entryDir bool
}

// What a record of the per-inode spill of diffViews says about its inode,
// which its first 8 bytes name (big-endian, so records group by inode).
const (
	inoTouched  byte = iota // a row of the inode or its extents was born between the views
	inoEntryDir             // an entry of the directory differs between the views
	inoRemoved              // a name of the inode in the first view is gone: parent (8 bytes), name
	inoAdded                // a name of the inode in the second view is new: parent, name
	inoExtent               // a chunk index changed: index (8 bytes)
)

func inoRecord(b []byte, ino uint64, what byte, rest ...[]byte) []byte {
	b = binary.BigEndian.AppendUint64(b[:0], ino)
	b = append(b, what)
	for _, r := range rest {
		b = append(b, r...)
	}
	return b
}

// diffViews compares two views of workspace ws whose revisions differ only
// by the rows born between them in ws's own layer, giving out the ops
// (if out is not nil) and to changed the paths that changed (if changed
// is not nil). What it learns of each changed inode (its names
// gone and new, its changed chunks) is sorted by inode through a spill in
// dir, then each inode's ops are worked out in turn: its memory is bounded
// whatever the number of changes.
func diffViews(ctx context.Context, q *queries, ws int64, va, vb *view, dir string, out *OpSpool, changed *spill) error {
	ra, rb := va.layers[0].rev, vb.layers[0].rev
	lo, hi := min(ra, rb), max(ra, rb)
	d := &differ{va: va, vb: vb, cs: va.cs, changed: changed}
	if out != nil {
		var key []byte
		d.sink = func(op core.Op) error {
			key = opKey(key, op)
			return out.add(key, op)
		}
	}
	byIno := newSpill(dir)
	defer byIno.close()
	var rec []byte

	// Entries: their keys are staged in a spill and looked up once the
	// query is done, as a lookup while its rows are open would hold a
	// second connection of the reader pool.
	entries := newSpill(dir)
	defer entries.close()
	rows, err := q.changedDentries.QueryContext(ctx, ws, lo, hi)
	if err != nil {
		return wrapDB("diff entries", err)
	}
	for rows.Next() {
		var parent uint64
		var name []byte
		if err := rows.Scan(&parent, &name); err != nil {
			rows.Close()
			return wrapDB("diff entries", err)
		}
		rec = append(binary.BigEndian.AppendUint64(rec[:0], parent), name...)
		if err := entries.add(rec); err != nil {
			rows.Close()
			return err
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return wrapDB("diff entries", err)
	}
	err = entries.each(func(key []byte) error {
		k := dirEntryKey{parent: binary.BigEndian.Uint64(key), name: string(key[8:])}
		a, err := lookupOrZero(va, k)
		if err != nil {
			return err
		}
		b, err := lookupOrZero(vb, k)
		if err != nil {
			return err
		}
		if a == b {
			return nil
		}
		if err := byIno.add(inoRecord(rec, k.parent, inoEntryDir)); err != nil {
			return err
		}
		if a != 0 {
			if err := byIno.add(inoRecord(rec, a, inoRemoved, key)); err != nil {
				return err
			}
		}
		if b != 0 {
			if err := byIno.add(inoRecord(rec, b, inoAdded, key)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	entries.close()
	// Inodes and extents.
	if err := scanInos(ctx, q.changedInodes, ws, lo, hi, func(ino uint64, _ int64) error {
		return byIno.add(inoRecord(rec, ino, inoTouched))
	}); err != nil {
		return err
	}
	if err := scanInos(ctx, q.changedExtents, ws, lo, hi, func(ino uint64, idx int64) error {
		return byIno.add(inoRecord(rec, ino, inoExtent, binary.BigEndian.AppendUint64(nil, uint64(idx))))
	}); err != nil {
		return err
	}
	// One inode at a time.
	var g inoChanges
	err = byIno.each(func(r []byte) error {
		ino := binary.BigEndian.Uint64(r)
		if g.ino != 0 && ino != g.ino {
			if err := d.inode(&g); err != nil {
				return err
			}
			g = inoChanges{removed: g.removed[:0], added: g.added[:0], idxs: g.idxs[:0]}
		}
		g.ino = ino
		switch r[8] {
		case inoEntryDir:
			g.entryDir = true
		case inoRemoved:
			g.removed = append(g.removed, dirEntryKey{parent: binary.BigEndian.Uint64(r[9:]), name: string(r[17:])})
		case inoAdded:
			g.added = append(g.added, dirEntryKey{parent: binary.BigEndian.Uint64(r[9:]), name: string(r[17:])})
		case inoExtent:
			// Records sort by index within an inode, and each is there once.
			g.idxs = append(g.idxs, int64(binary.BigEndian.Uint64(r[9:])))
		}
		return nil
	})
	if err == nil && g.ino != 0 {
		err = d.inode(&g)
	}
	if err == nil {
		err = d.err
	}
	return err
}

// inoChanges is what changed of one inode between the views.
type inoChanges struct {
	ino            uint64
	removed, added []dirEntryKey
	idxs           []int64 // changed chunk indexes, ascending
	entryDir       bool
}

func lookupOrZero(v *view, k dirEntryKey) (uint64, error) {
	ino, _, err := v.lookup(k.parent, k.name)
	if errors.Is(err, core.ErrNotFound) {
		return 0, nil
	}
	return ino, err
}

func scanInos(ctx context.Context, st *sql.Stmt, ws, lo, hi int64, fn func(uint64, int64) error) error {
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
		if err := fn(ino, idx); err != nil {
			return err
		}
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
func (d *differ) inode(g *inoChanges) error {
	ino, removed, added, idxs := g.ino, g.removed, g.added, g.idxs
	d.entryDir = g.entryDir
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
			d.emit(core.Op{Kind: core.OpDelete, Path: p})
			d.note(p)
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
		d.emit(core.Op{Kind: core.OpRename, From: pa[i], Path: pb[i]})
		d.note(pa[i], pb[i])
	}
	for _, p := range pa[n:] {
		d.emit(core.Op{Kind: core.OpDelete, Path: p})
		d.note(p)
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
			d.emit(core.Op{Kind: core.OpLink, From: from, Path: p})
			d.note(p)
		}
	}
	// Changes to the inode itself, under one of its current names.
	name, err := d.someName(ib, pb)
	if err != nil {
		return err
	}
	n0 := d.noted
	if ib.isReg() {
		if err := d.content(ia, ib, name, idxs); err != nil {
			return err
		}
	}
	d.attrs(ia, ib, name)
	if d.noted > n0 && !ib.isDir() && ib.nlink > 1 {
		// The file changed under every one of its names, for conflicts.
		all, err := d.vb.pathsOf(ib.ino)
		if err != nil {
			return err
		}
		for _, p := range all {
			if p != name {
				d.note(p)
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
		d.note(q)
	}
	switch {
	case in.isDir():
		d.emit(core.Op{Kind: core.OpMkdir, Path: p, Mode: fileMode(in.mode)})
	case in.isSymlink():
		d.emit(core.Op{Kind: core.OpSymlink, Path: p, Target: in.target, Mtime: in.mtime})
	case in.isSpecial():
		d.emit(core.Op{Kind: core.OpMknod, Path: p, Mode: fileMode(in.mode), Rdev: in.rdev, Mtime: in.mtime})
	default:
		es, err := d.vb.extents(in.ino, 0, (in.size+d.cs-1)/d.cs)
		if err != nil {
			return err
		}
		refs, err := d.refs(es)
		if err != nil {
			return err
		}
		d.emit(core.Op{Kind: core.OpCreate, Path: p, Mode: fileMode(in.mode), Content: &core.Content{Size: in.size, Chunks: refs}, Mtime: in.mtime})
	}
	for _, q := range pb[1:] {
		d.emit(core.Op{Kind: core.OpLink, From: p, Path: q})
	}
	if in.uid != 0 || in.gid != 0 {
		d.emit(core.Op{Kind: core.OpChown, Path: p, UID: in.uid, GID: in.gid})
	}
	if in.isDir() {
		// Entries added beneath it would move a time set earlier.
		d.emit(core.Op{Kind: core.OpUtimes, Path: p, Mtime: in.mtime})
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
		d.emit(core.Op{Kind: core.OpTruncate, Path: p, Size: hole * d.cs})
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
		d.emit(core.Op{Kind: core.OpWrite, Path: p, Content: &core.Content{Chunks: refs}})
	}
	if hole >= 0 || ia.size != ib.size || len(writes) > 0 {
		d.emit(core.Op{Kind: core.OpTruncate, Path: p, Size: ib.size})
		d.note(p)
	}
	return nil
}

// attrs emits the attribute changes of an inode present in both views.
func (d *differ) attrs(ia, ib *inode, p string) {
	changed := false
	if ia.mode != ib.mode {
		d.emit(core.Op{Kind: core.OpChmod, Path: p, Mode: fileMode(ib.mode)})
		changed = true
	}
	if ia.uid != ib.uid || ia.gid != ib.gid {
		d.emit(core.Op{Kind: core.OpChown, Path: p, UID: ib.uid, GID: ib.gid})
		changed = true
	}
	if ia.mtime != ib.mtime || ib.isDir() && d.entryDir {
		d.emit(core.Op{Kind: core.OpUtimes, Path: p, Mtime: ib.mtime})
		changed = changed || !ib.isDir()
	}
	if changed && !ib.isDir() {
		d.note(p)
	}
}

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

// opKey is the order of a diff's ops: by phase, then by path (deletes
// deepest first, so a directory goes after what it held; the rest
// shallowest first), then in the order the differ found them. Within a
// phase a path belongs to one inode, so the order is the same however the
// inodes are visited. The path is written so that bytes.Compare orders
// it, and ends in a byte no path holds: as itself then 0 (ascending), or
// each byte inverted then 0xff (descending).
func opKey(b []byte, op core.Op) []byte {
	phase := opPhase(op.Kind)
	b = append(b[:0], byte(phase))
	if phase != 0 {
		b = append(b, op.Path...)
		return append(b, 0)
	}
	for i := 0; i < len(op.Path); i++ {
		b = append(b, ^op.Path[i])
	}
	return append(b, 0xff)
}

// emit gives op to the sink.
func (d *differ) emit(op core.Op) {
	if d.sink != nil && d.err == nil {
		d.err = d.sink(op)
	}
}

// note records paths as changed, if wanted.
func (d *differ) note(paths ...string) {
	if d.changed == nil {
		return
	}
	for _, p := range paths {
		d.noted++
		if d.err == nil {
			d.err = d.changed.add([]byte(p))
		}
	}
}

// checkConflict fails if ops touch a path that changed between base and
// the head: the same path, or, for an op other than an attribute's, one
// above or beneath it. The changed paths are sorted (and made distinct)
// through a spill and met one at a time; the ops' own paths, which the
// commit holds anyway, are indexed in memory.
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
	changed := newSpill(s.Dir)
	defer changed.close()
	if err := diffViews(ctx, s.wq, t.ws.id, vBase, vHead, s.Dir, nil, changed); err != nil {
		return err
	}
	hits := conflictRule(ops)
	var conflicts []string
	var last []byte
	first := true
	err = changed.each(func(c []byte) error {
		if !first && bytes.Equal(c, last) {
			return nil
		}
		first, last = false, append(last[:0], c...)
		if hits(string(c)) {
			conflicts = append(conflicts, string(c))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(conflicts) > 0 {
		return &core.ConflictError{Base: base, Head: head, Paths: conflicts}
	}
	return nil
}

// conflictRule returns whether a path c that changed since a commit's
// base conflicts with the commit's ops: an op touches c, or an op other
// than an attribute's (chmod, chown, utimes) touches a path above or
// beneath c. The ops' paths are indexed: whole (true) if an op other than
// an attribute's touches it, and those sorted, to find the ones beneath c.
func conflictRule(ops opList) func(c string) bool {
	touched := map[string]bool{}
	for i := range ops.Len() {
		op := ops.Op(i)
		whole := op.Kind != core.OpChmod && op.Kind != core.OpChown && op.Kind != core.OpUtimes
		touched[op.Path] = touched[op.Path] || whole
		if op.Kind == core.OpRename || op.Kind == core.OpLink {
			touched[op.From] = true
		}
	}
	var wholes []string
	for p, whole := range touched {
		if whole {
			wholes = append(wholes, p)
		}
	}
	sort.Strings(wholes)
	return func(c string) bool {
		if _, ok := touched[c]; ok {
			return true
		}
		if len(wholes) == 0 {
			return false
		}
		// A whole op on a path above c (the root is above every path).
		for a := c; a != ""; {
			a, _ = parentName(a)
			if touched[a] {
				return true
			}
		}
		// A whole op on a path beneath c.
		if c == "" {
			return true
		}
		i := sort.SearchStrings(wholes, c+"/")
		return i < len(wholes) && strings.HasPrefix(wholes[i], c+"/")
	}
}

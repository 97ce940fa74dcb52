package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"syscall"

	"computerd/core"
)

// Reading whole trees (walks, exports, sync) one directory per query: a
// directory's entries come joined with their inodes and, for ReadTree, with
// their chunks, in one pass. Forks fall back to per-entry reads, because
// their rows may live in several layers.
//
// The unary + on the birth terms keeps SQLite off the (ws, birth) indexes,
// which it would otherwise pick to drive the join: a scan of the whole
// workspace's rows per directory (and per file, for extents).
//
// The ORDER BY names whole primary keys as the join visits them (at most
// one row of each key is alive at ?3, so the order is that of name, then
// chunk index): SQLite then streams rows straight off the indexes. Ordering
// by name and idx alone made it sort every directory's rows, chunk bytes
// included, in a temporary b-tree.

const listPlusSQL = `SELECT d.name, d.ino, i.mode, i.uid, i.gid, i.nlink, i.size, i.mtime_ns, i.ctime_ns, i.target, i.parent, i.name, i.rdev, i.ws, i.birth%s
FROM dentries d
JOIN inodes i ON i.ws = d.ws AND i.ino = d.ino AND +i.birth <= ?3 AND i.death > ?3%s
WHERE d.ws = ?1 AND d.parent = ?2 AND +d.birth <= ?3 AND d.death > ?3 AND d.ino != 0%s
ORDER BY d.name%s`

var (
	listStatsSQL = fmt.Sprintf(listPlusSQL, "", "", "", "")
	// listDirsSQL lists only subdirectories (kind is the type bits of the
	// mode, shifted as inode.kind does).
	listDirsSQL = fmt.Sprintf(listPlusSQL, "", "", fmt.Sprintf(" AND d.kind = %d", syscall.S_IFDIR>>12), "")
	listDataSQL = fmt.Sprintf(listPlusSQL, ", e.idx, c.data",
		"\nLEFT JOIN extents e ON e.ws = d.ws AND e.ino = d.ino AND +e.birth <= ?3 AND e.death > ?3 AND e.chunk IS NOT NULL"+
			"\nLEFT JOIN chunks c ON c.id = e.chunk", "", ", d.birth, i.birth, e.idx")
)

// plusRow is one row of a joined listing.
type plusRow struct {
	name string
	in   inode
	idx  sql.NullInt64
	data []byte // the chunk's bytes; valid only until the cursor moves on
}

func scanPlus(rows *sql.Rows, withData bool) (plusRow, error) {
	var r plusRow
	var name, target, iname sql.RawBytes // copied into strings below
	// Into int64s, which database/sql fills directly; unsigned destinations
	// would cost it a format and parse per column.
	var ino, mode, uid, gid, nlink, parent, rdev int64
	dst := []any{&name, &ino, &mode, &uid, &gid, &nlink, &r.in.size, &r.in.mtime, &r.in.ctime, &target, &parent, &iname, &rdev, &r.in.ws, &r.in.birth}
	if withData {
		// RawBytes: the driver's copy of the blob, not a second one.
		dst = append(dst, &r.idx, (*sql.RawBytes)(&r.data))
	}
	err := rows.Scan(dst...)
	r.in.ino, r.in.mode, r.in.uid, r.in.gid, r.in.nlink, r.in.parent, r.in.rdev = uint64(ino), uint32(mode), uint32(uid), uint32(gid), uint32(nlink), uint64(parent), uint64(rdev)
	r.name, r.in.target, r.in.name = string(name), string(target), string(iname)
	return r, err
}

// children lists a directory's entries with their inodes.
func (v *view) children(dir uint64) ([]dirEntry, []*inode, error) {
	if len(v.layers) == 1 {
		l := v.layers[0]
		rows, err := v.q.listStats.QueryContext(v.ctx, l.ws, dir, l.rev)
		if err != nil {
			return nil, nil, wrapDB("list", err)
		}
		defer rows.Close()
		var es []dirEntry
		var ins []*inode
		for rows.Next() {
			r, err := scanPlus(rows, false)
			if err != nil {
				return nil, nil, wrapDB("list", err)
			}
			in := r.in
			es = append(es, dirEntry{name: r.name, ino: in.ino, kind: in.kind()})
			ins = append(ins, &in)
		}
		return es, ins, wrapDB("list", rows.Err())
	}
	es, err := v.list(dir)
	if err != nil {
		return nil, nil, err
	}
	ins := make([]*inode, len(es))
	for i, e := range es {
		if ins[i], err = v.inode(e.ino); err != nil {
			return nil, nil, fmt.Errorf("list: inode %d: %w", e.ino, err)
		}
	}
	return es, ins, nil
}

// TreeFunc is called by ReadTree for each entry; for a regular file, r
// reads its contents and is valid only until the call returns.
type TreeFunc func(p string, st core.Stat, r io.Reader) error

// ReadTree visits p and everything beneath it with contents: parents
// before children; within a directory, non-directories first, then
// subdirectories, each group in name order. It streams: memory does not
// grow with file or tree size.
func (sn *Snapshot) ReadTree(ctx context.Context, p string, fn TreeFunc) error {
	v, in, clean, err := sn.resolve(ctx, "read tree", p)
	if err != nil {
		return sn.settle(ctx, err)
	}
	_, name := parentName(clean)
	var r io.Reader
	if in.isReg() {
		r = &File{v: v, in: in, sn: sn}
	}
	if err := fn(clean, in.stat(name, clean), r); err != nil || !in.isDir() {
		return sn.settle(ctx, err)
	}
	if len(v.layers) == 1 {
		if ok, err := v.readTreeAhead(sn.s, clean, in.ino, fn); ok {
			return sn.settle(ctx, err)
		}
	}
	return sn.settle(ctx, v.readTree(clean, in.ino, fn))
}

// ReadDirFiles gives fn the entries of directory inode dir that are not
// directories, with contents, in name order: one directory of ReadTree,
// without descending (fn's paths are the entries' names).
func (sn *Snapshot) ReadDirFiles(ctx context.Context, dir uint64, fn TreeFunc) error {
	v, err := sn.view(ctx)
	if err != nil {
		return err
	}
	in, err := v.inode(dir)
	if err != nil {
		return sn.settle(ctx, err)
	}
	if !in.isDir() {
		return sn.settle(ctx, core.ErrNotDir)
	}
	if len(v.layers) == 1 {
		// On the read-ahead pool, whose small page caches suit contents
		// read once (the kernel keeps them).
		l := v.layers[0]
		rows, err := sn.s.aq.listData.QueryContext(ctx, l.ws, dir, l.rev)
		if err != nil {
			return sn.settle(ctx, wrapDB("read directory", err))
		}
		_, err = v.readDirRows("", sqlRowSource(rows), fn)
		rows.Close()
		return sn.settle(ctx, err)
	}
	skipDirs := func(p string, st core.Stat, r io.Reader) error {
		if st.IsDir() {
			return SkipDir
		}
		return fn(p, st, r)
	}
	return sn.settle(ctx, v.readTree("", dir, skipDirs))
}

// subdir is a directory entry ReadTree visits after its parent's files.
type subdir struct {
	name string
	in   *inode
}

func (v *view) readTree(p string, dir uint64, fn TreeFunc) error {
	var subdirs []subdir
	if len(v.layers) == 1 {
		rows, err := v.q.listData.QueryContext(v.ctx, v.layers[0].ws, dir, v.layers[0].rev)
		if err != nil {
			return wrapDB("read tree", err)
		}
		subdirs, err = v.readDirRows(p, sqlRowSource(rows), fn)
		rows.Close()
		if err != nil {
			return err
		}
	} else {
		es, ins, err := v.children(dir)
		if err != nil {
			return err
		}
		for i, e := range es {
			if ins[i].isDir() {
				subdirs = append(subdirs, subdir{e.name, ins[i]})
				continue
			}
			var r io.Reader
			if ins[i].isReg() {
				r = &File{v: v, in: ins[i]}
			}
			cp := joinPath(p, e.name)
			if err := fn(cp, ins[i].stat(e.name, cp), r); err != nil {
				return err
			}
		}
	}
	return v.visitSubdirs(p, subdirs, fn, nil, func(cp string, in *inode) error { return v.readTree(cp, in.ino, fn) })
}

// visitSubdirs gives fn each subdirectory of p, in order, and descends
// into those it does not skip (SkipDir; skipped, if not nil, hears of them).
func (v *view) visitSubdirs(p string, subdirs []subdir, fn TreeFunc, skipped func(string), descend func(string, *inode) error) error {
	for _, d := range subdirs {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		cp := joinPath(p, d.name)
		if err := fn(cp, d.in.stat(d.name, cp), nil); err != nil {
			if errors.Is(err, SkipDir) {
				if skipped != nil {
					skipped(cp)
				}
				continue
			}
			return err
		}
		if err := descend(cp, d.in); err != nil {
			return err
		}
	}
	return nil
}

// readDirRows streams one directory's files from its listing rows (a
// listData query's, in order) and returns its subdirectories for the
// caller to visit once the rows are done.
func (v *view) readDirRows(p string, src rowSource, fn TreeFunc) ([]subdir, error) {
	cr := &chunkReader{next: src, cs: v.cs}
	var subdirs []subdir
	if !cr.advance() {
		return nil, cr.err
	}
	for cr.ok {
		head := cr.row
		in := head.in
		if in.isDir() {
			subdirs = append(subdirs, subdir{head.name, &in})
			cr.advance()
			continue
		}
		cp := joinPath(p, head.name)
		var r io.Reader
		if in.isReg() {
			cr.start(&in)
			r = cr
		}
		if err := fn(cp, in.stat(head.name, cp), r); err != nil {
			return nil, err
		}
		// Skip what fn left unread of this entry.
		for cr.ok && cr.row.name == head.name {
			cr.advance()
		}
	}
	return subdirs, cr.err
}

// rowSource yields the rows of a listData query in order: the next row and
// true, or false at the end (with the error that ended it, if any).
type rowSource func() (plusRow, bool, error)

// sqlRowSource reads rows straight off a query: each row's chunk bytes are
// the driver's, valid until the next row.
func sqlRowSource(rows *sql.Rows) rowSource {
	return func() (plusRow, bool, error) {
		if !rows.Next() {
			return plusRow{}, false, rows.Err()
		}
		r, err := scanPlus(rows, true)
		return r, err == nil, err
	}
}

// chunkReader reads one file's contents from consecutive rows of a listing.
type chunkReader struct {
	next rowSource
	cs   int64
	row  plusRow // the current row
	ok   bool    // row is valid
	err  error

	in   *inode
	name string
	pos  int64
}

func (c *chunkReader) advance() bool {
	var err error
	c.row, c.ok, err = c.next()
	if err != nil {
		c.err, c.ok = wrapDB("read tree", err), false
	}
	return c.ok
}

func (c *chunkReader) start(in *inode) {
	c.in, c.name, c.pos = in, c.row.name, 0
}

// piece returns the file's next bytes from pos: a slice of the current
// row's chunk, or else the count of zero bytes (a hole) before the next
// chunk or the end of the file. Both are empty at the end or on error.
func (c *chunkReader) piece() ([]byte, int64) {
	for c.err == nil && c.pos < c.in.size {
		// The current row, if it is still this file's and has a chunk.
		if !c.ok || c.row.name != c.name || !c.row.idx.Valid {
			return nil, c.in.size - c.pos // no more chunks: zeros to the end
		}
		start := c.row.idx.Int64 * c.cs
		end := min(start+int64(len(c.row.data)), c.in.size) // bytes past the end are not content
		switch {
		case c.pos >= end:
			c.advance()
		case c.pos >= start:
			return c.row.data[c.pos-start : end-start], 0
		default:
			return nil, start - c.pos
		}
	}
	return nil, 0
}

// Read fills p with the file's bytes: chunk data, and zeros in holes.
func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.pos >= c.in.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) {
		data, zeros := c.piece()
		var m int
		switch {
		case len(data) > 0:
			m = copy(p[n:], data)
		case zeros > 0:
			m = int(min(int64(len(p)-n), zeros))
			clear(p[n : n+m])
		default:
			return n, c.err // nil at the end of the file: EOF comes next call
		}
		n += m
		c.pos += int64(m)
	}
	return n, nil
}

// WriteTo writes the rest of the file to w straight from the rows' chunk
// bytes, with no copy in between (io.Copy uses it).
func (c *chunkReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	var zbuf []byte
	for {
		data, zeros := c.piece()
		switch {
		case len(data) > 0:
		case zeros > 0:
			if zbuf == nil {
				zbuf = make([]byte, min(zeros, 64<<10))
			}
			data = zbuf[:min(zeros, int64(len(zbuf)))]
		default:
			return total, c.err
		}
		m, err := w.Write(data)
		total += int64(m)
		c.pos += int64(m)
		if err == nil && m < len(data) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return total, err
		}
	}
}

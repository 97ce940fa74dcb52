package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
)

// Reading whole trees (walks, exports, sync) one directory per query: a
// directory's entries come joined with their inodes and, for ReadTree, with
// their chunks, in one pass. Forks fall back to per-entry reads, because
// their rows may live in several layers.
//
// The unary + on the birth terms keeps SQLite off the (ws, birth) indexes,
// which it would otherwise pick to drive the join: a scan of the whole
// workspace's rows per directory (and per file, for extents).

const listPlusSQL = `SELECT d.name, d.ino, i.mode, i.uid, i.gid, i.nlink, i.size, i.mtime_ns, i.ctime_ns, i.target, i.parent, i.name%s
FROM dentries d
JOIN inodes i ON i.ws = d.ws AND i.ino = d.ino AND +i.birth <= ?3 AND i.death > ?3%s
WHERE d.ws = ?1 AND d.parent = ?2 AND +d.birth <= ?3 AND d.death > ?3 AND d.ino != 0
ORDER BY d.name%s`

var (
	listStatsSQL = fmt.Sprintf(listPlusSQL, "", "", "")
	listDataSQL  = fmt.Sprintf(listPlusSQL, ", e.idx, c.data",
		"\nLEFT JOIN extents e ON e.ws = d.ws AND e.ino = d.ino AND +e.birth <= ?3 AND e.death > ?3 AND e.chunk IS NOT NULL"+
			"\nLEFT JOIN chunks c ON c.id = e.chunk", ", e.idx")
)

// plusRow is one row of a joined listing.
type plusRow struct {
	name string
	in   inode
	idx  sql.NullInt64
	data []byte
}

func scanPlus(rows *sql.Rows, withData bool) (plusRow, error) {
	var r plusRow
	var name, target, iname []byte
	dst := []any{&name, &r.in.ino, &r.in.mode, &r.in.uid, &r.in.gid, &r.in.nlink, &r.in.size, &r.in.mtime, &r.in.ctime, &target, &r.in.parent, &iname}
	if withData {
		dst = append(dst, &r.idx, &r.data)
	}
	err := rows.Scan(dst...)
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
type TreeFunc func(p string, st Stat, r io.Reader) error

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
	return sn.settle(ctx, v.readTree(clean, in.ino, fn))
}

func (v *view) readTree(p string, dir uint64, fn TreeFunc) error {
	var subdirs []dirEntry
	if len(v.layers) == 1 {
		var err error
		if subdirs, err = v.readDirData(p, dir, fn); err != nil {
			return err
		}
	} else {
		es, ins, err := v.children(dir)
		if err != nil {
			return err
		}
		for i, e := range es {
			if ins[i].isDir() {
				subdirs = append(subdirs, e)
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
	for _, d := range subdirs {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		in, err := v.inode(d.ino)
		if err != nil {
			return err
		}
		cp := joinPath(p, d.name)
		if err := fn(cp, in.stat(d.name, cp), nil); err != nil {
			if errors.Is(err, SkipDir) {
				continue
			}
			return err
		}
		if err := v.readTree(cp, d.ino, fn); err != nil {
			return err
		}
	}
	return nil
}

// readDirData streams one directory's files from a single query and
// returns its subdirectories for the caller to visit after the cursor closes.
func (v *view) readDirData(p string, dir uint64, fn TreeFunc) ([]dirEntry, error) {
	l := v.layers[0]
	rows, err := v.q.listData.QueryContext(v.ctx, l.ws, dir, l.rev)
	if err != nil {
		return nil, wrapDB("read tree", err)
	}
	defer rows.Close()
	cr := &chunkReader{rows: rows, cs: v.cs}
	var subdirs []dirEntry
	if !cr.advance() {
		return nil, cr.err
	}
	for cr.ok {
		head := cr.row
		in := head.in
		if in.isDir() {
			subdirs = append(subdirs, dirEntry{name: head.name, ino: in.ino, kind: in.kind()})
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

// chunkReader reads one file's contents from consecutive rows of a listing.
type chunkReader struct {
	rows *sql.Rows
	cs   int64
	row  plusRow // the current row
	ok   bool    // row is valid
	err  error

	in   *inode
	name string
	pos  int64
}

func (c *chunkReader) advance() bool {
	c.ok = c.rows.Next()
	if c.ok {
		var err error
		if c.row, err = scanPlus(c.rows, true); err != nil {
			c.err, c.ok = wrapDB("read tree", err), false
		}
	} else if err := c.rows.Err(); err != nil {
		c.err = wrapDB("read tree", err)
	}
	return c.ok
}

func (c *chunkReader) start(in *inode) {
	c.in, c.name, c.pos = in, c.row.name, 0
}

// Read fills p with the file's bytes: chunk data, and zeros in holes.
func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.pos >= c.in.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.in.size-c.pos)]
	n := 0
	for n < len(p) {
		// The current row, if it is still this file's and has a chunk.
		if c.ok && c.row.name == c.name && c.row.idx.Valid {
			start := c.row.idx.Int64 * c.cs
			end := start + int64(len(c.row.data))
			switch {
			case c.pos >= end:
				c.advance()
				continue
			case c.pos >= start:
				m := copy(p[n:], c.row.data[c.pos-start:])
				n += m
				c.pos += int64(m)
				continue
			default: // a hole before this chunk
				m := int(min(int64(len(p)-n), start-c.pos))
				clear(p[n : n+m])
				n += m
				c.pos += int64(m)
				continue
			}
		}
		// No more chunks: zeros to the end.
		m := len(p) - n
		clear(p[n:])
		n += m
		c.pos += int64(m)
	}
	if c.err != nil {
		return n, c.err
	}
	return n, nil
}

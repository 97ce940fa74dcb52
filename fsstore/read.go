package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"syscall"
	"time"

	"computerd/core"
)

// wsInfo is the immutable part of a workspace row.
type wsInfo struct {
	id      int64
	tenant  string
	name    string
	root    uint64
	baseWS  int64
	baseRev int64
	created int64
}

// layer is one level of a view: the rows of workspace ws as of revision rev.
type layer struct{ ws, rev int64 }

// view reads a workspace at one revision: its own rows first, then its fork
// source's rows at the fork revision, and so on down the chain.
type view struct {
	q      *queries
	ctx    context.Context
	layers []layer
	root   uint64
	cs     int64
	dirs   map[uint64]string // memoised directory paths
}

// inode is one version of an inode's metadata, and where it was found.
type inode struct {
	ino          uint64
	ws           int64 // layer the row belongs to
	birth, death int64
	mode         uint32 // unix mode, with type bits
	uid, gid     uint32
	nlink        uint32
	size         int64
	mtime, ctime int64
	target       string
	rdev         uint64 // device nodes only
	parent       uint64 // directories only
	name         string // directories only
}

func (in *inode) isDir() bool     { return in.mode&syscall.S_IFMT == syscall.S_IFDIR }
func (in *inode) isReg() bool     { return in.mode&syscall.S_IFMT == syscall.S_IFREG }
func (in *inode) isSymlink() bool { return in.mode&syscall.S_IFMT == syscall.S_IFLNK }

// kind is the type stored with a directory entry.
func (in *inode) kind() int { return int(in.mode&syscall.S_IFMT) >> 12 }

// isSpecial reports whether in is a FIFO, socket or device node.
func (in *inode) isSpecial() bool { return core.IsSpecial(typeMode(in.mode)) }

func kindType(kind int) fs.FileMode { return typeMode(uint32(kind) << 12) }

// unixTypes pairs the unix file types with package fs's type bits.
var unixTypes = []struct {
	unix uint32
	fs   fs.FileMode
}{
	{syscall.S_IFDIR, fs.ModeDir},
	{syscall.S_IFLNK, fs.ModeSymlink},
	{syscall.S_IFIFO, fs.ModeNamedPipe},
	{syscall.S_IFSOCK, fs.ModeSocket},
	{syscall.S_IFCHR, fs.ModeDevice | fs.ModeCharDevice},
	{syscall.S_IFBLK, fs.ModeDevice},
}

// typeMode converts the type bits of a unix mode to fs.FileMode type bits
// (0 for a regular file).
func typeMode(m uint32) fs.FileMode {
	for _, t := range unixTypes {
		if m&syscall.S_IFMT == t.unix {
			return t.fs
		}
	}
	return 0
}

// fileMode converts a unix mode to an fs.FileMode.
func fileMode(m uint32) fs.FileMode {
	fm := fs.FileMode(m&0o777) | typeMode(m)
	if m&syscall.S_ISUID != 0 {
		fm |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		fm |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// ModeOf converts unix mode bits (file type, permissions, setuid, setgid,
// sticky) to an fs.FileMode.
func ModeOf(m uint32) fs.FileMode { return fileMode(m) }

// UnixMode converts an fs.FileMode to unix mode bits: a directory, a
// symlink, a FIFO, a socket, a device, or else a regular file, with its
// permission and special bits.
func UnixMode(fm fs.FileMode) uint32 {
	typ := fm & fs.ModeType
	for _, t := range unixTypes {
		if typ == t.fs {
			return t.unix | unixPerm(fm)
		}
	}
	return syscall.S_IFREG | unixPerm(fm)
}

// unixPerm converts the permission bits of an fs.FileMode to unix bits.
func unixPerm(fm fs.FileMode) uint32 {
	m := uint32(fm.Perm())
	if fm&fs.ModeSetuid != 0 {
		m |= syscall.S_ISUID
	}
	if fm&fs.ModeSetgid != 0 {
		m |= syscall.S_ISGID
	}
	if fm&fs.ModeSticky != 0 {
		m |= syscall.S_ISVTX
	}
	return m
}

func (in *inode) stat(name, p string) core.Stat {
	return core.Stat{Path: p, Name: name, Ino: in.ino, Mode: fileMode(in.mode), UID: in.uid, GID: in.gid,
		Nlink: in.nlink, Size: in.size, Mtime: time.Unix(0, in.mtime), Ctime: time.Unix(0, in.ctime), Target: in.target, Rdev: in.rdev}
}

func (s *Store) workspaceInfo(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id int64) (*wsInfo, error) {
	s.wsmu.Lock()
	w := s.wsCache[id]
	s.wsmu.Unlock()
	if w != nil {
		return w, nil
	}
	w = &wsInfo{id: id}
	var baseWS, baseRev sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT tenant, name, root_ino, base_ws, base_rev, created_ns FROM workspaces WHERE id = ?`, id).
		Scan(&w.tenant, &w.name, &w.root, &baseWS, &baseRev, &w.created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, core.ErrWorkspaceNotFound
	} else if err != nil {
		return nil, fmt.Errorf("load workspace %d: %w", id, err)
	}
	w.baseWS, w.baseRev = baseWS.Int64, baseRev.Int64
	s.wsmu.Lock()
	s.wsCache[id] = w
	s.wsmu.Unlock()
	return w, nil
}

// newView builds the layer chain for workspace ws at revision rev.
func (s *Store) newView(ctx context.Context, q *queries, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, ws *wsInfo, rev int64) (*view, error) {
	v := &view{q: q, ctx: ctx, root: ws.root, cs: s.chunkSize, dirs: map[uint64]string{ws.root: ""}}
	v.layers = append(v.layers, layer{ws.id, rev})
	for w := ws; w.baseWS != 0; {
		v.layers = append(v.layers, layer{w.baseWS, w.baseRev})
		var err error
		if w, err = s.workspaceInfo(ctx, db, w.baseWS); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// lookup finds the inode named name in directory parent.
func (v *view) lookup(parent uint64, name string) (ino uint64, kind int, err error) {
	for _, l := range v.layers {
		var birth, death int64
		err := v.q.dentryLatest.QueryRowContext(v.ctx, l.ws, parent, name, l.rev).Scan(&ino, &kind, &birth, &death)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		} else if err != nil {
			return 0, 0, fmt.Errorf("lookup: %w", err)
		}
		if death <= l.rev || ino == 0 {
			return 0, 0, core.ErrNotFound
		}
		return ino, kind, nil
	}
	return 0, 0, core.ErrNotFound
}

// inode loads the version of ino visible in the view.
func (v *view) inode(ino uint64) (*inode, error) {
	for _, l := range v.layers {
		in := &inode{ino: ino, ws: l.ws}
		var target, name []byte
		err := v.q.inodeLatest.QueryRowContext(v.ctx, l.ws, ino, l.rev).Scan(&in.birth, &in.death, &in.mode, &in.uid, &in.gid,
			&in.nlink, &in.size, &in.mtime, &in.ctime, &target, &in.parent, &name, &in.rdev)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("inode %d: %w", ino, err)
		}
		if in.death <= l.rev || in.nlink == 0 { // nlink 0: dropped in a fork (see dropInode)
			return nil, core.ErrNotFound
		}
		in.target, in.name = string(target), string(name)
		return in, nil
	}
	return nil, core.ErrNotFound
}

// resolve walks a clean path from the root. Symlinks are never followed: a
// symlink in the middle of a path is core.ErrNotDir.
func (v *view) resolve(p string) (*inode, error) {
	ino := v.root
	parts := splitPath(p)
	for i, c := range parts {
		next, kind, err := v.lookup(ino, c)
		if err != nil {
			return nil, err
		}
		if i+1 < len(parts) && kindType(kind) != fs.ModeDir {
			return nil, core.ErrNotDir
		}
		ino = next
	}
	return v.inode(ino)
}

// resolveDir resolves a clean path that must name a directory.
func (v *view) resolveDir(p string) (*inode, error) {
	in, err := v.resolve(p)
	if err != nil {
		return nil, err
	}
	if !in.isDir() {
		return nil, core.ErrNotDir
	}
	return in, nil
}

// dirEntry is a directory entry as read from one layer (ino 0: tombstone).
type dirEntry struct {
	name string
	ino  uint64
	kind int
}

// list returns the live entries of directory dir, sorted by name.
func (v *view) list(dir uint64) ([]dirEntry, error) {
	var out []dirEntry
	var shadow map[string]bool
	for i, l := range v.layers {
		rows, err := v.q.dirList.QueryContext(v.ctx, l.ws, dir, l.rev)
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		for rows.Next() {
			var e dirEntry
			var name []byte
			if err := rows.Scan(&name, &e.ino, &e.kind); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list: %w", err)
			}
			e.name = string(name)
			if shadow[e.name] {
				continue
			}
			if i+1 < len(v.layers) {
				if shadow == nil {
					shadow = map[string]bool{}
				}
				shadow[e.name] = true
			}
			if e.ino != 0 {
				out = append(out, e)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
	}
	if len(v.layers) > 1 {
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	}
	return out, nil
}

// extent is the chunk at one index of a file (chunk 0: a hole).
type extent struct {
	idx   int64
	chunk int64
}

// extents returns the non-hole chunks of ino with index in [from, to).
func (v *view) extents(ino uint64, from, to int64) ([]extent, error) {
	var out []extent
	var shadow map[int64]bool
	for i, l := range v.layers {
		rows, err := v.q.extentsRange.QueryContext(v.ctx, l.ws, ino, from, to, l.rev)
		if err != nil {
			return nil, fmt.Errorf("extents: %w", err)
		}
		for rows.Next() {
			var e extent
			var chunk sql.NullInt64
			if err := rows.Scan(&e.idx, &chunk); err != nil {
				rows.Close()
				return nil, fmt.Errorf("extents: %w", err)
			}
			if shadow[e.idx] {
				continue
			}
			if i+1 < len(v.layers) {
				if shadow == nil {
					shadow = map[int64]bool{}
				}
				shadow[e.idx] = true
			}
			if e.chunk = chunk.Int64; e.chunk != 0 {
				out = append(out, e)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("extents: %w", err)
		}
	}
	if len(v.layers) > 1 {
		sort.Slice(out, func(i, j int) bool { return out[i].idx < out[j].idx })
	}
	return out, nil
}

// extentAt returns the chunk id at index idx of ino (0 for a hole).
func (v *view) extentAt(ino uint64, idx int64) (int64, error) {
	es, err := v.extents(ino, idx, idx+1)
	if err != nil || len(es) == 0 {
		return 0, err
	}
	return es[0].chunk, nil
}

func (v *view) chunkData(id int64) ([]byte, error) {
	var data []byte
	if err := v.q.chunkData.QueryRowContext(v.ctx, id).Scan(&data); err != nil {
		return nil, fmt.Errorf("chunk %d: %w", id, err)
	}
	return data, nil
}

// readAt fills p from offset off of a file of the given size, returning the
// count read (short only at end of file).
func (v *view) readAt(in *inode, p []byte, off int64) (int, error) {
	if off >= in.size {
		return 0, io.EOF
	}
	if rem := in.size - off; int64(len(p)) > rem {
		p = p[:rem]
	}
	clear(p)
	from, to := off/v.cs, (off+int64(len(p))+v.cs-1)/v.cs
	place := func(idx int64, data []byte) {
		start := idx * v.cs
		// copy the overlap of [start, start+len(data)) and [off, off+len(p))
		lo, hi := max(start, off), min(start+int64(len(data)), off+int64(len(p)))
		if lo < hi {
			copy(p[lo-off:hi-off], data[lo-start:hi-start])
		}
	}
	if len(v.layers) == 1 {
		l := v.layers[0]
		rows, err := v.q.extentsData.QueryContext(v.ctx, l.ws, in.ino, from, to, l.rev)
		if err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
		defer rows.Close()
		var data sql.RawBytes
		for rows.Next() {
			var idx int64
			if err := rows.Scan(&idx, &data); err != nil {
				return 0, fmt.Errorf("read: %w", err)
			}
			place(idx, data)
		}
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
	} else {
		es, err := v.extents(in.ino, from, to)
		if err != nil {
			return 0, err
		}
		for _, e := range es {
			data, err := v.chunkData(e.chunk)
			if err != nil {
				return 0, err
			}
			place(e.idx, data)
		}
	}
	return len(p), nil // 0 only when asked for nothing before the end: not EOF
}

// dirPath rebuilds the path of directory ino from parent links.
func (v *view) dirPath(ino uint64) (string, error) {
	if p, ok := v.dirs[ino]; ok {
		return p, nil
	}
	in, err := v.inode(ino)
	if err != nil {
		return "", fmt.Errorf("path of directory %d: %w", ino, err)
	}
	pp, err := v.dirPath(in.parent)
	if err != nil {
		return "", err
	}
	p := joinPath(pp, in.name)
	if len(v.dirs) >= maxDirPaths {
		// A view that met this many directories (a diff of a whole tree)
		// starts over rather than grow with the tree.
		clear(v.dirs)
		v.dirs[v.root] = ""
	}
	v.dirs[ino] = p
	return p, nil
}

// maxDirPaths bounds the directory paths a view memoises: a few MiB.
const maxDirPaths = 1 << 15

// pathsOf lists every path naming ino (several for hard links). It scans the
// layers' entries for ino; it is only needed for hard links.
func (v *view) pathsOf(ino uint64) ([]string, error) {
	var out []string
	seen := map[dirEntryKey]bool{}
	for _, l := range v.layers {
		rows, err := v.q.dentriesOfIno.QueryContext(v.ctx, l.ws, ino, l.rev)
		if err != nil {
			return nil, err
		}
		var keys []dirEntryKey
		for rows.Next() {
			var k dirEntryKey
			var name []byte
			if err := rows.Scan(&k.parent, &name); err != nil {
				rows.Close()
				return nil, err
			}
			k.name = string(name)
			keys = append(keys, k)
		}
		rows.Close()
		for _, k := range keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			if got, _, err := v.lookup(k.parent, k.name); err == nil && got == ino {
				dp, err := v.dirPath(k.parent)
				if err != nil {
					return nil, err
				}
				out = append(out, joinPath(dp, k.name))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

type dirEntryKey struct {
	parent uint64
	name   string
}

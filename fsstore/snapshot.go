package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync/atomic"

	"computerd/core"
)

// Snapshot reads one workspace at one revision. Revisions are immutable, so
// a snapshot needs no transaction and stays valid while writers commit; it
// fails with core.ErrUnknownRevision only if its revision is pruned meanwhile.
type Snapshot struct {
	s   *Store
	ws  *wsInfo
	Rev int64
	// Workspace is the workspace as it was when the snapshot was taken.
	Workspace core.Workspace
	gen       atomic.Int64 // a Store.pruned value (even: no prune running) at which the revision existed
}

// Snapshot opens workspace ws at revision rev (Head for the newest).
func (s *Store) Snapshot(ctx context.Context, ws int64, rev int64) (*Snapshot, error) {
	if s.shut.Load() {
		return nil, core.ErrClosed
	}
	gen := s.pruned.Load()
	w, err := s.WorkspaceByID(ctx, ws)
	if err != nil {
		return nil, err
	}
	if rev == core.Head {
		rev = w.Head
	} else if err := s.checkRev(ctx, s.rdb, w, rev); err != nil {
		return nil, err
	}
	info, err := s.workspaceInfo(ctx, s.rdb, ws)
	if err != nil {
		return nil, err
	}
	sn := &Snapshot{s: s, ws: info, Rev: rev, Workspace: w}
	if gen%2 != 0 {
		gen = -1 // a prune was running: settle must look
	}
	sn.gen.Store(gen)
	return sn, nil
}

// settle returns err, unless the snapshot's revision has been pruned (or its
// workspace deleted) since the snapshot was taken: what was just read may
// then lack rows, and settle returns core.ErrUnknownRevision (core.ErrWorkspaceNotFound)
// instead. It costs a query only after a prune.
func (sn *Snapshot) settle(ctx context.Context, err error) error {
	if err != nil && sn.s.shut.Load() {
		return fmt.Errorf("%w (%v)", core.ErrClosed, err)
	}
	g := sn.s.pruned.Load()
	if g == sn.gen.Load() {
		return err
	}
	var live, kept int
	if qerr := sn.s.rdb.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM workspaces WHERE id = ?1 AND deleted_ns IS NULL),
		(SELECT count(*) FROM revisions WHERE ws = ?1 AND rev = ?2)`, sn.ws.id, sn.Rev).Scan(&live, &kept); qerr != nil {
		return wrapDB("check revision", qerr)
	}
	switch {
	case live == 0:
		return fmt.Errorf("workspace %s: %w", sn.ws.name, core.ErrWorkspaceNotFound)
	case kept == 0:
		return fmt.Errorf("revision %d of %s: %w", sn.Rev, sn.ws.name, core.ErrUnknownRevision)
	}
	if g%2 == 0 {
		// No prune was running when g was read, so every prune up to g had
		// committed before the query above: the revision survived them.
		sn.gen.Store(g)
	}
	return err
}

func (sn *Snapshot) view(ctx context.Context) (*view, error) {
	return sn.s.newView(ctx, sn.s.rq, sn.s.rdb, sn.ws, sn.Rev)
}

func (sn *Snapshot) resolve(ctx context.Context, op, p string) (*view, *inode, string, error) {
	clean, err := core.CleanPath(p)
	if err != nil {
		return nil, nil, "", pathErr(op, p, core.ErrInvalidPath)
	}
	v, err := sn.view(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	in, err := v.resolve(clean)
	if err != nil {
		return nil, nil, "", pathErr(op, p, err)
	}
	return v, in, clean, nil
}

// Stat describes the entry at p without following symlinks.
func (sn *Snapshot) Stat(ctx context.Context, p string) (core.Stat, error) {
	_, in, clean, err := sn.resolve(ctx, "stat", p)
	if err != nil {
		return core.Stat{}, sn.settle(ctx, err)
	}
	_, name := parentName(clean)
	return in.stat(name, clean), sn.settle(ctx, nil)
}

// StatIno describes inode ino.
func (sn *Snapshot) StatIno(ctx context.Context, ino uint64) (core.Stat, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return core.Stat{}, err
	}
	in, err := v.inode(ino)
	if err != nil {
		return core.Stat{}, sn.settle(ctx, fmt.Errorf("inode %d: %w", ino, err))
	}
	return in.stat(in.name, ""), sn.settle(ctx, nil)
}

// Lookup describes the entry name in directory inode parent.
func (sn *Snapshot) Lookup(ctx context.Context, parent uint64, name string) (core.Stat, error) {
	n, err := sn.LookupNode(ctx, parent, name)
	return n.Stat, err
}

// RootIno is the inode number of the workspace root.
func (sn *Snapshot) RootIno() uint64 { return sn.ws.root }

// ReadDir lists the directory at p, sorted by name.
func (sn *Snapshot) ReadDir(ctx context.Context, p string) ([]core.DirEntry, error) {
	v, in, _, err := sn.resolve(ctx, "readdir", p)
	if err != nil {
		return nil, sn.settle(ctx, err)
	}
	if !in.isDir() {
		return nil, sn.settle(ctx, pathErr("readdir", p, core.ErrNotDir))
	}
	es, err := listEntries(v, in.ino)
	return es, sn.settle(ctx, err)
}

// ReadDirIno lists directory inode ino, sorted by name.
func (sn *Snapshot) ReadDirIno(ctx context.Context, ino uint64) ([]core.DirEntry, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return nil, err
	}
	es, err := listEntries(v, ino)
	return es, sn.settle(ctx, err)
}

func listEntries(v *view, ino uint64) ([]core.DirEntry, error) {
	es, err := v.list(ino)
	if err != nil {
		return nil, err
	}
	out := make([]core.DirEntry, len(es))
	for i, e := range es {
		out[i] = core.DirEntry{Name: e.name, Ino: e.ino, Type: kindType(e.kind)}
	}
	return out, nil
}

// Readlink returns the target of the symlink at p.
func (sn *Snapshot) Readlink(ctx context.Context, p string) (string, error) {
	_, in, _, err := sn.resolve(ctx, "readlink", p)
	if err != nil {
		return "", sn.settle(ctx, err)
	}
	if !in.isSymlink() {
		return "", sn.settle(ctx, pathErr("readlink", p, core.ErrInvalidArgument))
	}
	return in.target, sn.settle(ctx, nil)
}

// File reads one regular file of a snapshot; it implements io.Reader,
// io.ReaderAt and io.Seeker, and holds no resources.
type File struct {
	v   *view
	in  *inode
	off int64
	sn  *Snapshot // to settle reads, if set
}

// Open opens the regular file at p.
func (sn *Snapshot) Open(ctx context.Context, p string) (*File, error) {
	v, in, _, err := sn.resolve(ctx, "open", p)
	if err != nil {
		return nil, sn.settle(ctx, err)
	}
	if in.isDir() {
		return nil, sn.settle(ctx, pathErr("open", p, core.ErrIsDir))
	}
	if !in.isReg() {
		return nil, sn.settle(ctx, pathErr("open", p, core.ErrInvalidArgument))
	}
	return &File{v: v, in: in, sn: sn}, sn.settle(ctx, nil)
}

// OpenIno opens regular file inode ino.
func (sn *Snapshot) OpenIno(ctx context.Context, ino uint64) (*File, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return nil, err
	}
	in, err := v.inode(ino)
	if err != nil {
		return nil, sn.settle(ctx, err)
	}
	if !in.isReg() {
		return nil, sn.settle(ctx, core.ErrInvalidArgument)
	}
	return &File{v: v, in: in, sn: sn}, sn.settle(ctx, nil)
}

// Size is the file's length.
func (f *File) Size() int64 { return f.in.size }

// ReadAt implements io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, core.ErrInvalidArgument
	}
	n, err := f.v.readAt(f.in, p, off)
	if serr := f.settle(); serr != nil {
		return 0, serr
	}
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// settle fails if the file's revision was pruned while it was read.
func (f *File) settle() error {
	if f.sn == nil {
		return nil
	}
	return f.sn.settle(f.v.ctx, nil)
}

// Read implements io.Reader.
func (f *File) Read(p []byte) (int, error) {
	n, err := f.v.readAt(f.in, p, f.off)
	if serr := f.settle(); serr != nil {
		return 0, serr
	}
	f.off += int64(n)
	return n, err
}

// Seek implements io.Seeker.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += f.in.size
	}
	if offset < 0 {
		return f.off, core.ErrInvalidArgument
	}
	f.off = offset
	return offset, nil
}

// WriteTo implements io.WriterTo, copying a chunk at a time.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, min(max(f.in.size-f.off, 1), f.v.cs*4))
	var total int64
	for {
		n, err := f.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		} else if err != nil {
			return total, err
		}
	}
}

// ReadFile returns the whole contents of the regular file at p.
func (sn *Snapshot) ReadFile(ctx context.Context, p string) ([]byte, error) {
	f, err := sn.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, f.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf, nil
}

// WalkFunc is called for each entry Walk visits, parents before children.
type WalkFunc func(p string, st core.Stat) error

// SkipDir, returned by a WalkFunc for a directory, skips its contents.
var SkipDir = fs.SkipDir

// Walk visits p and everything beneath it in lexical order.
func (sn *Snapshot) Walk(ctx context.Context, p string, fn WalkFunc) error {
	v, in, clean, err := sn.resolve(ctx, "walk", p)
	if err != nil {
		return sn.settle(ctx, err)
	}
	_, name := parentName(clean)
	return sn.settle(ctx, walk(ctx, v, clean, name, in, fn))
}

func walk(ctx context.Context, v *view, p, name string, in *inode, fn WalkFunc) error {
	if err := fn(p, in.stat(name, p)); err != nil {
		if errors.Is(err, SkipDir) && in.isDir() {
			return nil
		}
		return err
	}
	if !in.isDir() {
		return nil
	}
	es, ins, err := v.children(in.ino)
	if err != nil {
		return err
	}
	for i, e := range es {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := walk(ctx, v, joinPath(p, e.name), e.name, ins[i], fn); err != nil {
			return err
		}
	}
	return nil
}

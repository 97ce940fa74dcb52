package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// Snapshot reads one workspace at one revision. Revisions are immutable, so
// a snapshot needs no transaction and stays valid while writers commit; it
// fails with ErrUnknownRevision only if its revision is pruned meanwhile.
type Snapshot struct {
	s   *Store
	ws  *wsInfo
	Rev int64
	// Workspace is the workspace as it was when the snapshot was taken.
	Workspace Workspace
}

// Snapshot opens workspace ws at revision rev (Head for the newest).
func (s *Store) Snapshot(ctx context.Context, ws int64, rev int64) (*Snapshot, error) {
	w, err := s.WorkspaceByID(ctx, ws)
	if err != nil {
		return nil, err
	}
	if rev == Head {
		rev = w.Head
	} else if err := s.checkRev(ctx, s.rdb, w, rev); err != nil {
		return nil, err
	}
	info, err := s.workspaceInfo(ctx, s.rdb, ws)
	if err != nil {
		return nil, err
	}
	return &Snapshot{s: s, ws: info, Rev: rev, Workspace: w}, nil
}

func (sn *Snapshot) view(ctx context.Context) (*view, error) {
	return sn.s.newView(ctx, sn.s.rq, sn.s.rdb, sn.ws, sn.Rev)
}

func (sn *Snapshot) resolve(ctx context.Context, op, p string) (*view, *inode, string, error) {
	clean, err := CleanPath(p)
	if err != nil {
		return nil, nil, "", pathErr(op, p, ErrInvalidPath)
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
func (sn *Snapshot) Stat(ctx context.Context, p string) (Stat, error) {
	_, in, clean, err := sn.resolve(ctx, "stat", p)
	if err != nil {
		return Stat{}, err
	}
	_, name := parentName(clean)
	return in.stat(name, clean), nil
}

// StatIno describes inode ino.
func (sn *Snapshot) StatIno(ctx context.Context, ino uint64) (Stat, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return Stat{}, err
	}
	in, err := v.inode(ino)
	if err != nil {
		return Stat{}, fmt.Errorf("inode %d: %w", ino, err)
	}
	return in.stat(in.name, ""), nil
}

// Lookup describes the entry name in directory inode parent.
func (sn *Snapshot) Lookup(ctx context.Context, parent uint64, name string) (Stat, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return Stat{}, err
	}
	ino, _, err := v.lookup(parent, name)
	if err != nil {
		return Stat{}, pathErr("lookup", name, err)
	}
	in, err := v.inode(ino)
	if err != nil {
		return Stat{}, pathErr("lookup", name, err)
	}
	return in.stat(name, ""), nil
}

// RootIno is the inode number of the workspace root.
func (sn *Snapshot) RootIno() uint64 { return sn.ws.root }

// ReadDir lists the directory at p, sorted by name.
func (sn *Snapshot) ReadDir(ctx context.Context, p string) ([]DirEntry, error) {
	v, in, _, err := sn.resolve(ctx, "readdir", p)
	if err != nil {
		return nil, err
	}
	if !in.isDir() {
		return nil, pathErr("readdir", p, ErrNotDir)
	}
	return listEntries(v, in.ino)
}

// ReadDirIno lists directory inode ino, sorted by name.
func (sn *Snapshot) ReadDirIno(ctx context.Context, ino uint64) ([]DirEntry, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return nil, err
	}
	return listEntries(v, ino)
}

func listEntries(v *view, ino uint64) ([]DirEntry, error) {
	es, err := v.list(ino)
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, len(es))
	for i, e := range es {
		out[i] = DirEntry{Name: e.name, Ino: e.ino, Type: kindType(e.kind)}
	}
	return out, nil
}

// Readlink returns the target of the symlink at p.
func (sn *Snapshot) Readlink(ctx context.Context, p string) (string, error) {
	_, in, _, err := sn.resolve(ctx, "readlink", p)
	if err != nil {
		return "", err
	}
	if !in.isSymlink() {
		return "", pathErr("readlink", p, ErrInvalidArgument)
	}
	return in.target, nil
}

// File reads one regular file of a snapshot; it implements io.Reader,
// io.ReaderAt and io.Seeker, and holds no resources.
type File struct {
	v   *view
	in  *inode
	off int64
}

// Open opens the regular file at p.
func (sn *Snapshot) Open(ctx context.Context, p string) (*File, error) {
	v, in, _, err := sn.resolve(ctx, "open", p)
	if err != nil {
		return nil, err
	}
	if in.isDir() {
		return nil, pathErr("open", p, ErrIsDir)
	}
	if !in.isReg() {
		return nil, pathErr("open", p, ErrInvalidArgument)
	}
	return &File{v: v, in: in}, nil
}

// OpenIno opens regular file inode ino.
func (sn *Snapshot) OpenIno(ctx context.Context, ino uint64) (*File, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return nil, err
	}
	in, err := v.inode(ino)
	if err != nil {
		return nil, err
	}
	if !in.isReg() {
		return nil, ErrInvalidArgument
	}
	return &File{v: v, in: in}, nil
}

// Size is the file's length.
func (f *File) Size() int64 { return f.in.size }

// ReadAt implements io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, ErrInvalidArgument
	}
	n, err := f.v.readAt(f.in, p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// Read implements io.Reader.
func (f *File) Read(p []byte) (int, error) {
	n, err := f.v.readAt(f.in, p, f.off)
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
		return f.off, ErrInvalidArgument
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
type WalkFunc func(p string, st Stat) error

// SkipDir, returned by a WalkFunc for a directory, skips its contents.
var SkipDir = fs.SkipDir

// Walk visits p and everything beneath it in lexical order.
func (sn *Snapshot) Walk(ctx context.Context, p string, fn WalkFunc) error {
	v, in, clean, err := sn.resolve(ctx, "walk", p)
	if err != nil {
		return err
	}
	_, name := parentName(clean)
	return walk(ctx, v, clean, name, in, fn)
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
	es, err := v.list(in.ino)
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := ctx.Err(); err != nil {
			return err
		}
		child, err := v.inode(e.ino)
		if err != nil {
			return fmt.Errorf("walk %q: %w", joinPath(p, e.name), err)
		}
		if err := walk(ctx, v, joinPath(p, e.name), e.name, child, fn); err != nil {
			return err
		}
	}
	return nil
}

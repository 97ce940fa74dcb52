package fsstore

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"

	"computerd/core"
)

// Mutations addressed by inode. A FUSE mount knows the kernel's inode
// numbers, not paths, and must hand the kernel an inode number for a new
// file before that file is committed; NodeOp and CommitNodes let it commit
// exactly what the kernel was told, with the numbers it was told.

// NodeOp is one mutation addressed by inode numbers instead of paths.
type NodeOp struct {
	Kind core.OpKind
	// Dir and Name name the entry that mkdir, create, symlink and link make,
	// that delete removes, and that rename moves to.
	Dir  uint64
	Name string
	// FromDir and FromName name a rename's source entry.
	FromDir  uint64
	FromName string
	// Ino is the number the inode made by mkdir, create or symlink gets
	// (reserved with ReserveInos; 0 lets the store choose); the inode that
	// link links; and the inode that write, truncate, chmod, chown and
	// utimes change.
	Ino    uint64
	Mode   fs.FileMode
	UID    uint32
	GID    uint32
	Mtime  int64 // Unix nanoseconds (utimes; create and symlink if non-zero)
	Size   int64 // truncate
	Target string
	// Content is chunk-aligned content for write (slots replaced whole).
	Content *core.Content
	// Holes lists chunk indexes that write turns into holes (zeros).
	Holes     []int64
	NoReplace bool
	Exchange  bool
}

// ReserveInos sets aside n inode numbers that the store will never hand out
// itself, for NodeOps that create inodes with numbers chosen in advance. It
// returns the first; the numbers are [first, first+n).
func (s *Store) ReserveInos(ctx context.Context, n int) (uint64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("reserve %d inodes: %w", n, core.ErrInvalidArgument)
	}
	var end uint64
	err := s.write(ctx, func() error {
		return wrapDB("reserve inodes", s.wq.nextIno.QueryRowContext(ctx, n).Scan(&end))
	})
	if err != nil {
		return 0, err
	}
	return end - uint64(n) + 1, nil
}

// CommitNodes applies ops in order, as Commit does for a Batch, and commits
// them as one new revision of ws. Entries are named by directory inode and
// name, resolved when each op runs, so earlier renames are followed. If any
// op fails the store is unchanged. With info.Base set and the head moved
// past it, the commit fails with a *ConflictError if the paths the ops
// touched (as resolved) changed since Base.
func (s *Store) CommitNodes(ctx context.Context, ws int64, ops []NodeOp, info CommitInfo) (core.Revision, error) {
	if len(ops) == 0 {
		return core.Revision{}, fmt.Errorf("commit: no changes: %w", core.ErrInvalidArgument)
	}
	for _, op := range ops {
		if err := op.check(); err != nil {
			return core.Revision{}, err
		}
	}
	if s.Shared {
		return core.Revision{}, errShared
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return core.Revision{}, core.ErrClosed
	}
	var t *wtx
	err := s.inTx(ctx, func() error {
		var err error
		if t, err = s.begin(ctx, ws, info.Metered); err != nil {
			return err
		}
		touched := make([]core.Op, 0, len(ops))
		for _, op := range ops {
			o, err := t.applyNode(op)
			if err != nil {
				return err
			}
			if o.Path != "" || o.Kind == core.OpChmod || o.Kind == core.OpChown || o.Kind == core.OpUtimes {
				touched = append(touched, o)
			}
		}
		// The ops' own rows are born after the head, so the views the
		// check reads are those of the base and the head alone.
		if info.Base != 0 && info.Base != t.rev-1 {
			if err := s.checkConflict(ctx, t, info.Base, touched); err != nil {
				return err
			}
		}
		t.changes = len(ops)
		return t.finish(info)
	})
	if err != nil {
		return core.Revision{}, err
	}
	return t.revision(info), nil
}

func (op NodeOp) check() error {
	bad := func(what string) error {
		return pathErr(string(op.Kind), op.Name, fmt.Errorf("%s: %w", what, core.ErrInvalidArgument))
	}
	switch op.Kind {
	case core.OpMkdir, core.OpCreate, core.OpSymlink, core.OpLink, core.OpDelete, core.OpRename:
		if !validName(op.Name) || op.Name == "." || op.Name == ".." {
			return pathErr(string(op.Kind), op.Name, core.ErrInvalidPath)
		}
	case core.OpWrite, core.OpTruncate, core.OpChmod, core.OpChown, core.OpUtimes:
	default:
		return bad("unknown op")
	}
	switch op.Kind {
	case core.OpRename:
		if !validName(op.FromName) || op.FromName == "." || op.FromName == ".." {
			return pathErr("rename", op.FromName, core.ErrInvalidPath)
		}
	case core.OpSymlink:
		if op.Target == "" || len(op.Target) > core.MaxPathLen || containsNUL(op.Target) {
			return pathErr("symlink", op.Name, core.ErrInvalidPath)
		}
	case core.OpTruncate:
		if op.Size < 0 || op.Size > core.MaxFileSize {
			return bad("size")
		}
	case core.OpWrite:
		if op.Content == nil || op.Content.Size < 0 || op.Content.Size > core.MaxFileSize {
			return bad("content")
		}
		for _, idx := range op.Holes {
			if idx < 0 || idx > core.MaxFileSize {
				return bad("hole")
			}
		}
	}
	return nil
}

// applyNode runs one NodeOp and returns it as the path-addressed Op it
// amounted to (Path empty when the inode has no known name).
func (t *wtx) applyNode(op NodeOp) (core.Op, error) {
	o := core.Op{Kind: op.Kind, Mode: op.Mode, UID: op.UID, GID: op.GID, Mtime: op.Mtime, Size: op.Size,
		Target: op.Target, NoReplace: op.NoReplace, Exchange: op.Exchange}
	fail := func(err error) (core.Op, error) {
		p := o.Path
		if p == "" {
			p = op.Name
		}
		return o, pathErr(string(op.Kind), p, err)
	}
	var err error
	switch op.Kind {
	case core.OpMkdir, core.OpCreate, core.OpSymlink, core.OpDelete, core.OpRename, core.OpLink:
		if o.Path, err = t.entryPath(op.Dir, op.Name); err != nil {
			return fail(err)
		}
	}
	switch op.Kind {
	case core.OpMkdir, core.OpCreate, core.OpSymlink:
		if op.Ino == 0 {
			return o, t.apply(o)
		}
		// Every inode a batch makes comes from newIno: point it at the
		// reserved number for this one op.
		next, end := t.inoNext, t.inoEnd
		t.inoNext, t.inoEnd = op.Ino, op.Ino+1
		err = t.apply(o)
		used := t.inoNext == op.Ino+1
		t.inoNext, t.inoEnd = next, end
		if err != nil {
			return o, opError(o, err)
		}
		if !used {
			return fail(fmt.Errorf("inode %d not created: %w", op.Ino, core.ErrExists))
		}
		return o, nil
	case core.OpDelete, core.OpRename:
		if op.Kind == core.OpRename {
			if o.From, err = t.entryPath(op.FromDir, op.FromName); err != nil {
				return fail(err)
			}
		}
		if err := t.apply(o); err != nil {
			return o, opError(o, err)
		}
		return o, nil
	case core.OpLink:
		src, err := t.inode(op.Ino)
		if err != nil {
			return fail(err)
		}
		if src.isDir() {
			return fail(core.ErrIsDir)
		}
		o.From, _ = t.inodePath(src)
		dir, err := t.inode(op.Dir)
		if err != nil {
			return fail(err)
		}
		if err := t.free(dir, op.Name); err != nil {
			return fail(err)
		}
		src.nlink++
		if err := t.add(dir, op.Name, src); err != nil {
			return fail(err)
		}
		return o, nil
	}
	in, err := t.inode(op.Ino)
	if err != nil {
		return fail(err)
	}
	o.Path, _ = t.inodePath(in)
	switch op.Kind {
	case core.OpWrite, core.OpTruncate:
		if in.isDir() {
			return fail(core.ErrIsDir)
		}
		if !in.isReg() {
			return fail(core.ErrInvalidArgument)
		}
		if op.Kind == core.OpTruncate {
			err = t.truncate(in, op.Size)
		} else {
			err = t.writeContent(in, op.Content)
			for _, idx := range op.Holes {
				if err == nil {
					err = t.setExtent(in.ino, idx, 0)
				}
			}
			if err == nil && op.Content.Size > in.size {
				in.size = op.Content.Size
			}
		}
		if err != nil {
			return fail(err)
		}
		in.mtime = t.now
	case core.OpChmod:
		in.mode = in.mode&syscall.S_IFMT | unixPerm(op.Mode)
	case core.OpChown:
		in.uid, in.gid = op.UID, op.GID
	case core.OpUtimes:
		in.mtime = op.Mtime
		delete(t.dirMtime, in.ino) // an explicit time wins over earlier entry changes
	}
	if err := t.putInode(in); err != nil {
		return fail(err)
	}
	return o, nil
}

// entryPath is the path of name in directory dir, as the tree stands in
// the transaction.
func (t *wtx) entryPath(dir uint64, name string) (string, error) {
	dp, err := t.dirPathOf(dir)
	if err != nil {
		return "", err
	}
	return joinPath(dp, name), nil
}

// dirPathOf rebuilds a directory's path from the parent links of the
// inodes as they stand in the transaction.
func (t *wtx) dirPathOf(ino uint64) (string, error) {
	var names []string
	for depth := 0; ino != t.v.root; depth++ {
		if depth > core.MaxPathLen {
			return "", fmt.Errorf("directory %d: parent loop: %w", ino, core.ErrInvalidArgument)
		}
		in, err := t.inode(ino)
		if err != nil {
			return "", fmt.Errorf("directory %d: %w", ino, err)
		}
		if !in.isDir() {
			return "", core.ErrNotDir
		}
		if in.parent == 0 {
			return "", fmt.Errorf("directory %d: %w", ino, core.ErrNotFound)
		}
		names = append(names, in.name)
		ino = in.parent
	}
	// One join, not one per level: that copied the path over and over, a
	// cost in the square of the depth for every op.
	slices.Reverse(names)
	return strings.Join(names, "/"), nil
}

// inodePath returns one path of in: a directory's, or the name a file
// remembers (false if it remembers none).
func (t *wtx) inodePath(in *inode) (string, bool) {
	if in.isDir() {
		p, err := t.dirPathOf(in.ino)
		return p, err == nil
	}
	if in.parent == 0 {
		return "", false
	}
	p, err := t.entryPath(in.parent, in.name)
	return p, err == nil
}

// ReadDirStat lists directory inode ino, sorted by name, with each entry's
// metadata (Path is empty), in one query where the tree has one layer.
func (sn *Snapshot) ReadDirStat(ctx context.Context, ino uint64) ([]core.Stat, error) {
	nodes, err := sn.ReadDirNodes(ctx, ino)
	if err != nil {
		return nil, err
	}
	out := make([]core.Stat, len(nodes))
	for i, n := range nodes {
		out[i] = n.Stat
	}
	return out, nil
}

// Version names one version of an inode: the layer (workspace) and the
// revision whose commit wrote its row. Every commit that changes an
// inode's metadata or contents writes a new row, so two snapshots (of one
// workspace or of its forks) that find the same Version of an inode see
// the same metadata and the same bytes.
type Version struct{ Layer, Birth int64 }

// Node is an inode's metadata and the Version it was read from.
type Node struct {
	core.Stat
	Version Version
}

// ReadDirNodes is ReadDirStat with each entry's Version.
func (sn *Snapshot) ReadDirNodes(ctx context.Context, ino uint64) ([]Node, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return nil, err
	}
	es, ins, err := v.children(ino)
	if err != nil {
		return nil, sn.settle(ctx, fmt.Errorf("inode %d: %w", ino, err))
	}
	out := make([]Node, len(es))
	for i, e := range es {
		out[i] = ins[i].node(e.name)
	}
	return out, sn.settle(ctx, nil)
}

// StatNode describes inode ino with its Version.
func (sn *Snapshot) StatNode(ctx context.Context, ino uint64) (Node, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return Node{}, err
	}
	in, err := v.inode(ino)
	if err != nil {
		return Node{}, sn.settle(ctx, fmt.Errorf("inode %d: %w", ino, err))
	}
	return in.node(in.name), sn.settle(ctx, nil)
}

// LookupNode describes the entry name in directory inode parent, with its Version.
func (sn *Snapshot) LookupNode(ctx context.Context, parent uint64, name string) (Node, error) {
	v, err := sn.view(ctx)
	if err != nil {
		return Node{}, err
	}
	ino, _, err := v.lookup(parent, name)
	if err != nil {
		return Node{}, sn.settle(ctx, pathErr("lookup", name, err))
	}
	in, err := v.inode(ino)
	if err != nil {
		return Node{}, sn.settle(ctx, pathErr("lookup", name, err))
	}
	return in.node(name), sn.settle(ctx, nil)
}

func (in *inode) node(name string) Node {
	return Node{Stat: in.stat(name, ""), Version: Version{Layer: in.ws, Birth: in.birth}}
}

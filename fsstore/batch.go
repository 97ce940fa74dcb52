package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"time"

	"computerd/core"
)

// Commit applies the batch's ops in order and commits them atomically as
// one new revision. If any op fails the store is unchanged and the error,
// a *PathError, names the op and path.
func (s *Store) Commit(ctx context.Context, ws int64, b *core.Batch, info CommitInfo) (core.Revision, error) {
	rev, _, err := s.CommitOnce(ctx, ws, b, info)
	return rev, err
}

// CommitOnce is Commit that also says whether info.Key was already held
// by a revision, which it then returns having applied nothing: a caller
// racing its own retry learns which of them applied the batch.
func (s *Store) CommitOnce(ctx context.Context, ws int64, b *core.Batch, info CommitInfo) (rev core.Revision, replayed bool, err error) {
	ops, err := cleanOps(b.Ops)
	if err != nil {
		return core.Revision{}, false, err
	}
	return s.commit(ctx, ws, info, sliceOps(ops), func(t *wtx) error { return t.applyBatch(sliceOps(ops)) })
}

// ReplaceTreePacked commits, as one revision of ws, the tree that ops
// build from nothing: everything is deleted, then ops are applied in
// order as a batch (Commit). The ops are read one at a time, never
// unpacked whole; PackedOps.Add has checked them. A full sync pull
// commits its changeset this way.
func (s *Store) ReplaceTreePacked(ctx context.Context, ws int64, ops *PackedOps, info CommitInfo) (core.Revision, error) {
	all := replacedOps{ops}
	rev, _, err := s.commit(ctx, ws, info, all, func(t *wtx) error { return t.applyBatch(all) })
	return rev, err
}

// replacedOps is a delete of the whole tree followed by ops.
type replacedOps struct{ ops opList }

func (r replacedOps) Len() int { return r.ops.Len() + 1 }
func (r replacedOps) Op(i int) core.Op {
	if i == 0 {
		return core.Op{Kind: core.OpDeleteAll, Path: ""}
	}
	return r.ops.Op(i - 1)
}

// applyBatch applies ops in order, failing at the first that fails.
func (t *wtx) applyBatch(ops opList) error {
	for i := range ops.Len() {
		op := ops.Op(i)
		if err := t.apply(op); err != nil {
			return opError(op, err)
		}
	}
	return nil
}

// commit runs fn in a new revision of ws, with conflict checking against
// info.Base; replayed says info.Key's revision was found and returned.
func (s *Store) commit(ctx context.Context, ws int64, info CommitInfo, ops opList, fn func(*wtx) error) (core.Revision, bool, error) {
	if ops.Len() == 0 {
		return core.Revision{}, false, fmt.Errorf("commit: no changes: %w", core.ErrInvalidArgument)
	}
	if s.Shared {
		return core.Revision{}, false, errShared
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return core.Revision{}, false, core.ErrClosed
	}
	var t *wtx
	var replay *core.Revision
	err := s.inTx(ctx, func() error {
		var err error
		if replay, err = s.keyedRevision(ctx, ws, info.Key); err != nil || replay != nil {
			return err
		}
		if t, err = s.begin(ctx, ws, info); err != nil {
			return err
		}
		if info.Base != 0 && info.Base != t.rev-1 {
			if err := s.checkConflict(ctx, t, info.Base, ops); err != nil {
				return err
			}
		}
		if err := fn(t); err != nil {
			return err
		}
		if info.Bound != nil {
			if err := info.Bound.Make(t.holes); err != nil {
				return err
			}
		}
		t.changes = ops.Len()
		return t.finish(info)
	})
	if err != nil {
		return core.Revision{}, false, err
	}
	if replay != nil {
		return *replay, true, nil
	}
	rev := t.revision(info)
	if s.OnCommit != nil {
		s.OnCommit(ws, rev)
	}
	return rev, false, nil
}

// keyedRevision finds, inside a write transaction, the revision of ws a
// mutation with idempotency key made (nil if none, or if key is empty).
func (s *Store) keyedRevision(ctx context.Context, ws int64, key string) (*core.Revision, error) {
	if key == "" {
		return nil, nil
	}
	revs, err := s.revisionsOn(ctx, s.wconn, "revision by key", `WHERE ws = ? AND idem_key = ?`, ws, key)
	if err != nil || len(revs) == 0 {
		return nil, err
	}
	return &revs[0], nil
}

// revision ends the leases of a committed transaction's chunks and
// describes the revision it made.
func (t *wtx) revision(info CommitInfo) core.Revision {
	t.endLeases()
	if info.Source == "" {
		info.Source = core.SourceAPI
	}
	if info.Tenant == "" {
		info.Tenant = t.ws.tenant
	}
	return core.Revision{Rev: t.rev, Time: time.Unix(0, t.now), Source: info.Source, Tenant: info.Tenant,
		ExecID: info.ExecID, Message: info.Message, Changes: t.changes}
}

func opError(op core.Op, err error) error {
	var pe *core.PathError
	if errors.As(err, &pe) {
		return err
	}
	return pathErr(string(op.Kind), op.Path, err)
}

// cleanOps validates every op's paths and kind before anything is written.
func cleanOps(in []core.Op) ([]core.Op, error) {
	out := make([]core.Op, len(in))
	for i, op := range in {
		var err error
		if out[i], err = cleanOp(op); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkSpecial validates the type and device number of a mknod: a FIFO,
// socket, block or character device, and for devices a number Linux can
// hold (a 12-bit major, a 20-bit minor; others get 0).
func checkSpecial(m fs.FileMode, rdev uint64) error {
	switch m & fs.ModeType {
	case fs.ModeNamedPipe, fs.ModeSocket:
		if rdev != 0 {
			return fmt.Errorf("device number %#x for a FIFO or socket: %w", rdev, core.ErrInvalidArgument)
		}
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		major, minor := core.DevMajor(rdev), core.DevMinor(rdev)
		if major >= 1<<12 || minor >= 1<<20 || core.MakeDev(major, minor) != rdev {
			return fmt.Errorf("device number %#x: %w", rdev, core.ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("mknod of mode %v: not a FIFO, socket or device: %w", m, core.ErrInvalidArgument)
	}
	return nil
}

// cleanOp validates an op's paths, kind and sizes, and returns it with
// its paths cleaned.
func cleanOp(op core.Op) (core.Op, error) {
	in := op
	var err error
	if op.Path, err = core.CleanPath(op.Path); err != nil {
		return op, pathErr(string(op.Kind), in.Path, core.ErrInvalidPath)
	}
	switch op.Kind {
	case core.OpRename, core.OpLink:
		if op.From, err = core.CleanPath(op.From); err != nil {
			return op, pathErr(string(op.Kind), in.From, core.ErrInvalidPath)
		}
	case core.OpSymlink:
		if op.Target == "" || len(op.Target) > core.MaxPathLen || containsNUL(op.Target) {
			return op, pathErr("symlink", op.Path, core.ErrInvalidPath)
		}
	case core.OpMknod:
		if err := checkSpecial(op.Mode, op.Rdev); err != nil {
			return op, pathErr("mknod", op.Path, err)
		}
	case core.OpMkdir, core.OpCreate, core.OpWrite, core.OpTruncate, core.OpDelete, core.OpDeleteAll, core.OpChmod, core.OpChown, core.OpUtimes:
	default:
		return op, pathErr(string(op.Kind), op.Path, fmt.Errorf("unknown op %q: %w", op.Kind, core.ErrInvalidArgument))
	}
	if (op.Kind == core.OpWrite && (op.Offset < 0 || op.Offset > core.MaxFileSize-int64(len(op.Data)))) ||
		(op.Kind == core.OpTruncate && (op.Size < 0 || op.Size > core.MaxFileSize)) ||
		(op.Content != nil && (op.Content.Size < 0 || op.Content.Size > core.MaxFileSize)) {
		return op, pathErr(string(op.Kind), op.Path, core.ErrInvalidArgument)
	}
	if op.Data != nil && op.Content != nil {
		return op, pathErr(string(op.Kind), op.Path, fmt.Errorf("both data and content: %w", core.ErrInvalidArgument))
	}
	return op, nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func defaultPerm(m fs.FileMode, def uint32) uint32 {
	if m == 0 {
		return def
	}
	return unixPerm(m)
}

// apply runs one op against the tree as it stands in the transaction.
func (t *wtx) apply(op core.Op) error {
	switch op.Kind {
	case core.OpMkdir:
		if op.Parents {
			return t.mkdirAll(op.Path, defaultPerm(op.Mode, 0o755))
		}
		return t.mkdir(op.Path, defaultPerm(op.Mode, 0o755))
	case core.OpCreate:
		return t.create(op)
	case core.OpSymlink:
		return t.symlink(op.Path, op.Target, op.Mtime)
	case core.OpMknod:
		return t.mknod(op)
	case core.OpLink:
		return t.link(op.From, op.Path)
	case core.OpRename:
		return t.rename(op)
	case core.OpDelete:
		return t.remove(op.Path)
	case core.OpDeleteAll:
		return t.removeAll(op.Path)
	}
	// The rest change an existing inode.
	in, err := t.resolve(op.Path)
	if err != nil {
		return err
	}
	switch op.Kind {
	case core.OpWrite, core.OpTruncate:
		if in.isDir() {
			return core.ErrIsDir
		}
		if !in.isReg() {
			return core.ErrInvalidArgument
		}
		if op.Kind == core.OpTruncate {
			err = t.truncate(in, op.Size)
		} else {
			err = t.fill(in, op)
		}
		if err != nil {
			return err
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
	return t.putInode(in)
}

// fill writes an op's inline data or stored content into a file.
func (t *wtx) fill(in *inode, op core.Op) error {
	if op.Content != nil {
		return t.writeContent(in, op.Content)
	}
	return t.writeData(in, op.Offset, op.Data)
}

// parentOf resolves the directory holding a clean, non-root path.
func (t *wtx) parentOf(p string) (*inode, string, error) {
	if p == "" {
		return nil, "", core.ErrInvalidArgument
	}
	dir, name := parentName(p)
	parent, err := t.resolveDir(dir)
	return parent, name, err
}

// free checks that name is not taken in parent.
func (t *wtx) free(parent *inode, name string) error {
	_, _, err := t.lookup(parent.ino, name)
	if err == nil {
		return core.ErrExists
	}
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
	return err
}

// add links a new inode into parent under name.
func (t *wtx) add(parent *inode, name string, in *inode) error {
	if in.isDir() || in.parent == 0 {
		in.parent, in.name = parent.ino, name
	}
	if in.isDir() {
		t.touchDir(parent.ino, 1)
	} else {
		t.touchDir(parent.ino, 0)
	}
	if err := t.putInode(in); err != nil {
		return err
	}
	return t.setEntry(parent.ino, name, in.ino, in.kind())
}

func (t *wtx) mkdir(p string, perm uint32) error {
	if p == "" {
		return core.ErrExists
	}
	parent, name, err := t.parentOf(p)
	if err != nil {
		return err
	}
	if err := t.free(parent, name); err != nil {
		return err
	}
	in, err := t.newInode(syscall.S_IFDIR, perm)
	if err != nil {
		return err
	}
	return t.add(parent, name, in)
}

// mkdirAll makes p and its missing parents; a directory already there is
// no error (mkdir -p), anything else is.
func (t *wtx) mkdirAll(p string, perm uint32) error {
	parts := strings.Split(p, "/")
	for i := range parts {
		q := strings.Join(parts[:i+1], "/")
		_, err := t.resolveDir(q)
		if errors.Is(err, core.ErrNotFound) {
			err = t.mkdir(q, perm)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *wtx) create(op core.Op) error {
	parent, name, err := t.parentOf(op.Path)
	if err != nil {
		return err
	}
	ino, _, err := t.lookup(parent.ino, name)
	var in *inode
	existing := false
	switch {
	case errors.Is(err, core.ErrNotFound):
		if in, err = t.newInode(syscall.S_IFREG, defaultPerm(op.Mode, 0o644)); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		if in, err = t.inode(ino); err != nil {
			return err
		}
		if in.isDir() {
			return core.ErrIsDir
		}
		if !in.isReg() {
			return core.ErrExists
		}
		if err := t.truncate(in, 0); err != nil {
			return err
		}
		if op.Mode != 0 {
			in.mode = syscall.S_IFREG | unixPerm(op.Mode)
		}
		in.mtime = t.now
		existing = true
	}
	if err := t.fill(in, op); err != nil {
		return err
	}
	if op.Content != nil {
		if op.Content.Size < in.size {
			return fmt.Errorf("content size %d below its chunks' end %d: %w", op.Content.Size, in.size, core.ErrInvalidArgument)
		}
		t.opened(in, op.Content.Size)
		in.size = op.Content.Size
	}
	if op.Mtime != 0 {
		in.mtime = op.Mtime
	}
	if existing {
		return t.putInode(in)
	}
	return t.add(parent, name, in)
}

func (t *wtx) symlink(p, target string, mtime int64) error {
	return t.addNew(p, syscall.S_IFLNK, 0o777, mtime, func(in *inode) { in.target, in.size = target, int64(len(target)) })
}

// mknod makes a special file; its mode is taken as given (0 is no
// permissions, not a default).
func (t *wtx) mknod(op core.Op) error {
	return t.addNew(op.Path, UnixMode(op.Mode)&syscall.S_IFMT, unixPerm(op.Mode), op.Mtime, func(in *inode) { in.rdev = op.Rdev })
}

// addNew links a new inode of type typ and permissions perm at p, which
// must be free; mtime, if not 0, is its mtime, and set fills in the rest.
func (t *wtx) addNew(p string, typ, perm uint32, mtime int64, set func(*inode)) error {
	parent, name, err := t.parentOf(p)
	if err != nil {
		return err
	}
	if err := t.free(parent, name); err != nil {
		return err
	}
	in, err := t.newInode(typ, perm)
	if err != nil {
		return err
	}
	set(in)
	if mtime != 0 {
		in.mtime = mtime
	}
	return t.add(parent, name, in)
}

func (t *wtx) link(from, p string) error {
	src, err := t.resolve(from)
	if err != nil {
		return err
	}
	if src.isDir() {
		return core.ErrIsDir
	}
	parent, name, err := t.parentOf(p)
	if err != nil {
		return err
	}
	if err := t.free(parent, name); err != nil {
		return err
	}
	src.nlink++
	return t.add(parent, name, src)
}

func (t *wtx) remove(p string) error {
	parent, name, err := t.parentOf(p)
	if err != nil {
		return err
	}
	ino, _, err := t.lookup(parent.ino, name)
	if err != nil {
		return err
	}
	in, err := t.inode(ino)
	if err != nil {
		return err
	}
	if in.isDir() {
		children, err := t.v.list(in.ino)
		if err != nil {
			return err
		}
		if len(children) > 0 {
			return core.ErrNotEmpty
		}
	}
	return t.unlink(parent.ino, name, in)
}

// removeAll deletes p and everything beneath it; the root keeps only itself.
func (t *wtx) removeAll(p string) error {
	in, err := t.resolve(p)
	if errors.Is(err, core.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if in.isDir() {
		if err := t.emptyDir(in); err != nil {
			return err
		}
	}
	if p == "" {
		return nil
	}
	parent, name, err := t.parentOf(p)
	if err != nil {
		return err
	}
	if in.isDir() {
		// reload: emptying it rewrote nothing of its own row, but keep it exact
		if in, err = t.inode(in.ino); err != nil {
			return err
		}
	}
	return t.unlink(parent.ino, name, in)
}

func (t *wtx) emptyDir(dir *inode) error {
	children, err := t.v.list(dir.ino)
	if err != nil {
		return err
	}
	for _, c := range children {
		in, err := t.inode(c.ino)
		if err != nil {
			return err
		}
		if in.isDir() {
			if err := t.emptyDir(in); err != nil {
				return err
			}
		}
		if err := t.unlink(dir.ino, c.name, in); err != nil {
			return err
		}
	}
	return nil
}

// rename moves From to Path with rename(2) semantics, plus RENAME_NOREPLACE
// and RENAME_EXCHANGE.
func (t *wtx) rename(op core.Op) error {
	from, to := op.From, op.Path
	if from == "" || to == "" {
		return core.ErrInvalidArgument
	}
	sp, sname, err := t.parentOf(from)
	if err != nil {
		return err
	}
	sino, _, err := t.lookup(sp.ino, sname)
	if err != nil {
		return err
	}
	src, err := t.inode(sino)
	if err != nil {
		return err
	}
	dp, dname, err := t.parentOf(to)
	if err != nil {
		return err
	}
	if src.isDir() && inSubtree(to, from) && to != from {
		return core.ErrInvalidArgument // into itself
	}
	dino, _, err := t.lookup(dp.ino, dname)
	exists := err == nil
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return err
	}
	if op.Exchange {
		if !exists {
			return core.ErrNotFound
		}
		return t.exchange(sp, sname, src, dp, dname, dino, from, to)
	}
	if exists && op.NoReplace {
		return core.ErrExists
	}
	if from == to || (exists && dino == sino) {
		return nil // same file: rename(2) does nothing
	}
	if exists {
		dst, err := t.inode(dino)
		if err != nil {
			return err
		}
		switch {
		case src.isDir() && !dst.isDir():
			return core.ErrNotDir
		case !src.isDir() && dst.isDir():
			return core.ErrIsDir
		case dst.isDir():
			children, err := t.v.list(dst.ino)
			if err != nil {
				return err
			}
			if len(children) > 0 {
				return core.ErrNotEmpty
			}
		}
		if err := t.unlink(dp.ino, dname, dst); err != nil {
			return err
		}
	}
	if err := t.setEntry(sp.ino, sname, 0, 0); err != nil {
		return err
	}
	sub := 0
	if src.isDir() {
		t.movedDirs()
		sub = 1
	}
	src.moveLink(sp.ino, sname, dp.ino, dname)
	t.touchDir(sp.ino, -sub)
	t.touchDir(dp.ino, sub)
	if err := t.putInode(src); err != nil { // ctime, and a directory's parent link
		return err
	}
	return t.setEntry(dp.ino, dname, src.ino, src.kind())
}

func (t *wtx) exchange(sp *inode, sname string, src *inode, dp *inode, dname string, dino uint64, from, to string) error {
	if from == to {
		return nil // one entry swapped with itself: renameat2(2) does nothing
	}
	dst, err := t.inode(dino)
	if err != nil {
		return err
	}
	if (src.isDir() && inSubtree(to, from)) || (dst.isDir() && inSubtree(from, to)) {
		return core.ErrInvalidArgument
	}
	t.movedDirs()
	if err := t.setEntry(sp.ino, sname, dst.ino, dst.kind()); err != nil {
		return err
	}
	if err := t.setEntry(dp.ino, dname, src.ino, src.kind()); err != nil {
		return err
	}
	delta := 0
	if src.isDir() {
		delta--
	}
	if dst.isDir() {
		delta++
	}
	src.moveLink(sp.ino, sname, dp.ino, dname)
	dst.moveLink(dp.ino, dname, sp.ino, sname)
	t.touchDir(sp.ino, delta)
	t.touchDir(dp.ino, -delta)
	if err := t.putInode(src); err != nil {
		return err
	}
	return t.putInode(dst)
}

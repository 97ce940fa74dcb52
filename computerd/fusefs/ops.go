package fusefs

import (
	"errors"
	"io"
	"sort"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"computerd/core"
	"computerd/fsstore"
)

// fsys answers the kernel's FUSE requests for a Mount. It speaks go-fuse's
// raw protocol: node ids are the store's inode numbers (the root is
// FUSE_ROOT_ID), so the kernel's inodes stay stable across commits.
type fsys struct {
	fuse.RawFileSystem
	m *Mount
}

var _ fuse.RawFileSystem = (*fsys)(nil)

func (f *fsys) String() string { return "computerd" }

func (f *fsys) Init(s *fuse.Server) { f.m.server = s }

// errno maps an error to the status the kernel gets; the one place that does.
func errno(err error) fuse.Status {
	var e syscall.Errno
	switch {
	case err == nil:
		return fuse.OK
	case errors.As(err, &e):
		return fuse.Status(e)
	case errors.Is(err, core.ErrNotFound), errors.Is(err, core.ErrWorkspaceNotFound):
		return fuse.ENOENT
	case errors.Is(err, core.ErrExists):
		return fuse.Status(syscall.EEXIST)
	case errors.Is(err, core.ErrNotDir):
		return fuse.ENOTDIR
	case errors.Is(err, core.ErrIsDir):
		return fuse.Status(syscall.EISDIR)
	case errors.Is(err, core.ErrNotEmpty):
		return fuse.Status(syscall.ENOTEMPTY)
	case errors.Is(err, core.ErrInvalidPath), errors.Is(err, core.ErrInvalidArgument):
		return fuse.EINVAL
	case errors.Is(err, core.ErrUnknownRevision):
		return fuse.Status(syscall.ESTALE)
	case errors.Is(err, core.ErrNoSpace):
		return fuse.Status(syscall.ENOSPC)
	case errors.Is(err, core.ErrQuota):
		return fuse.Status(syscall.EDQUOT)
	}
	return fuse.EIO
}

func (m *Mount) inoOf(nodeID uint64) uint64 {
	if nodeID == fuse.FUSE_ROOT_ID {
		return m.rootIno
	}
	return nodeID
}

func (m *Mount) nodeID(ino uint64) uint64 {
	if ino == m.rootIno {
		return fuse.FUSE_ROOT_ID
	}
	return ino
}

// fillAttr describes n to the kernel.
func fillAttr(n *node, a *fuse.Attr) {
	a.Ino = n.ino
	a.Size = uint64(n.size)
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.Mode = n.mode
	a.Nlink = n.nlink
	a.Uid, a.Gid = n.uid, n.gid
	a.Rdev = uint32(n.rdev) // FUSE carries the kernel's 32-bit encoding
	a.Mtime, a.Mtimensec = uint64(n.mtime/1e9), uint32(n.mtime%1e9)
	a.Atime, a.Atimensec = uint64(n.atime/1e9), uint32(n.atime%1e9)
	a.Ctime, a.Ctimensec = uint64(n.ctime/1e9), uint32(n.ctime%1e9)
}

func (m *Mount) fillEntry(n *node, out *fuse.EntryOut) {
	out.NodeId = m.nodeID(n.ino)
	out.Generation = 1
	out.SetEntryTimeout(m.ttl)
	out.SetAttrTimeout(m.ttl)
	fillAttr(n, &out.Attr)
}

func validName(name string) error {
	switch {
	case len(name) > core.MaxNameLen:
		return syscall.ENAMETOOLONG
	case name == "", name == ".", name == "..":
		return syscall.EINVAL
	}
	return nil
}

func (f *fsys) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(name) > core.MaxNameLen {
		return fuse.Status(syscall.ENAMETOOLONG)
	}
	d, err := m.dir(m.inoOf(h.NodeId))
	if err != nil {
		return errno(err)
	}
	e, ok, err := m.child(d, name)
	if err != nil {
		return errno(err)
	}
	if !ok {
		// A negative entry the kernel may keep: names appear only through
		// this mount (which the kernel sees) or Refresh (which says so).
		out.NodeId = 0
		out.SetEntryTimeout(m.ttl)
		return fuse.OK
	}
	n, err := m.node(e.ino)
	if err != nil {
		return errno(err)
	}
	hangs(d, name, n)
	n.lookups++
	m.fillEntry(n, out)
	return fuse.OK
}

func (f *fsys) Forget(nodeID, nlookup uint64) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.nodes[m.inoOf(nodeID)]; n != nil {
		n.lookups -= min(n.lookups, nlookup)
		m.release(n)
	}
}

func (f *fsys) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.node(m.inoOf(in.NodeId))
	if err != nil {
		return errno(err)
	}
	fillAttr(n, &out.Attr)
	out.SetTimeout(m.ttl)
	return fuse.OK
}

func (f *fsys) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.node(m.inoOf(in.NodeId))
	if err != nil {
		return errno(err)
	}
	now := m.now()
	if size, ok := in.GetSize(); ok {
		if !n.isReg() {
			if n.isDir() {
				return fuse.Status(syscall.EISDIR)
			}
			return fuse.EINVAL
		}
		if int64(size) > core.MaxFileSize {
			return fuse.Status(syscall.EFBIG)
		}
		if err := m.truncate(n, int64(size)); err != nil {
			return errno(err)
		}
	}
	if mode, ok := in.GetMode(); ok {
		n.mode = n.mode&syscall.S_IFMT | mode&0o7777
		n.dirtyMode = true
	} else if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 && n.mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		n.mode &^= syscall.S_ISUID | syscall.S_ISGID
		n.dirtyMode = true
	}
	if uid, ok := in.GetUID(); ok {
		n.uid, n.dirtyOwner = uid, true
	}
	if gid, ok := in.GetGID(); ok {
		n.gid, n.dirtyOwner = gid, true
	}
	if t, ok := in.GetMTime(); ok {
		n.mtime = t.UnixNano()
	}
	if t, ok := in.GetATime(); ok {
		n.atime = t.UnixNano()
	}
	n.ctime = now
	m.touch(n)
	m.kick()
	fillAttr(n, &out.Attr)
	out.SetTimeout(m.ttl)
	return fuse.OK
}

func (f *fsys) Readlink(_ <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.node(m.inoOf(h.NodeId))
	if err != nil {
		return nil, errno(err)
	}
	if n.mode&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, fuse.EINVAL
	}
	return []byte(n.target), fuse.OK
}

// newNode adds a node made by this mount as name in directory d.
func (m *Mount) newNode(d *node, name string, mode uint32, caller fuse.Caller) (*node, error) {
	ino, err := m.newIno()
	if err != nil {
		return nil, err
	}
	now := m.now()
	n := &node{ino: ino, mode: mode, uid: caller.Uid, gid: caller.Gid, nlink: 1,
		mtime: now, ctime: now, atime: now, created: true, lookups: 1}
	n.dirtyOwner = n.uid != 0 || n.gid != 0
	n.dirtyMode = mode&0o7777 == 0 // the store reads mode 0 as its default
	if d.mode&syscall.S_ISGID != 0 {
		n.gid, n.dirtyOwner = d.gid, true
		if n.isDir() {
			n.mode |= syscall.S_ISGID
		}
	}
	sub := 0
	if n.isDir() {
		n.nlink = 2
		n.children = map[string]dent{}
		sub = 1
	}
	hangs(d, name, n)
	d.children[name] = dent{name: name, ino: ino, mode: mode & syscall.S_IFMT}
	m.changed(d, now, sub)
	m.nodes[ino] = n
	m.touch(n)
	m.kick()
	return n, nil
}

// freeName loads directory d's entries and checks name is not taken.
func (m *Mount) freeName(dirID uint64, name string) (*node, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	d, err := m.dir(m.inoOf(dirID))
	if err != nil {
		return nil, err
	}
	es, err := m.entries(d)
	if err != nil {
		return nil, err
	}
	if _, ok := es[name]; ok {
		return nil, syscall.EEXIST
	}
	if err := m.roomFor(d, name); err != nil {
		return nil, err
	}
	return d, nil
}

func (f *fsys) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.freeName(in.NodeId, name)
	if err != nil {
		return errno(err)
	}
	n, err := m.newNode(d, name, syscall.S_IFDIR|in.Mode&0o7777, in.Caller)
	if err != nil {
		return errno(err)
	}
	m.record(fsstore.NodeOp{Kind: core.OpMkdir, Dir: d.ino, Name: name, Ino: n.ino, Mode: permMode(n.mode)}, n.ino, 0)
	m.fillEntry(n, out)
	return fuse.OK
}

// Mknod makes regular files, FIFOs, sockets and device nodes. The kernel
// lets only a caller with CAP_MKNOD make a device; the mount is nodev, so
// a device node is a name with a number, never a way into the device.
func (f *fsys) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	typ := in.Mode & syscall.S_IFMT
	switch typ {
	case syscall.S_IFREG, syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
	default:
		return fuse.EINVAL
	}
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.freeName(in.NodeId, name)
	if err != nil {
		return errno(err)
	}
	var n *node
	if typ == syscall.S_IFREG {
		n, err = m.create(d, name, in.Mode, in.Caller)
	} else {
		n, err = m.mknod(d, name, typ|in.Mode&0o7777, uint64(in.Rdev), in.Caller)
	}
	if err != nil {
		return errno(err)
	}
	m.fillEntry(n, out)
	return fuse.OK
}

// mknod adds a FIFO, socket or device node (rdev, the kernel's encoding:
// core.MakeDev's for every number FUSE can carry).
func (m *Mount) mknod(d *node, name string, mode uint32, rdev uint64, caller fuse.Caller) (*node, error) {
	if typ := mode & syscall.S_IFMT; typ != syscall.S_IFCHR && typ != syscall.S_IFBLK {
		rdev = 0
	}
	n, err := m.newNode(d, name, mode, caller)
	if err != nil {
		return nil, err
	}
	n.rdev = rdev
	n.dirtyMode = false // mknod takes its mode as given, 0 too
	m.record(fsstore.NodeOp{Kind: core.OpMknod, Dir: d.ino, Name: name, Ino: n.ino, Mode: fsstore.ModeOf(n.mode), Rdev: rdev}, n.ino, 0)
	return n, nil
}

func (m *Mount) create(d *node, name string, mode uint32, caller fuse.Caller) (*node, error) {
	n, err := m.newNode(d, name, syscall.S_IFREG|mode&0o7777, caller)
	if err != nil {
		return nil, err
	}
	m.record(fsstore.NodeOp{Kind: core.OpCreate, Dir: d.ino, Name: name, Ino: n.ino, Mode: permMode(n.mode)}, n.ino, 0)
	return n, nil
}

func (f *fsys) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := validName(name); err != nil {
		return errno(err)
	}
	d, err := m.dir(m.inoOf(in.NodeId))
	if err != nil {
		return errno(err)
	}
	es, err := m.entries(d)
	if err != nil {
		return errno(err)
	}
	var n *node
	if e, ok := es[name]; ok {
		if in.Flags&syscall.O_EXCL != 0 {
			return fuse.Status(syscall.EEXIST)
		}
		if n, err = m.node(e.ino); err != nil {
			return errno(err)
		}
		if n.isDir() {
			return fuse.Status(syscall.EISDIR)
		}
		if in.Flags&syscall.O_TRUNC != 0 && n.isReg() {
			if err := m.truncate(n, 0); err != nil {
				return errno(err)
			}
			m.kick()
		}
		n.lookups++
	} else if err := m.roomFor(d, name); err != nil {
		return errno(err)
	} else if n, err = m.create(d, name, in.Mode, in.Caller); err != nil {
		return errno(err)
	} else {
		// The descriptor that made the file: its RELEASE stores the last page.
		m.lastFh++
		n.creator = m.lastFh
		out.OpenOut.Fh = n.creator
	}
	m.fillEntry(n, &out.EntryOut)
	out.OpenOut.OpenFlags = fuse.FOPEN_KEEP_CACHE
	return fuse.OK
}

func (f *fsys) Symlink(_ <-chan struct{}, h *fuse.InHeader, target string, name string, out *fuse.EntryOut) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(target) > core.MaxPathLen || target == "" {
		return fuse.Status(syscall.ENAMETOOLONG)
	}
	d, err := m.freeName(h.NodeId, name)
	if err != nil {
		return errno(err)
	}
	n, err := m.newNode(d, name, syscall.S_IFLNK|0o777, h.Caller)
	if err != nil {
		return errno(err)
	}
	n.target, n.size = target, int64(len(target))
	n.dirtyMode = false
	m.record(fsstore.NodeOp{Kind: core.OpSymlink, Dir: d.ino, Name: name, Ino: n.ino, Target: target}, n.ino, 0)
	m.fillEntry(n, out)
	return fuse.OK
}

func (f *fsys) Link(_ <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.node(m.inoOf(in.Oldnodeid))
	if err != nil {
		return errno(err)
	}
	if n.isDir() {
		return fuse.EPERM
	}
	d, err := m.freeName(in.NodeId, name)
	if err != nil {
		return errno(err)
	}
	now := m.now()
	d.children[name] = dent{name: name, ino: n.ino, mode: n.mode & syscall.S_IFMT}
	m.changed(d, now, 0)
	n.nlink++
	n.ctime = now
	n.lookups++
	m.touch(n)
	m.record(fsstore.NodeOp{Kind: core.OpLink, Dir: d.ino, Name: name, Ino: n.ino}, n.ino, 0)
	m.kick()
	m.fillEntry(n, out)
	return fuse.OK
}

// existing loads directory dirID's entries and the entry called name.
func (m *Mount) existing(dirID uint64, name string) (*node, dent, error) {
	d, err := m.dir(m.inoOf(dirID))
	if err != nil {
		return nil, dent{}, err
	}
	es, err := m.entries(d)
	if err != nil {
		return nil, dent{}, err
	}
	e, ok := es[name]
	if !ok {
		return nil, dent{}, syscall.ENOENT
	}
	return d, e, nil
}

// unlinked drops one link of n, which the entry just removed named.
func (m *Mount) unlinked(n *node, now int64) {
	if n.isDir() {
		n.nlink = 0
	} else if n.nlink > 0 {
		n.nlink--
	}
	n.ctime = now
	if n.nlink == 0 && n.src == nil {
		// Open descriptors keep reading what the file held.
		n.src = m.snap
	}
	m.touch(n)
}

func (f *fsys) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	d, e, err := m.existing(h.NodeId, name)
	if err != nil {
		return errno(err)
	}
	if e.mode == syscall.S_IFDIR {
		return fuse.Status(syscall.EISDIR)
	}
	n, err := m.node(e.ino)
	if err != nil {
		return errno(err)
	}
	now := m.now()
	delete(d.children, name)
	m.changed(d, now, 0)
	m.unlinked(n, now)
	m.record(fsstore.NodeOp{Kind: core.OpDelete, Dir: d.ino, Name: name}, n.ino, 0)
	m.kick()
	return fuse.OK
}

func (f *fsys) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	d, e, err := m.existing(h.NodeId, name)
	if err != nil {
		return errno(err)
	}
	if e.mode != syscall.S_IFDIR {
		return fuse.ENOTDIR
	}
	c, err := m.node(e.ino)
	if err != nil {
		return errno(err)
	}
	if empty, err := m.emptyDir(c); err != nil {
		return errno(err)
	} else if !empty {
		return fuse.Status(syscall.ENOTEMPTY)
	}
	now := m.now()
	delete(d.children, name)
	m.changed(d, now, -1)
	m.unlinked(c, now)
	m.record(fsstore.NodeOp{Kind: core.OpDelete, Dir: d.ino, Name: name}, c.ino, 0)
	m.kick()
	return fuse.OK
}

// renameFits refuses to move entry e of directory from to name in
// directory to if that, or for a directory its deepest descendant, would
// get a path longer than the store takes. Only a directory whose path grows
// has its subtree read.
func (m *Mount) renameFits(from *node, e dent, to *node, name string) error {
	dl, ok := m.pathLen(to)
	if !ok {
		return nil
	}
	newLen := joinLen(dl, name)
	if newLen > core.MaxPathLen {
		return syscall.ENAMETOOLONG
	}
	if e.mode != syscall.S_IFDIR {
		return nil
	}
	if sl, ok := m.pathLen(from); ok && joinLen(sl, e.name) >= newLen {
		return nil // everything beneath fitted before and gets no longer
	}
	fits, err := m.fitsUnder(e.ino, core.MaxPathLen-newLen)
	if err != nil {
		return err
	}
	if !fits {
		return syscall.ENAMETOOLONG
	}
	return nil
}

func isDirMode(mode uint32) int {
	if mode == syscall.S_IFDIR {
		return 1
	}
	return 0
}

func (f *fsys) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	const noReplace, exchange = unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE
	if in.Flags&^uint32(noReplace|exchange) != 0 || in.Flags == noReplace|exchange {
		return fuse.EINVAL
	}
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := validName(newName); err != nil {
		return errno(err)
	}
	sd, se, err := m.existing(in.NodeId, oldName)
	if err != nil {
		return errno(err)
	}
	dd, err := m.dir(m.inoOf(in.Newdir))
	if err != nil {
		return errno(err)
	}
	dc, err := m.entries(dd)
	if err != nil {
		return errno(err)
	}
	de, exists := dc[newName]
	other := uint64(0)
	if exists {
		other = de.ino
	}
	if err := m.renameFits(sd, se, dd, newName); err != nil {
		return errno(err)
	}
	if in.Flags&exchange != 0 && exists {
		if err := m.renameFits(dd, de, sd, oldName); err != nil {
			return errno(err)
		}
	}
	op := fsstore.NodeOp{Kind: core.OpRename, Dir: dd.ino, Name: newName, FromDir: sd.ino, FromName: oldName}
	now := m.now()
	sdSub, ddSub := 0, 0
	switch {
	case in.Flags&exchange != 0:
		if !exists {
			return fuse.ENOENT
		}
		if sd == dd && oldName == newName {
			return fuse.OK
		}
		se.name, de.name = newName, oldName
		sd.children[oldName], dd.children[newName] = de, se
		sdSub = isDirMode(de.mode) - isDirMode(se.mode)
		ddSub = -sdSub
		op.Exchange = true
	default:
		if exists && in.Flags&noReplace != 0 {
			return fuse.Status(syscall.EEXIST)
		}
		if exists && de.ino == se.ino {
			return fuse.OK // the same file: rename(2) does nothing
		}
		if exists {
			switch {
			case se.mode == syscall.S_IFDIR && de.mode != syscall.S_IFDIR:
				return fuse.ENOTDIR
			case se.mode != syscall.S_IFDIR && de.mode == syscall.S_IFDIR:
				return fuse.Status(syscall.EISDIR)
			}
			dn, err := m.node(de.ino)
			if err != nil {
				return errno(err)
			}
			if dn.isDir() {
				if empty, err := m.emptyDir(dn); err != nil {
					return errno(err)
				} else if !empty {
					return fuse.Status(syscall.ENOTEMPTY)
				}
				ddSub--
			}
			m.unlinked(dn, now)
		}
		delete(sd.children, oldName)
		se.name = newName
		dd.children[newName] = se
		if se.mode == syscall.S_IFDIR {
			sdSub--
			ddSub++
		}
		op.NoReplace = in.Flags&noReplace != 0
	}
	if sd == dd {
		m.changed(sd, now, sdSub+ddSub)
	} else {
		m.changed(sd, now, sdSub)
		m.changed(dd, now, ddSub)
	}
	if n := m.nodes[se.ino]; n != nil {
		n.ctime = now
		m.touch(n)
		hangs(dd, newName, n)
	}
	if n := m.nodes[de.ino]; n != nil && op.Exchange {
		n.ctime = now
		m.touch(n)
		hangs(sd, oldName, n)
	}
	m.record(op, se.ino, other)
	m.kick()
	return fuse.OK
}

func (f *fsys) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	m := f.m
	m.mu.Lock()
	n, err := m.node(m.inoOf(in.NodeId))
	if err != nil {
		m.mu.Unlock()
		return nil, errno(err)
	}
	if !n.isReg() {
		m.mu.Unlock()
		return nil, fuse.Status(syscall.EISDIR)
	}
	off := int64(in.Offset)
	if off >= n.size {
		m.mu.Unlock()
		return fuse.ReadResultData(nil), fuse.OK
	}
	k := min(int64(len(buf)), int64(in.Size), n.size-off)
	m.readTail(n, off+k)
	if file := m.wholeCleanChunks(n, off, k); file != nil {
		// Whole committed chunks (sequential reads): read them without
		// the lock, so reads of several files, or read-ahead, overlap.
		m.mu.Unlock()
		got, err := file.ReadAt(buf[:k], off)
		if err != nil && !(errors.Is(err, io.EOF) && int64(got) == k) {
			return nil, errno(err)
		}
		return fuse.ReadResultData(buf[:k]), fuse.OK
	}
	defer m.mu.Unlock()
	if err := m.readAt(n, buf[:k], off); err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(buf[:k]), fuse.OK
}

// wholeCleanChunks returns the committed file to read [off, off+k) of n
// from, if that range is whole chunks (or ends at the end of the file),
// none of them dirty, all below srcLimit; nil otherwise. m.mu is held.
func (m *Mount) wholeCleanChunks(n *node, off, k int64) *fsstore.File {
	cs := m.chunk
	if off%cs != 0 || (k%cs != 0 && off+k != n.size) || off+k > n.srcLimit {
		return nil
	}
	for idx := off / cs; idx*cs < off+k; idx++ {
		if _, dirty := n.chunks[idx]; dirty {
			return nil
		}
		if _, cached := n.cached[idx]; cached {
			return nil // the copy in the spool is quicker, under the lock
		}
	}
	if n.file == nil {
		src := n.src
		if src == nil {
			src = m.snap
		}
		f, err := src.OpenIno(m.ctx, n.ino)
		if err != nil {
			return nil
		}
		n.file = f
	}
	if n.file.Size() < off+k {
		return nil
	}
	return n.file
}

func (f *fsys) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.node(m.inoOf(in.NodeId))
	if err != nil {
		return 0, errno(err)
	}
	if !n.isReg() {
		return 0, fuse.Status(syscall.EISDIR)
	}
	if int64(in.Offset) > core.MaxFileSize-int64(len(data)) {
		return 0, fuse.Status(syscall.EFBIG)
	}
	if err := m.checkQuota(int64(len(data))); err != nil {
		return 0, errno(err)
	}
	if err := m.write(n, data, int64(in.Offset)); err != nil {
		return 0, errno(err)
	}
	m.written += int64(len(data))
	m.kick()
	return uint32(len(data)), fuse.OK
}

func (f *fsys) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.node(m.inoOf(in.NodeId))
	if err != nil {
		return errno(err)
	}
	if !n.isReg() {
		return fuse.Status(syscall.ENODEV)
	}
	end := int64(in.Offset + in.Length)
	switch in.Mode {
	case 0:
		if end > n.size {
			if err := m.truncate(n, end); err != nil {
				return errno(err)
			}
			m.kick()
		}
		return fuse.OK
	case unix.FALLOC_FL_KEEP_SIZE:
		return fuse.OK // nothing to reserve: space is the store's
	}
	return fuse.Status(syscall.EOPNOTSUPP)
}

func (f *fsys) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return errno(f.m.sync())
}

func (f *fsys) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return errno(f.m.sync())
}

// Open and OpenDir answer ENOSYS: the kernel then stops sending OPEN,
// OPENDIR, RELEASE and RELEASEDIR altogether and keeps file pages and
// directory listings cached across opens (Refresh invalidates them).
func (f *fsys) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (f *fsys) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

// Flush answers ENOSYS so close(2) costs no request: data is the
// mount's as soon as WRITE returns.
func (f *fsys) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status { return fuse.ENOSYS }

// Release comes only for descriptors opened by CREATE (OPEN answers
// ENOSYS). When the one that made the file is closed, the kernel gets the
// file's last page (see storeTail).
func (f *fsys) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {
	if in.Fh != 0 {
		f.m.storeTail(in.NodeId, in.Fh)
	}
}

func (f *fsys) ReleaseDir(in *fuse.ReleaseIn) {}

func (f *fsys) StatFs(_ <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	out.Bsize, out.Frsize = 4096, 4096
	out.Blocks, out.Bfree, out.Bavail = 1<<32, 1<<31, 1<<31
	out.Files, out.Ffree = 1<<32, 1<<31
	out.NameLen = core.MaxNameLen
	return fuse.OK
}

func (f *fsys) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, false)
}

func (f *fsys) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, true)
}

func (f *fsys) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir(m.inoOf(in.NodeId))
	if err != nil {
		return errno(err)
	}
	es, err := m.list(d)
	if err != nil {
		return errno(err)
	}
	add := func(e fuse.DirEntry) *fuse.EntryOut {
		if plus {
			return out.AddDirLookupEntry(e)
		}
		if out.AddDirEntry(e) {
			return &fuse.EntryOut{}
		}
		return nil
	}
	off := in.Offset
	if off < 1 && add(fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: d.ino, Off: 1}) == nil {
		return fuse.OK
	}
	if off < 2 && add(fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Off: 2}) == nil {
		return fuse.OK
	}
	var stats map[uint64]core.Stat
	for _, e := range es[sort.Search(len(es), func(i int) bool { return es[i].cookie > off }):] {
		eo := add(fuse.DirEntry{Name: e.name, Mode: e.mode, Ino: e.ino, Off: e.cookie})
		if eo == nil {
			break
		}
		if !plus {
			continue
		}
		n := m.nodes[e.ino]
		if n == nil {
			if stats == nil {
				stats = m.dirStats(d)
			}
			if st, ok := stats[e.ino]; ok {
				n = nodeFromStat(st)
				m.nodes[e.ino] = n
			} else if n, err = m.node(e.ino); err != nil {
				continue // gone meanwhile: the entry goes without attributes
			}
		}
		// Attributes go with every entry, also for inodes the kernel
		// holds already: they refresh what writes and reads made it drop
		// (size and times after a WRITE, atime after a READ or a listing),
		// which would otherwise cost a GETATTR per file at the next stat.
		hangs(d, e.name, n)
		n.lookups++
		m.fillEntry(n, eo)
	}
	return fuse.OK
}

// dirStats reads the metadata of a directory's committed entries in one go.
func (m *Mount) dirStats(d *node) map[uint64]core.Stat {
	sts, err := m.snap.ReadDirStat(m.ctx, d.ino)
	if err != nil {
		return map[uint64]core.Stat{}
	}
	out := make(map[uint64]core.Stat, len(sts))
	for _, st := range sts {
		out[st.Ino] = st
	}
	return out
}

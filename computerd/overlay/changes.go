package overlay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"computerd/core"
	"computerd/fsstore"
)

// Changes reads an overlay's upper layer (upper, over the lower layer,
// the revision lower) and returns the changeset that turns the lower tree
// into the merged one. File contents go into the store through up (Flush
// it before committing). It costs O(what the upper layer holds): the lower
// layer is only looked at where the upper one has something.
//
// The lower layer is read from the store, never through the revision
// view's mount: computerd serves that mount itself, and a thread of its
// own waiting on it can never exit if computerd is killed (SIGKILL) while
// the request is out: the kernel waits for an answer no thread is left to
// give, and the dying process keeps the data directory's lock.
//
// What the upper layer holds, and the ops it becomes:
//   - a whiteout (a 0/0 character device): the lower entry was deleted:
//     delete_all;
//   - a directory that is opaque (trusted.overlay.opaque), or that stands
//     where the lower layer has no directory: whatever the lower layer had
//     there goes (delete_all) and a new directory is made (mkdir), its
//     contents all new;
//   - a directory over a lower one: merged; chmod/chown if its owner or
//     mode changed, and its entries compared one by one;
//   - a regular file: create with its contents, unless it is a copy of the
//     lower file that only changed mode, owner or time (copy-up by chmod,
//     touch, or an open for writing that wrote nothing);
//   - a symlink: symlink; a second name of a file made in the upper layer: link;
//   - a FIFO, socket or device node: mknod, unless it is a copy of the
//     lower one (same type and device number) that only changed mode,
//     owner or time.
//
// Directory times are left to the store, which sets them when entries
// change.
func Changes(ctx context.Context, upper string, lower *fsstore.Snapshot, up *fsstore.Uploader) (*core.Changeset, error) {
	c := &changes{ctx: ctx, upper: upper, lower: lower, up: up, links: map[[2]uint64]string{}, cs: &core.Changeset{}}
	if err := c.dir("", lower.RootIno()); err != nil {
		return nil, err
	}
	return c.cs, nil
}

type changes struct {
	ctx   context.Context
	upper string
	lower *fsstore.Snapshot
	up    *fsstore.Uploader
	links map[[2]uint64]string // an upper file with several names: its first path
	cs    *core.Changeset
}

func (c *changes) add(op core.Op) { c.cs.Ops = append(c.cs.Ops, op) }

// dir walks upper directory p (workspace-relative; "" is the root);
// lowDir is the inode of the lower layer's directory at p, which shows
// through it, or 0 if none does.
func (c *changes) dir(p string, lowDir uint64) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(c.upper, p))
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := c.entry(path.Join(p, name), name, lowDir); err != nil {
			return err
		}
	}
	return nil
}

// entry turns upper entry p, named name in a directory over lower
// directory lowDir (0: none), into ops.
func (c *changes) entry(p, name string, lowDir uint64) error {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(c.upper, p), &st); err != nil {
		return err
	}
	var low unix.Stat_t
	hasLow := false
	if lowDir != 0 {
		ls, err := c.lower.Lookup(c.ctx, lowDir, name)
		switch {
		case err == nil:
			hasLow = true
			low = lowerStat(ls)
		case !errors.Is(err, core.ErrNotFound):
			return fmt.Errorf("lower %s: %w", p, err)
		}
	}
	typ := st.Mode & syscall.S_IFMT
	lowTyp := low.Mode & syscall.S_IFMT
	switch typ {
	case syscall.S_IFCHR, syscall.S_IFBLK, syscall.S_IFIFO, syscall.S_IFSOCK:
		if typ == syscall.S_IFCHR && st.Rdev == 0 { // a whiteout
			if hasLow {
				c.add(core.Op{Kind: core.OpDeleteAll, Path: p})
			}
			return nil
		}
		return c.special(p, &st, hasLow, &low)
	case syscall.S_IFDIR:
		if hasLow && lowTyp == syscall.S_IFDIR && !opaque(filepath.Join(c.upper, p)) {
			c.attrs(p, &st, &low)
			return c.dir(p, low.Ino)
		}
		if hasLow {
			c.add(core.Op{Kind: core.OpDeleteAll, Path: p})
		}
		c.add(core.Op{Kind: core.OpMkdir, Path: p, Mode: permMode(st.Mode)})
		c.attrs(p, &st, nil)
		return c.dir(p, 0)
	case syscall.S_IFREG:
		return c.file(p, &st, hasLow, &low)
	case syscall.S_IFLNK:
		target, err := os.Readlink(filepath.Join(c.upper, p))
		if err != nil {
			return err
		}
		if hasLow {
			c.add(core.Op{Kind: core.OpDeleteAll, Path: p})
		}
		c.add(core.Op{Kind: core.OpSymlink, Path: p, Target: target, Mtime: mtime(&st)})
		c.owner(p, &st, nil)
	}
	return nil
}

// special turns upper FIFO, socket or device node p into ops.
func (c *changes) special(p string, st *unix.Stat_t, hasLow bool, low *unix.Stat_t) error {
	if c.linked(p, st, hasLow) {
		return nil
	}
	if hasLow && low.Mode&syscall.S_IFMT == st.Mode&syscall.S_IFMT && low.Rdev == st.Rdev && st.Nlink == 1 {
		c.copiedUp(p, st, low) // chmod, chown or touch
		return nil
	}
	if hasLow {
		c.add(core.Op{Kind: core.OpDeleteAll, Path: p})
	}
	c.add(core.Op{Kind: core.OpMknod, Path: p, Mode: fsstore.ModeOf(st.Mode), Rdev: st.Rdev, Mtime: mtime(st)})
	c.owner(p, st, nil)
	return nil
}

// linked turns a second name of an upper inode with several names into a
// link op (true); the first name it remembers, for the names to come.
func (c *changes) linked(p string, st *unix.Stat_t, hasLow bool) bool {
	if st.Nlink <= 1 {
		return false
	}
	k := [2]uint64{st.Dev, st.Ino}
	first, ok := c.links[k]
	if !ok {
		c.links[k] = p
		return false
	}
	if hasLow {
		c.add(core.Op{Kind: core.OpDeleteAll, Path: p})
	}
	c.add(core.Op{Kind: core.OpLink, Path: p, From: first})
	return true
}

// file turns upper regular file p into ops.
func (c *changes) file(p string, st *unix.Stat_t, hasLow bool, low *unix.Stat_t) error {
	if c.linked(p, st, hasLow) {
		return nil
	}
	lowReg := hasLow && low.Mode&syscall.S_IFMT == syscall.S_IFREG
	if hasLow && !lowReg {
		c.add(core.Op{Kind: core.OpDeleteAll, Path: p})
	}
	if lowReg && st.Nlink == 1 && st.Size == low.Size {
		same, err := c.sameBytes(p, low.Ino)
		if err != nil {
			return err
		}
		if same {
			c.copiedUp(p, st, low)
			return nil
		}
	}
	f, err := os.Open(filepath.Join(c.upper, p))
	if err != nil {
		return err
	}
	content, err := c.up.PutFile(c.ctx, holeFile{f}, st.Size)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	c.add(core.Op{Kind: core.OpCreate, Path: p, Mode: permMode(st.Mode), Content: content, Mtime: mtime(st)})
	if lowReg {
		c.owner(p, st, low) // create sets the mode of an existing file too
	} else {
		c.attrs(p, st, nil)
	}
	return nil
}

// copiedUp adds the changes of an upper entry that is a copy of the lower
// one: its mode, owner and mtime.
func (c *changes) copiedUp(p string, st, low *unix.Stat_t) {
	c.attrs(p, st, low)
	if mtime(st) != mtime(low) {
		c.add(core.Op{Kind: core.OpUtimes, Path: p, Mtime: mtime(st)})
	}
}

// attrs adds chmod and chown for what differs from low (nil: from a new
// entry's defaults: the mode it was made with, unless that was 0, which
// mkdir and create take as "the default"; owner root).
func (c *changes) attrs(p string, st, low *unix.Stat_t) {
	perm := st.Mode &^ syscall.S_IFMT
	if low != nil && perm != low.Mode&^syscall.S_IFMT || low == nil && perm == 0 {
		c.add(core.Op{Kind: core.OpChmod, Path: p, Mode: permMode(st.Mode)})
	}
	c.owner(p, st, low)
}

func (c *changes) owner(p string, st, low *unix.Stat_t) {
	var uid, gid uint32
	if low != nil {
		uid, gid = low.Uid, low.Gid
	}
	if st.Uid != uid || st.Gid != gid {
		c.add(core.Op{Kind: core.OpChown, Path: p, UID: st.Uid, GID: st.Gid})
	}
}

func permMode(m uint32) os.FileMode { return fsstore.ModeOf(m &^ syscall.S_IFMT) }

func mtime(st *unix.Stat_t) int64 { return st.Mtim.Nano() }

// opaque reports whether upper directory dir hides the lower one.
func opaque(dir string) bool {
	var b [1]byte
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", b[:])
	return err == nil && n == 1 && (b[0] == 'y' || b[0] == 'x')
}

// lowerStat is what the lower layer's entry st would stat as.
func lowerStat(st core.Stat) unix.Stat_t {
	return unix.Stat_t{
		Ino: st.Ino, Mode: fsstore.UnixMode(st.Mode), Uid: st.UID, Gid: st.GID, Nlink: uint64(st.Nlink),
		Size: st.Size, Rdev: st.Rdev, Mtim: unix.NsecToTimespec(st.Mtime.UnixNano()),
	}
}

// sameBytes reports whether upper file p and lower file lowIno, of equal
// size, hold the same bytes.
func (c *changes) sameBytes(p string, lowIno uint64) (bool, error) {
	fa, err := os.Open(filepath.Join(c.upper, p))
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := c.lower.OpenIno(c.ctx, lowIno)
	if err != nil {
		return false, fmt.Errorf("lower %s: %w", p, err)
	}
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if errors.Is(erra, io.EOF) || errors.Is(erra, io.ErrUnexpectedEOF) {
			return true, nil
		}
		if erra != nil {
			return false, erra
		}
		if errb != nil && !errors.Is(errb, io.EOF) && !errors.Is(errb, io.ErrUnexpectedEOF) {
			return false, errb
		}
	}
}

// holeFile lets the Uploader skip a file's holes: a command can make a
// file of any length that holds nearly nothing (truncate -s 1T), whose
// zeros would otherwise all be read and checked at the commit.
type holeFile struct{ *os.File }

func (f holeFile) DataAfter(off int64) (int64, error) {
	d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 0, io.EOF
	}
	return d, err
}

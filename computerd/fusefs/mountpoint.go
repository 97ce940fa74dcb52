package fusefs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"computerd/computerd/mountinfo"
)

// MountPoint is a directory opened for a mount, with its parent. A mount
// made through it (Options.At) lands on that very directory, and from
// then on it is known by its unique mount id, never by the directory's
// path: whoever may write to a directory on that path cannot swap a
// component for a symlink between the checks made on the directory and
// the mount, and so cannot send the mount elsewhere; and whoever removes
// the mount and puts another file system in its place (root, with
// umount -l and mount) does not have computerd unmount that one.
type MountPoint struct {
	// Dir is the directory, opened for reading (it may be O_PATH).
	Dir *os.File
	// Parent is the directory that holds Dir, as Name.
	Parent *os.File
	Name   string

	id uint64 // the unique id of the mount made through it (ID)
}

// Close closes both descriptors.
func (p *MountPoint) Close() error {
	return errors.Join(p.Dir.Close(), p.Parent.Close())
}

// ID is the unique id (mountinfo.UniqueID) of the mount made through p, 0
// before it is made.
func (p *MountPoint) ID() uint64 { return p.id }

// hostMountFlags are the flags of every mount of a workspace: its files
// are the tenant's, so a set-user-id bit or a device node in them must
// give no one anything on the host. hostMountAttrs are the same as
// fsmount(2) attributes.
const (
	hostMountFlags = unix.MS_NOSUID | unix.MS_NODEV
	hostMountAttrs = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
)

// mount mounts a new FUSE connection on p.Dir and returns the magic
// "/dev/fd/N" name of the connection's descriptor, which go-fuse's
// NewServer takes in place of a mount point (it then mounts nothing
// itself).
//
// The mount is made detached (fsmount(2)) and then moved onto p.Dir
// (move_mount(2) to the descriptor), so its id is known before it is
// anywhere. The kernel puts it on top of whatever is mounted on the
// directory by then, so it is checked to sit on p.Dir itself: a mount
// made on the directory since the mount policy's checks (which refuse a
// mount point) would be beneath it, and is left alone (ErrMountPoint).
func (p *MountPoint) mount(opts *fuse.MountOptions) (string, error) {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open /dev/fuse: %w", err)
	}
	mnt, err := newFuseMount(fd, opts)
	if err != nil {
		unix.Close(fd)
		return "", fmt.Errorf("mount: %w", err)
	}
	defer unix.Close(mnt)
	id, err := mountinfo.UniqueID(mnt)
	if err != nil {
		unix.Close(fd)
		return "", fmt.Errorf("mount: %w", err)
	}
	if err := unix.MoveMount(mnt, "", int(p.Dir.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		unix.Close(fd)
		return "", fmt.Errorf("mount: move_mount: %w", err)
	}
	if err := p.onDir(mnt); err != nil {
		// Detached at once, before anything was served through it.
		unix.Unmount(fdPath(mnt), unix.MNT_DETACH)
		unix.Close(fd)
		return "", fmt.Errorf("mount: %w", err)
	}
	p.id = id
	return "/dev/fd/" + strconv.Itoa(fd), nil
}

// newFuseMount makes a detached FUSE mount of the connection fd
// (fsopen(2), fsconfig(2), fsmount(2)) with the options go-fuse's direct
// mount would give mount(2), and returns its descriptor.
func newFuseMount(fd int, opts *fuse.MountOptions) (int, error) {
	fsfd, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen fuse: %w", err)
	}
	defer unix.Close(fsfd)
	params := []string{
		"source=" + opts.FsName,
		"subtype=" + opts.Name,
		"fd=" + strconv.Itoa(fd),
		fmt.Sprintf("rootmode=%o", unix.S_IFDIR),
		"user_id=" + strconv.Itoa(os.Geteuid()),
		"group_id=" + strconv.Itoa(os.Getegid()),
		"max_read=" + strconv.Itoa(opts.MaxWrite),
	}
	params = append(params, opts.Options...)
	if opts.AllowOther {
		params = append(params, "allow_other")
	}
	for _, param := range params {
		if key, value, ok := strings.Cut(param, "="); ok {
			err = unix.FsconfigSetString(fsfd, key, value)
		} else {
			err = unix.FsconfigSetFlag(fsfd, key)
		}
		if err != nil {
			return -1, fmt.Errorf("fsconfig %s: %w", param, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, hostMountAttrs)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return mnt, nil
}

// onDir checks that the mount mnt sits on p.Dir itself, not on another
// mount made on the directory.
func (p *MountPoint) onDir(mnt int) error {
	ours, err := mountinfo.Of(mnt)
	if err != nil {
		return err
	}
	dir, err := mountinfo.Of(int(p.Dir.Fd()))
	if err != nil {
		return err
	}
	if ours.Parent != dir.ID {
		return ErrMountPoint
	}
	return nil
}

// fdPath names the file fd refers to: the magic link /proc/self/fd/N,
// which a path lookup that follows it resolves to that very file (and
// mount), wherever it is now.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// own opens (O_PATH) what the directory shows now, looked up in the
// parent by name, if that is the root of the mount made through p; else
// it returns ErrMountGone. The descriptor holds that mount: its id and its
// place cannot go to another while it is open.
func (p *MountPoint) own() (int, error) {
	fd, err := unix.Openat(int(p.Parent.Fd()), p.Name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return -1, ErrMountGone
	case err != nil:
		return -1, err
	}
	id, err := mountinfo.UniqueID(fd)
	if err == nil && id != p.id {
		err = ErrMountGone
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openRoot opens the root of the mount made through p (ErrMountGone if
// the directory no longer shows it).
func (p *MountPoint) openRoot() (int, error) {
	fd, err := p.own()
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	return unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// unmount detaches the mount made through p, named by a descriptor of
// the mount itself, not by path. If the directory no longer shows it
// (someone else unmounted it, or mounted another file system over it),
// it unmounts nothing and returns ErrMountGone: the mount shown is not
// computerd's, and computerd's, if it is still held or covered, cannot be
// detached without what is on it.
//
// It always detaches (MNT_DETACH): the descriptor that names the mount
// holds it, which makes a plain unmount busy. The mount goes once its
// last user lets go (unmountServer aborts a connection still held after
// abortGrace).
func (p *MountPoint) unmount() error {
	fd, err := p.own()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Unmount(fdPath(fd), unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount: %w", err)
	}
	return nil
}

// UnmountStale detaches the mount that a process that died left at dir
// (absolute, with no symlink on the way), if dir still shows it: the
// mount whose unique id is id (MountPoint.ID), or for id 0 (the process
// died while it mounted, or recorded no ids) any computerd FUSE mount. It
// reports whether it detached one. With nothing mounted at dir it does
// nothing; with another mount there it does nothing and returns
// ErrMountGone.
func UnmountStale(dir string, id uint64) (bool, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return false, nil
	case err != nil:
		return false, err
	}
	defer unix.Close(fd)
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, 0, &stx); err != nil {
		return false, err
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, nil // nothing is mounted there
	}
	if id != 0 {
		got, err := mountinfo.UniqueID(fd)
		if err != nil {
			return false, err
		}
		if got != id {
			return false, ErrMountGone
		}
	} else {
		m, err := mountinfo.Of(fd)
		if err != nil {
			return false, err
		}
		if m.FSType != "fuse."+mountName {
			return false, ErrMountGone
		}
	}
	if err := unix.Unmount(fdPath(fd), unix.MNT_DETACH); err != nil {
		return false, fmt.Errorf("fusefs: unmount stale %s: %w", dir, err)
	}
	return true, nil
}

// pollHack has go-fuse answer the kernel's first poll request now, as
// its own mount does (fuse.Server.WaitMount), so that none comes later
// while the runtime's poller holds a thread the server needs.
func pollHack(root int) {
	fd, err := unix.Openat(root, ".go-fuse-epoll-hack", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
}

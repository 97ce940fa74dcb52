package fusefs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// MountPoint is a directory opened for a mount, with its parent. A mount
// made through it (Options.At) lands on that very directory and is
// removed through the parent by name, never by walking the directory's
// path again: whoever may write to a directory on that path cannot swap a
// component for a symlink between the checks made on the directory and
// the mount, and so cannot send the mount (or the unmount) elsewhere.
type MountPoint struct {
	// Dir is the directory, opened for reading (it may be O_PATH).
	Dir *os.File
	// Parent is the directory that holds Dir, as Name.
	Parent *os.File
	Name   string
}

// Close closes both descriptors.
func (p *MountPoint) Close() error {
	return errors.Join(p.Dir.Close(), p.Parent.Close())
}

// hostMountFlags are the flags of every mount of a workspace: its files
// are the tenant's, so a set-user-id bit or a device node in them must
// give no one anything on the host.
const hostMountFlags = unix.MS_NOSUID | unix.MS_NODEV

// mount mounts a new FUSE connection on p.Dir and returns the magic
// "/dev/fd/N" name of the connection's descriptor, which go-fuse's
// NewServer takes in place of a mount point (it then mounts nothing
// itself). The mount options are those go-fuse's direct mount would pass.
func (p *MountPoint) mount(opts *fuse.MountOptions) (string, error) {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open /dev/fuse: %w", err)
	}
	data := []string{
		"fd=" + strconv.Itoa(fd),
		fmt.Sprintf("rootmode=%o", unix.S_IFDIR),
		"user_id=" + strconv.Itoa(os.Geteuid()),
		"group_id=" + strconv.Itoa(os.Getegid()),
		"max_read=" + strconv.Itoa(opts.MaxWrite),
	}
	data = append(data, opts.Options...)
	if opts.AllowOther {
		data = append(data, "allow_other")
	}
	target := "/proc/self/fd/" + strconv.Itoa(int(p.Dir.Fd()))
	if err := unix.Mount(opts.FsName, target, "fuse."+opts.Name, hostMountFlags, strings.Join(data, ",")); err != nil {
		unix.Close(fd)
		return "", fmt.Errorf("mount: %w", err)
	}
	return "/dev/fd/" + strconv.Itoa(fd), nil
}

// openRoot opens the root of what is mounted on the directory: looking
// its name up in the parent crosses onto the mount.
func (p *MountPoint) openRoot() (int, error) {
	return unix.Openat(int(p.Parent.Fd()), p.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// unmount unmounts what is mounted on the directory (flags: 0 or
// unix.MNT_DETACH); a symlink put in its place is not followed.
func (p *MountPoint) unmount(flags int) error {
	return unix.Unmount("/proc/self/fd/"+strconv.Itoa(int(p.Parent.Fd()))+"/"+p.Name, flags|unix.UMOUNT_NOFOLLOW)
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

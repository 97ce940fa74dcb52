// Package mountinfo reads this process's mount table: where each mount is
// and what file system it is.
package mountinfo

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoUniqueID: the kernel gives no unique mount ids (before Linux 6.8).
var ErrNoUniqueID = errors.New("mountinfo: the kernel gives no unique mount ids (statx STATX_MNT_ID_UNIQUE, Linux 6.8)")

// Mount is one line of the table.
type Mount struct {
	ID     int    // the mount's id (statx STATX_MNT_ID; given again once the mount is gone)
	Parent int    // the id of the mount it is mounted on
	Point  string // the mount point, unescaped
	FSType string // "ext4", "fuse.computerd", "tmpfs", ...
	Dev    uint64 // the file system's device number (st_dev of its files)
}

// Read returns the mounts of the calling thread's mount namespace, in the
// table's order (a mount stacked on another comes after it).
//
// It reads /proc/thread-self, not /proc/self, which is the main thread's
// view: libcontainer moves a thread it has locked into a container's mount
// namespace and counts on the thread ending with its goroutine, but the
// runtime cannot end the main thread, so when that goroutine ran there the
// main thread stays behind in the (dead) container's namespace. Threads
// that run unlocked goroutines are all in the process's own.
func Read() ([]Mount, error) {
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, err
	}
	var mounts []Mount
	for _, line := range strings.Split(string(data), "\n") {
		// ID parent major:minor root point options [optional...] - fstype source super
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		m := Mount{Point: unescape(f[4]), Dev: parseDev(f[2])}
		m.ID, _ = strconv.Atoi(f[0])
		m.Parent, _ = strconv.Atoi(f[1])
		for i := 6; i < len(f)-1; i++ {
			if f[i] == "-" {
				m.FSType = f[i+1]
				break
			}
		}
		mounts = append(mounts, m)
	}
	return mounts, nil
}

// UniqueID returns the unique id of the mount the file fd is on: unlike
// the table's ids, which the kernel gives again once a mount is gone, it
// names no other mount while the host runs. The file system is not asked
// (AT_STATX_DONT_SYNC), so a FUSE mount whose server is not answering
// (not yet, or no longer) does not hold the call.
func UniqueID(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0, ErrNoUniqueID
	}
	return stx.Mnt_id, nil
}

// Of returns the line of the mount the file fd is on. The file system is
// not asked, as by UniqueID.
func Of(fd int) (Mount, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &stx); err != nil {
		return Mount{}, err
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return Mount{}, errors.New("mountinfo: the kernel gives no mount ids (statx STATX_MNT_ID, Linux 5.8)")
	}
	mounts, err := Read()
	if err != nil {
		return Mount{}, err
	}
	for _, m := range mounts {
		if m.ID == int(stx.Mnt_id) {
			return m, nil
		}
	}
	return Mount{}, fmt.Errorf("mountinfo: mount %d is not in the table: %w", stx.Mnt_id, os.ErrNotExist)
}

// Under returns the mount points at dir or beneath it, deepest first (in
// the order they can be unmounted).
func Under(dir string) ([]string, error) {
	mounts, err := MountsUnder(dir)
	if err != nil {
		return nil, err
	}
	points := make([]string, len(mounts))
	for i, m := range mounts {
		points[i] = m.Point
	}
	return points, nil
}

// MountsUnder returns the mounts at dir or beneath it, deepest first.
func MountsUnder(dir string) ([]Mount, error) {
	mounts, err := Read()
	if err != nil {
		return nil, err
	}
	var under []Mount
	for i := len(mounts) - 1; i >= 0; i-- {
		if p := mounts[i].Point; p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") {
			under = append(under, mounts[i])
		}
	}
	return under, nil
}

// parseDev reads a "major:minor" device number (0 if it is not one).
func parseDev(s string) uint64 {
	maj, min, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0
	}
	return unix.Mkdev(uint32(a), uint32(b))
}

// unescape undoes the table's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

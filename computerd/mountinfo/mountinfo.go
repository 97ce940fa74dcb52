// Package mountinfo reads this process's mount table: where each mount is
// and what file system it is.
package mountinfo

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of the table.
type Mount struct {
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

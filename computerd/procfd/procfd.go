// Package procfd lists this process's open file descriptors, from
// /proc/self/fd.
package procfd

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Inheritable returns the open descriptors that are not close-on-exec:
// those a program this process executes, or a child it starts, would keep.
// (The Go runtime opens all of its own close-on-exec.)
func Inheritable() []int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			fds = append(fds, fd)
		}
	}
	return fds
}

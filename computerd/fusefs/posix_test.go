package fusefs_test

import (
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"computerd/computerd/fusefs"
)

// TestPosix runs go-fuse's POSIX suite, each case on a fresh mount.
func TestPosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if name == "FcntlFlockLocksFile" {
				// It wants two descriptors of one process to conflict over an
				// fcntl lock; POSIX record locks belong to the process, and the
				// kernel (which keeps the mount's locks) does just that.
				// TestLocks checks flock and OFD locks, which do conflict.
				t.Skip("expects non-POSIX fcntl lock semantics")
			}
			st := MustStore(t)
			w := MustWorkspace(t, st, "w")
			_, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
			posixtest.All[name](t, dir)
		})
	}
}

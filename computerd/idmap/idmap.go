// Package idmap is the range of host user and group ids a sandbox's user
// namespace maps: root in a container is host id Base, container id i is
// host id Base+i for i below Size, and no other host id exists inside.
// The same range idmaps the mounts a container writes through (its
// /workspace), so that what the container's root creates is stored as
// owned by 0, and what the store says is owned by 1000 shows inside as
// 1000. A daemon claims its range on the host for as long as it runs
// (Claim), so that no two daemons' containers share host ids.
// docs/SANDBOX.md describes the choice.
package idmap

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Range is a block of host ids (the same for uids and gids).
type Range struct {
	Base uint32 // the host id of the container's 0
	Size uint32 // how many ids are mapped
}

// DefaultBase is the default Range's first host id: far above the ids
// that distributions hand out to users (below 60000) and to the
// subordinate ranges of rootless containers (from 100000 in steps of
// 65536), so that no host account owns it.
const DefaultBase = 1_000_000_000

// DefaultSize is the default Range's size: the 16-bit id space (0 to
// 65535) every distribution's accounts, nobody (65534) among them, live in.
const DefaultSize = 65536

// Default is the range used where none is configured.
var Default = Range{Base: DefaultBase, Size: DefaultSize}

// Errors of the package.
var (
	// ErrInvalid means a Range that maps host root or runs past the largest id.
	ErrInvalid = errors.New("idmap: invalid range")
	// ErrClaimed means a Range overlaps one that a live process holds (see
	// Claim); the error is a *ClaimedError that names the holder.
	ErrClaimed = errors.New("idmap: range claimed")
)

// Validate refuses a range that is empty, that would map host root (Base
// 0: the container's root would be the host's), or that runs past
// 4294967294 (4294967295 is the kernel's "no id").
func (r Range) Validate() error {
	if r.Size == 0 || r.Base == 0 || uint64(r.Base)+uint64(r.Size) > 1<<32-1 {
		return fmt.Errorf("%w: base %d, size %d", ErrInvalid, r.Base, r.Size)
	}
	return nil
}

// Or returns r, or d where r is the zero Range.
func (r Range) Or(d Range) Range {
	if r == (Range{}) {
		return d
	}
	return r
}

// Overlaps reports whether r and o share an id.
func (r Range) Overlaps(o Range) bool {
	return uint64(r.Base) < uint64(o.Base)+uint64(o.Size) && uint64(o.Base) < uint64(r.Base)+uint64(r.Size)
}

// Host returns the host id of container id, and whether it is mapped.
func (r Range) Host(id uint32) (uint32, bool) {
	if id >= r.Size {
		return 0, false
	}
	return r.Base + id, true
}

func (r Range) String() string { return fmt.Sprintf("%d+%d", r.Base, r.Size) }

var (
	usernsMu sync.Mutex
	userns   = map[Range]*os.File{}
)

// Userns returns a user namespace (a /proc/PID/ns/user file) whose uid
// and gid maps are r, for idmapped mounts (mount_setattr's
// MOUNT_ATTR_IDMAP). One namespace per range is made per process, kept
// open for its life and shared: do not close it.
func (r Range) Userns() (*os.File, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	usernsMu.Lock()
	defer usernsMu.Unlock()
	if f := userns[r]; f != nil {
		return f, nil
	}
	f, err := newUserns(r)
	if err != nil {
		return nil, err
	}
	userns[r] = f
	return f, nil
}

// newUserns makes a user namespace with the maps of r: a child is cloned
// into a new one, the maps are written, and its namespace file is kept
// once the child is gone. The child never runs anything: traced from its
// start, it stops at its exec (of this binary), and is killed there.
func newUserns(r Range) (*os.File, error) {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Base), Size: int(r.Size)}}
	p, err := os.StartProcess("/proc/self/exe", []string{"idmap"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: m,
		GidMappings: m,
		Ptrace:      true,
		Pdeathsig:   syscall.SIGKILL,
	}})
	if err != nil {
		return nil, fmt.Errorf("idmap: user namespace for %s: %w", r, err)
	}
	defer func() {
		_ = p.Kill()
		_, _ = p.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", p.Pid))
	if err != nil {
		return nil, fmt.Errorf("idmap: user namespace for %s: %w", r, err)
	}
	return f, nil
}

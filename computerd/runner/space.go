package runner

import (
	"context"
	"fmt"

	"computerd/computerd/loopfs"
	"computerd/core"
)

// diskReserve is the space of the data directory's file system that
// execs' upper layers leave to the store: 1% of the file system, at least
// 16 MiB and at most 1 GiB (SQLite's journal, the output logs, a few
// commits of the API's).
func diskReserve(size int64) int64 { return min(max(size/100, 16<<20), 1<<30) }

// writeBound is the size of the volume an exec of tenant writes to
// (Options.UpperSize): the least of MaxWrite, what the tenant's byte
// quota leaves, and half of what the disk has free beyond diskReserve (the
// other half is for the store to commit what the exec wrote), rounded
// down to a loopfs.SizeClass. A tenant at its quota still gets the
// smallest volume (loopfs.MinSize), so commands that write little (or
// only read) still run. A disk too full for even that refuses the exec
// with core.ErrNoSpace. On an executor the quota is the home's, which
// meters the push: the local store only mirrors.
func (r *Runner) writeBound(ctx context.Context, tenant string) (int64, error) {
	left := r.MaxWrite
	if r.Remote == nil {
		var err error
		if left, err = r.Store.Remaining(ctx, tenant); err != nil {
			return 0, err
		}
	}
	free, size, err := r.Store.DiskSpace()
	if err != nil {
		return 0, err
	}
	room := (free - diskReserve(size)) / 2
	if room < loopfs.MinSize {
		return 0, fmt.Errorf("exec: the data directory's file system has %d bytes free, too little for an exec's writes: %w", free, core.ErrNoSpace)
	}
	return loopfs.SizeClass(min(r.MaxWrite, max(left, 0), room)), nil
}

// poolRoom lets the pool keep one more volume of size ready while the
// disk has four times that free beyond diskReserve: ready volumes take
// their space whether or not an exec comes.
func (r *Runner) poolRoom(size int64) bool {
	free, total, err := r.Store.DiskSpace()
	return err == nil && free-diskReserve(total) >= 4*size
}

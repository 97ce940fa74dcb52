package runner

import (
	"context"
	"fmt"
	"sync"

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
//
// The size is promised to the exec until unpromise is called (once its
// volume exists, and the disk's free space shows it): execs that start
// together each see the space the others were promised as taken, so they
// cannot all take half of the same free space.
func (r *Runner) writeBound(ctx context.Context, tenant string) (size int64, unpromise func(), err error) {
	left := r.MaxWrite
	if r.Remote == nil {
		if left, err = r.Store.Remaining(ctx, tenant); err != nil {
			return 0, nil, err
		}
	}
	r.spaceMu.Lock()
	defer r.spaceMu.Unlock()
	free, total, err := r.freeSpace()
	if err != nil {
		return 0, nil, err
	}
	room := (free - diskReserve(total)) / 2
	if room < loopfs.MinSize {
		return 0, nil, fmt.Errorf("exec: the data directory's file system has %d bytes free (less what running execs are making their volumes of), too little for an exec's writes: %w", free, core.ErrNoSpace)
	}
	size = loopfs.SizeClass(min(r.MaxWrite, max(left, 0), room))
	r.promised += size
	var once sync.Once
	return size, func() {
		once.Do(func() {
			r.spaceMu.Lock()
			r.promised -= size
			r.spaceMu.Unlock()
		})
	}, nil
}

// freeSpace is the data directory's free space, less what execs were
// promised and have not yet taken, and its file system's size. Call it
// with spaceMu held.
func (r *Runner) freeSpace() (free, total int64, err error) {
	free, total, err = r.Store.DiskSpace()
	return free - r.promised, total, err
}

// poolRoom lets the pool keep one more volume of size ready while the
// disk has four times that free beyond diskReserve: ready volumes take
// their space whether or not an exec comes.
func (r *Runner) poolRoom(size int64) bool {
	r.spaceMu.Lock()
	defer r.spaceMu.Unlock()
	free, total, err := r.freeSpace()
	return err == nil && free-diskReserve(total) >= 4*size
}

package fsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"computerd/core"
)

func pathErr(op, p string, err error) error { return &core.PathError{Op: op, Path: p, Err: err} }

// SQLite's primary result codes that say the disk let a write down.
const (
	sqliteIOErr = 10 // SQLITE_IOERR (and its extended codes)
	sqliteFull  = 13 // SQLITE_FULL
)

// lowSpace is the free space under which an I/O error of SQLite's counts
// as the file system being full: SQLite reports ENOSPC as SQLITE_FULL
// from a write, but as a plain I/O error from the calls that grow a file
// (the WAL's size hint, the shared-memory file).
const lowSpace = 1 << 20

// noSpace marks err with core.ErrNoSpace when it comes from a full file
// system: SQLite's SQLITE_FULL, ENOSPC or EDQUOT, or an I/O error of
// SQLite's while the data directory has less than lowSpace free. Every
// write transaction's error passes through it, so callers classify a full
// disk with errors.Is alone.
func (s *Store) noSpace(err error) error {
	if err == nil || errors.Is(err, core.ErrNoSpace) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", core.ErrNoSpace, err)
	}
	var coded interface{ Code() int }
	if !errors.As(err, &coded) {
		return err
	}
	switch coded.Code() & 0xff {
	case sqliteFull:
		return fmt.Errorf("%w: %w", core.ErrNoSpace, err)
	case sqliteIOErr:
		if free, _, ferr := s.DiskSpace(); ferr == nil && free < lowSpace {
			return fmt.Errorf("%w: %w", core.ErrNoSpace, err)
		}
	}
	return err
}

// The reserve is a file of reserveSize that the store keeps in its data
// directory while the disk has room, and gives up when it opens on a full
// disk: SQLite cannot open a database in WAL mode without a few pages free
// (the first connection sizes its shared-memory file anew, and fails with
// an I/O error), so the store could otherwise not start again until
// something else freed space. It also leaves room for the first writes
// after such a start.
const (
	reserveName = "reserve"
	reserveSize = 8 << 20
)

// releaseReserve removes the reserve when the disk is nearly full.
func (s *Store) releaseReserve() {
	if free, _, err := s.DiskSpace(); err == nil && free < reserveSize {
		os.Remove(filepath.Join(s.Dir, reserveName))
	}
}

// KeepReserve makes the reserve again, if it is missing and the disk has
// four times its size free (Open does, and each retention pass).
func (s *Store) KeepReserve() {
	p := filepath.Join(s.Dir, reserveName)
	if _, err := os.Stat(p); err == nil {
		return
	}
	if free, _, err := s.DiskSpace(); err != nil || free < 4*reserveSize {
		return
	}
	f, err := os.OpenFile(p+".new", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	err = syscall.Fallocate(int(f.Fd()), 0, 0, reserveSize)
	if cerr := f.Close(); err == nil && cerr == nil {
		os.Rename(p+".new", p)
	} else {
		os.Remove(p + ".new")
	}
}

// DiskSpace is the space left to unprivileged users on the data
// directory's file system, and its size, in bytes.
func (s *Store) DiskSpace() (free, size int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.Dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", s.Dir, err)
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

package fsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"computerd/core"
)

// errShared is what a shared store (Store.Shared) answers to every write
// but a token's: only the store holding the lock may write trees or chunks,
// or collect them, since GC's leases live in that store's memory.
var errShared = errors.New("a store opened beside the data directory's holder writes tokens only")

// dirLock is the data directory's lock: DIR/lock, held with flock(2) by the
// one Store open on the directory. flock belongs to the open file, so a
// second Store is refused in the same process as surely as in another, and
// the kernel drops the lock when its holder dies, even by SIGKILL.
type dirLock struct{ f *os.File }

// lockDir takes dir's lock, or says who holds it. The holder writes its pid
// and owner into the file, so that the refusal can name them.
func lockDir(dir, owner string) (*dirLock, error) {
	p := filepath.Join(dir, "lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
		}
		holder := "another process"
		if b, rerr := os.ReadFile(p); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("data dir %s is held by %s; stop it first (or go through its API): %w", dir, holder, core.ErrLocked)
	}
	// Best effort: the lock itself is the flock, not these words.
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d (%s)\n", os.Getpid(), owner)
	}
	return &dirLock{f: f}, nil
}

// LockHolder returns the pid of the process that holds data directory
// dir's lock, as it wrote it in the lock file; held is false if no process
// holds it.
func LockHolder(dir string) (pid int, held bool, err error) {
	p := filepath.Join(dir, "lock")
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return 0, false, nil
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		return 0, false, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, true, err
	}
	if _, err := fmt.Sscanf(string(b), "pid %d", &pid); err != nil {
		return 0, true, fmt.Errorf("lock file %s names no pid", p)
	}
	return pid, true, nil
}

// unlock releases the lock. The file stays: removing it would let a
// second Store lock a fresh file while a third still holds the old one.
func (l *dirLock) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.f.Truncate(0)
	err := l.f.Close()
	l.f = nil
	return err
}

// defaultOwner names the process for Store.Owner's default.
func defaultOwner() string {
	name := filepath.Base(os.Args[0])
	if len(os.Args) > 1 {
		name += " " + os.Args[1]
	}
	return name
}

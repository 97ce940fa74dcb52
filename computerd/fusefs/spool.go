package fusefs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// spool holds the dirty chunks of every file a mount has written and not
// yet committed, in one sparse temporary file of chunk-sized slots, so
// memory does not grow with file size and one descriptor serves them all.
//
// The mount calls its methods with its lock held, except readAt, which a
// commit also calls without it (preUpload): each change to a slot's bytes
// or owner moves its generation (gen), so what was read without the lock
// is used only if the slot's generation is still the one read.
type spool struct {
	f     *os.File
	size  int64 // chunk size: bytes per slot
	next  int64 // slots [0, next) have been handed out
	free  []int64
	inUse int
	gens  []uint64 // by slot
}

func newSpool(dir string, chunk int64) (*spool, error) {
	f, err := os.CreateTemp(dir, "computerd-fuse-spool-*")
	if err != nil {
		return nil, fmt.Errorf("create spool: %w", err)
	}
	// Unlinked at once: a crash leaves nothing behind.
	os.Remove(f.Name())
	return &spool{f: f, size: chunk}, nil
}

// alloc returns a slot. Unless the caller is about to overwrite all of it
// (whole), the slot reads as zeros; freed slots are cleared only here, so
// that sequential writers, which fill whole slots, never pay for it.
func (s *spool) alloc(whole bool) int64 {
	s.inUse++
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		s.gens[slot]++
		if !whole {
			s.zero(slot, 0, s.size)
		}
		return slot
	}
	s.next++
	if int64(len(s.gens)) < s.next {
		s.gens = append(s.gens, 0)
	}
	s.gens[s.next-1]++
	return s.next - 1
}

// gen is slot's generation: it moves with every change of its bytes and
// every alloc and release.
func (s *spool) gen(slot int64) uint64 { return s.gens[slot] }

// release returns a slot; its bytes are garbage until alloc clears them.
func (s *spool) release(slot int64) {
	s.gens[slot]++
	s.inUse--
	if s.inUse == 0 {
		// Everything is free: start over with an empty file.
		s.free, s.next = s.free[:0], 0
		s.f.Truncate(0)
		return
	}
	s.free = append(s.free, slot)
}

// zero clears bytes [from, to) of a slot.
func (s *spool) zero(slot, from, to int64) {
	if to <= from {
		return
	}
	s.gens[slot]++
	off := slot*s.size + from
	if err := unix.Fallocate(int(s.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, to-from); err != nil {
		// No hole punching here: write zeros.
		buf := make([]byte, min(to-from, 64<<10))
		for off < slot*s.size+to {
			n := min(int64(len(buf)), slot*s.size+to-off)
			s.f.WriteAt(buf[:n], off)
			off += n
		}
	}
}

func (s *spool) readAt(slot int64, p []byte, off int64) error {
	n, err := s.f.ReadAt(p, slot*s.size+off)
	if n == len(p) {
		return nil
	}
	// Past the end of the spool file: a slot never written that far.
	clear(p[n:])
	if err != nil && n < len(p) && !isEOF(err) {
		return err
	}
	return nil
}

func (s *spool) writeAt(slot int64, p []byte, off int64) error {
	s.gens[slot]++
	_, err := s.f.WriteAt(p, slot*s.size+off)
	return err
}

func (s *spool) close() error { return s.f.Close() }

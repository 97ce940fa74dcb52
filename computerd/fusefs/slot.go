package fusefs

import (
	"errors"
	"io"
)

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// slotReader reads the first n bytes of a spool slot.
type slotReader struct {
	s      *spool
	slot   int64
	off, n int64
}

func newSlotReader(s *spool, slot, n int64) *slotReader { return &slotReader{s: s, slot: slot, n: n} }

func (r *slotReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), r.n-r.off)
	if err := r.s.readAt(r.slot, p[:k], r.off); err != nil {
		return 0, err
	}
	r.off += k
	return int(k), nil
}

package fsstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"computerd/core"
)

// OpSpool holds a sequence of ops too long to keep as a []core.Op: packed
// (see PackedOps) in memory up to a few MiB, in an unlinked temporary file
// in the store's directory beyond, and read back one at a time. A sync
// pull of a whole tree gathers its ops in one while its chunks stream
// out, since the ops travel after every chunk.
type OpSpool struct {
	sp  *spill
	seq uint64
	buf []byte
}

// NewOpSpool returns an empty spool; Close it when done.
func (s *Store) NewOpSpool() *OpSpool {
	sp := newSpill(s.Dir)
	sp.inOrder = true
	return &OpSpool{sp: sp}
}

// newSortedOpSpool returns an empty spool that gives its ops back by the
// keys they are added with (see add).
func newSortedOpSpool(dir string) *OpSpool { return &OpSpool{sp: newSpill(dir)} }

// Len returns how many ops o holds.
func (o *OpSpool) Len() int { return o.sp.len() }

// Add appends op, which must be of a kind a changeset holds.
func (o *OpSpool) Add(op core.Op) error {
	if !o.sp.inOrder {
		return errors.New("OpSpool: Add to a sorted spool")
	}
	return o.add(nil, op)
}

// add appends op, ordered by key and then by when it was added. A record
// is the key, the order it was added in (8 bytes), the packed op and the
// length of the key and order (4 bytes): records compare by key and order
// alone, since no two share an order.
func (o *OpSpool) add(key []byte, op core.Op) error {
	if _, ok := packedCode[op.Kind]; !ok {
		return fmt.Errorf("op %q: %w", op.Kind, core.ErrInvalidArgument)
	}
	b := append(o.buf[:0], key...)
	b = binary.BigEndian.AppendUint64(b, o.seq)
	o.seq++
	n := len(b)
	b = appendOp(b, op)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	o.buf = b
	return o.sp.add(b)
}

// Each calls fn with each op in order (by key, then as added, for a
// diff's spool). Adding is over once Each has been called; Each may be
// called again.
func (o *OpSpool) Each(fn func(core.Op) error) error {
	return o.sp.each(func(rec []byte) error {
		n := binary.BigEndian.Uint32(rec[len(rec)-4:])
		op, _ := readOp(rec[n : len(rec)-4])
		return fn(op)
	})
}

// Close releases the spool's file, if it has one.
func (o *OpSpool) Close() { o.sp.close() }

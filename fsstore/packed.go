package fsstore

import (
	"encoding/binary"
	"fmt"
	"io/fs"

	"computerd/core"
)

// PackedOps is a list of ops held in a compact binary form, about a third
// of what a []core.Op of the same ops takes (a create of a small file: ~90
// bytes rather than ~270), for the changesets a sync push brings: the
// home checks each op as it arrives and applies them with
// ApplyOrKeepPacked, never holding them as a []core.Op.
type PackedOps struct {
	blocks [][]byte // filled in order; a block never moves once written
	index  []uint64 // op i starts at blocks[index[i]>>32][uint32(index[i]):]
}

// packedBlock is the size of one block of packed ops.
const packedBlock = 1 << 20

// Len returns how many ops p holds.
func (p *PackedOps) Len() int { return len(p.index) }

// Add checks op as a commit would (paths, kind, sizes) and appends it
// with its paths cleaned.
func (p *PackedOps) Add(op core.Op) error {
	op, err := cleanOp(op)
	if err != nil {
		return err
	}
	b := appendOp(nil, op)
	if len(b) > packedBlock {
		return fmt.Errorf("op %s %q of %d bytes: %w", op.Kind, op.Path, len(b), core.ErrInvalidArgument)
	}
	if len(p.blocks) == 0 || len(p.blocks[len(p.blocks)-1])+len(b) > packedBlock {
		p.blocks = append(p.blocks, make([]byte, 0, packedBlock))
	}
	last := len(p.blocks) - 1
	p.index = append(p.index, uint64(last)<<32|uint64(len(p.blocks[last])))
	p.blocks[last] = append(p.blocks[last], b...)
	return nil
}

// Op returns op i.
func (p *PackedOps) Op(i int) core.Op {
	at := p.index[i]
	op, _ := readOp(p.blocks[at>>32][uint32(at):])
	return op
}

// Each calls fn with each op of p, in order, unpacked one at a time.
func (p *PackedOps) Each(fn func(core.Op) error) error {
	for i := range p.Len() {
		if err := fn(p.Op(i)); err != nil {
			return err
		}
	}
	return nil
}

// Identify notes the row id row(hash) gives in each chunk ref of p that
// has none (see Uploader.Identify).
func (p *PackedOps) Identify(row func(core.Hash) (int64, bool)) {
	for _, at := range p.index {
		b := p.blocks[at>>32][uint32(at):]
		op, rows := readOp(b)
		if op.Content == nil {
			continue
		}
		for i, ref := range op.Content.Chunks {
			if ref.Row != 0 {
				continue
			}
			if id, ok := row(ref.Hash); ok {
				binary.LittleEndian.PutUint64(b[rows[i]:], uint64(id))
			}
		}
	}
}

// Slice returns p's ops as a slice.
func (p *PackedOps) Slice() []core.Op {
	out := make([]core.Op, p.Len())
	for i := range out {
		out[i] = p.Op(i)
	}
	return out
}

// opList is what the changeset code reads ops from: a []core.Op or PackedOps.
type opList interface {
	Len() int
	Op(i int) core.Op
}

// sliceOps is a []core.Op as an opList.
type sliceOps []core.Op

func (s sliceOps) Len() int         { return len(s) }
func (s sliceOps) Op(i int) core.Op { return s[i] }

// The packed form of an op: its kind's code, then flags, then the fields
// it has, varint-coded; a chunk ref is its index, its 32-byte hash, its
// length and its row id as 8 fixed bytes (so Identify can set it in place).
const (
	packedFrom = 1 << iota
	packedTarget
	packedData
	packedContent
	packedNoReplace
	packedExchange
	packedRdev
)

var (
	packedKinds = []core.OpKind{core.OpMkdir, core.OpCreate, core.OpWrite, core.OpTruncate, core.OpSymlink, core.OpLink,
		core.OpRename, core.OpDelete, core.OpDeleteAll, core.OpChmod, core.OpChown, core.OpUtimes, core.OpMknod}
	packedCode = func() map[core.OpKind]byte {
		m := map[core.OpKind]byte{}
		for i, k := range packedKinds {
			m[k] = byte(i)
		}
		return m
	}()
)

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendOp appends the packed form of op, which cleanOp has checked.
func appendOp(b []byte, op core.Op) []byte {
	var flags byte
	if op.From != "" {
		flags |= packedFrom
	}
	if op.Target != "" {
		flags |= packedTarget
	}
	if op.Data != nil {
		flags |= packedData
	}
	if op.Content != nil {
		flags |= packedContent
	}
	if op.NoReplace {
		flags |= packedNoReplace
	}
	if op.Exchange {
		flags |= packedExchange
	}
	if op.Rdev != 0 {
		flags |= packedRdev
	}
	b = append(b, packedCode[op.Kind], flags)
	b = appendString(b, op.Path)
	if op.From != "" {
		b = appendString(b, op.From)
	}
	if op.Target != "" {
		b = appendString(b, op.Target)
	}
	b = binary.AppendUvarint(b, uint64(op.Mode))
	b = binary.AppendUvarint(b, uint64(op.UID))
	b = binary.AppendUvarint(b, uint64(op.GID))
	b = binary.AppendVarint(b, op.Mtime)
	b = binary.AppendVarint(b, op.Offset)
	b = binary.AppendVarint(b, op.Size)
	if op.Rdev != 0 {
		b = binary.AppendUvarint(b, op.Rdev)
	}
	if op.Data != nil {
		b = appendString(b, string(op.Data))
	}
	if c := op.Content; c != nil {
		b = binary.AppendVarint(b, c.Size)
		b = binary.AppendUvarint(b, uint64(len(c.Chunks)))
		for _, r := range c.Chunks {
			b = binary.AppendVarint(b, r.Index)
			b = append(b, r.Hash[:]...)
			b = binary.AppendUvarint(b, uint64(r.Len))
			b = binary.LittleEndian.AppendUint64(b, uint64(r.Row))
		}
	}
	return b
}

// packedReader reads the fields appendOp wrote.
type packedReader struct {
	b   []byte
	off int
}

func (r *packedReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b[r.off:])
	r.off += n
	return v
}

func (r *packedReader) varint() int64 {
	v, n := binary.Varint(r.b[r.off:])
	r.off += n
	return v
}

func (r *packedReader) string() string {
	n := int(r.uvarint())
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s
}

// readOp decodes the op at the start of b, and the offsets in b of its
// chunk refs' row ids.
func readOp(b []byte) (core.Op, []int) {
	r := &packedReader{b: b, off: 2}
	op := core.Op{Kind: packedKinds[b[0]]}
	flags := b[1]
	op.Path = r.string()
	if flags&packedFrom != 0 {
		op.From = r.string()
	}
	if flags&packedTarget != 0 {
		op.Target = r.string()
	}
	op.Mode = fs.FileMode(r.uvarint())
	op.UID = uint32(r.uvarint())
	op.GID = uint32(r.uvarint())
	op.Mtime = r.varint()
	op.Offset = r.varint()
	op.Size = r.varint()
	op.NoReplace = flags&packedNoReplace != 0
	op.Exchange = flags&packedExchange != 0
	if flags&packedRdev != 0 {
		op.Rdev = r.uvarint()
	}
	if flags&packedData != 0 {
		op.Data = []byte(r.string())
	}
	var rows []int
	if flags&packedContent != 0 {
		c := &core.Content{Size: r.varint()}
		c.Chunks = make([]core.ChunkRef, r.uvarint())
		for i := range c.Chunks {
			ref := &c.Chunks[i]
			ref.Index = r.varint()
			copy(ref.Hash[:], b[r.off:])
			r.off += 32
			ref.Len = int(r.uvarint())
			ref.Row = int64(binary.LittleEndian.Uint64(b[r.off:]))
			rows = append(rows, r.off)
			r.off += 8
		}
		op.Content = c
	}
	return op, rows
}

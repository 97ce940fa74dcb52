// Package syncproto carries changesets between a home computerd and its
// executors (docs/SYNC.md): a framed binary stream of a header, chunks and
// one changeset, pull and push handlers for the home, and a client for the
// executor. The changeset itself is core.Changeset; this package only
// encodes, decodes and transports it.
package syncproto

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// Version is the protocol version this build speaks. Version 2: a
// conflicting push is kept at the home and answered as such (PushResult),
// where version 1 refused it with 409. Version 3: changesets may hold
// special files (mknod ops, device numbers), which version 2 refuses.
// Version 4: pulls and pushes name the home workspace by id, and a push
// whose base is gone is answered BaseGone (a version 3 executor would
// take that answer for an applied push) and sent again whole.
const Version = 4

// HeaderVersion carries the protocol version on every request and answer.
const HeaderVersion = "Computerd-Sync-Version"

// Frame kinds. A stream is: Header, any number of Chunks, one or more
// Changeset frames (each a part of the changeset's ops), End.
const (
	KindHeader    byte = 'H' // JSON: PullHeader or PushHeader
	KindChunk     byte = 'C' // 32-byte SHA-256, then the chunk's bytes
	KindChangeset byte = 'S' // JSON: core.Changeset holding a part of the ops
	KindEnd       byte = 'E' // JSON: Trailer
)

// Limits on frame sizes: a chunk frame holds at most MaxChunk bytes of data;
// a JSON frame at most MaxJSON, so decoding one costs a bounded amount of
// memory however large the changeset: a changeset travels in as many
// frames as its ops need.
const (
	MaxChunk = 16 << 20
	MaxJSON  = 1 << 20
)

// maxRefsPerOp bounds the chunk refs of one op on the wire (about 100
// bytes of JSON each), so that every op fits a frame: the content of a
// larger file travels as a create or write of its first maxRefsPerOp
// chunks followed by writes of the rest (see splitContent).
const maxRefsPerOp = 4096

// Errors of a stream. A stream that ends early is cut, not malformed: it
// says nothing of its content, only of the transport (a connection closed
// or reset, a body that stopped arriving), so the sender may send it again.
var (
	// ErrMalformed marks a stream that breaks the framing rules.
	ErrMalformed = errors.New("malformed sync stream")
	// ErrCut marks a stream that ended, or failed to read, before its
	// trailer; it wraps the read's own error (io.ErrUnexpectedEOF, a
	// deadline passing, a reset connection).
	ErrCut = errors.New("sync stream cut")
	// ErrUnreachable marks a call to the home that got no answer of the
	// home's own (refused, reset, cut, timed out, or answered by something
	// else on the way): a transport failure, which a retry may get past.
	// It is wire.ErrUnavailable to a caller of the executor's API (503).
	ErrUnreachable error = unreachable{}
)

type unreachable struct{}

func (unreachable) Error() string        { return "home unreachable" }
func (unreachable) Is(target error) bool { return target == wire.ErrUnavailable }

// Trailer ends a stream with totals the receiver checks.
type Trailer struct {
	Chunks int   `json:"chunks"`
	Bytes  int64 `json:"bytes"` // chunk data bytes
}

// Encoder writes a stream's frames.
type Encoder struct {
	w       *bufio.Writer
	state   int // 0: before header, 1: chunks, 2: after changeset, 3: ended
	trailer Trailer
}

// NewEncoder returns an encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: bufio.NewWriterSize(w, 256<<10)} }

func (e *Encoder) frame(kind byte, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(n))
	if _, err := e.w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := e.w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

func (e *Encoder) json(kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxJSON {
		return fmt.Errorf("sync: %c frame of %d bytes over the limit of %d", kind, len(b), MaxJSON)
	}
	return e.frame(kind, b)
}

// Header writes the first frame.
func (e *Encoder) Header(v any) error {
	if e.state != 0 {
		return errors.New("sync: header written twice")
	}
	e.state = 1
	return e.json(KindHeader, v)
}

// Chunk writes one chunk; chunks come before the changeset naming them.
func (e *Encoder) Chunk(h core.Hash, data []byte) error {
	if e.state != 1 {
		return errors.New("sync: chunk outside the chunk section")
	}
	if len(data) > MaxChunk {
		return fmt.Errorf("sync: chunk of %d bytes over the limit", len(data))
	}
	e.trailer.Chunks++
	e.trailer.Bytes += int64(len(data))
	return e.frame(KindChunk, h[:], data)
}

// Changeset writes the changeset, in as many frames as its ops need
// (at least one), each a JSON core.Changeset with From, To and a part of
// the ops, in order.
func (e *Encoder) Changeset(cs *core.Changeset) error {
	return e.ChangesetOf(cs.From, cs.To, eachOp(cs.Ops))
}

// ChangesetOf writes the changeset from..to whose ops each gives one at a
// time, in order (as fsstore's DiffStream.Each, OpSpool.Each and
// PackedOps.Each do), in frames as Changeset does: it holds one frame,
// never the changeset.
func (e *Encoder) ChangesetOf(from, to int64, each func(func(core.Op) error) error) error {
	if e.state != 1 {
		return errors.New("sync: changeset out of order")
	}
	e.state = 2
	open := fmt.Appendf(nil, `{"from":%d,"to":%d,"ops":[`, from, to)
	const closing = "]}"
	buf := append([]byte(nil), open...)
	ops := 0
	flush := func() error {
		buf = append(buf, closing...)
		err := e.frame(KindChangeset, buf)
		buf, ops = append(buf[:0], open...), 0
		return err
	}
	add := func(op core.Op) error {
		b, err := json.Marshal(op)
		if err != nil {
			return err
		}
		if len(open)+len(b)+len(closing) > MaxJSON {
			return fmt.Errorf("sync: op %s %q of %d bytes does not fit a frame", op.Kind, op.Path, len(b))
		}
		if len(buf)+1+len(b)+len(closing) > MaxJSON {
			if err := flush(); err != nil {
				return err
			}
		}
		if ops > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
		ops++
		return nil
	}
	err := each(func(op core.Op) error {
		for _, part := range splitContent(op) {
			if err := add(part); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// splitContent returns op as ops of at most maxRefsPerOp chunk refs each,
// with the same effect: a create or write of the first refs, then writes
// of the rest (an edit, which a changeset applies after every add, in
// order), then for a create with a time the time again, since a write
// sets a file's mtime to the commit's.
func splitContent(op core.Op) []core.Op {
	if op.Content == nil || len(op.Content.Chunks) <= maxRefsPerOp || (op.Kind != core.OpCreate && op.Kind != core.OpWrite) {
		return []core.Op{op}
	}
	refs := op.Content.Chunks
	first := op
	first.Content = &core.Content{Size: op.Content.Size, Chunks: refs[:maxRefsPerOp]}
	out := []core.Op{first}
	for rest := refs[maxRefsPerOp:]; len(rest) > 0; {
		n := min(len(rest), maxRefsPerOp)
		out = append(out, core.Op{Kind: core.OpWrite, Path: op.Path, Content: &core.Content{Chunks: rest[:n]}})
		rest = rest[n:]
	}
	if op.Kind == core.OpCreate && op.Mtime != 0 {
		out = append(out, core.Op{Kind: core.OpUtimes, Path: op.Path, Mtime: op.Mtime})
	}
	return out
}

// Close writes the trailer and flushes.
func (e *Encoder) Close() error {
	if e.state != 2 {
		return errors.New("sync: stream closed before its changeset")
	}
	e.state = 3
	if err := e.json(KindEnd, e.trailer); err != nil {
		return err
	}
	return e.w.Flush()
}

// Decoder reads and checks a stream: frame order, sizes, chunk hashes and
// the trailer's totals. It holds one frame at a time; the changeset's ops
// are gathered from its frames as they come.
type Decoder struct {
	r       *bufio.Reader
	state   int
	buf     []byte
	counted Trailer
}

// Received is a changeset as a stream brings it: its ops packed
// (fsstore.PackedOps), each checked as it came.
type Received struct {
	From, To int64
	Ops      *fsstore.PackedOps
}

// Changeset returns r with its ops unpacked.
func (r *Received) Changeset() *core.Changeset {
	return &core.Changeset{From: r.From, To: r.To, Ops: r.Ops.Slice()}
}

// addOp checks an op as it arrives and packs it: an op no commit would
// take, or one with inline data (a changeset's content travels as
// chunks), makes the stream malformed.
func addOp(ops *fsstore.PackedOps, op core.Op) error {
	if op.Data != nil {
		return malformed("changeset op %s %q carries inline data; content travels as chunks", op.Kind, op.Path)
	}
	if err := ops.Add(op); err != nil {
		return malformed("changeset op: %v", err)
	}
	return nil
}

// NewDecoder returns a decoder reading from r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: bufio.NewReaderSize(r, 256<<10)} }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// cut is ErrCut at where, keeping the read's error (its cause: a deadline,
// a reset) for errors.Is and errors.As.
func cut(where string, err error) error {
	return fmt.Errorf("%w %s: %w", ErrCut, where, err)
}

// next reads one frame; the payload is valid until the next call.
func (d *Decoder) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, cut("before its trailer", io.ErrUnexpectedEOF)
		}
		return 0, nil, cut("inside a frame header", err)
	}
	kind, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
	limit := uint32(MaxJSON)
	switch kind {
	case KindChunk:
		limit = MaxChunk + sha256.Size
	case KindHeader, KindChangeset, KindEnd:
	default:
		return 0, nil, malformed("unknown frame kind %q", kind)
	}
	if n > limit {
		return 0, nil, malformed("%c frame of %d bytes over the limit of %d", kind, n, limit)
	}
	if cap(d.buf) < int(n) {
		// Grow as the data arrives, so a lying length costs no memory up front.
		d.buf = make([]byte, 0, min(int(n), 1<<20))
	}
	d.buf = d.buf[:0]
	for remaining := int(n); remaining > 0; {
		step := min(remaining, 1<<20)
		start := len(d.buf)
		d.buf = append(d.buf, make([]byte, step)...)
		if _, err := io.ReadFull(d.r, d.buf[start:]); err != nil {
			return 0, nil, cut(fmt.Sprintf("inside a %c frame", kind), err)
		}
		remaining -= step
	}
	return kind, d.buf, nil
}

// Header reads the first frame into v.
func (d *Decoder) Header(v any) error {
	if d.state != 0 {
		return errors.New("sync: header read twice")
	}
	kind, b, err := d.next()
	if err != nil {
		return err
	}
	if kind != KindHeader {
		return malformed("stream starts with a %c frame, want a header", kind)
	}
	d.state = 1
	if err := json.Unmarshal(b, v); err != nil {
		return malformed("bad header: %v", err)
	}
	return nil
}

// Next returns the next chunk (verified against its hash) or, once the
// chunks are done, the changeset; then the trailer is checked.
func (d *Decoder) Next() (h core.Hash, data []byte, cs *Received, err error) {
	if d.state != 1 {
		return h, nil, nil, errors.New("sync: Next after the changeset")
	}
	kind, b, err := d.next()
	if err != nil {
		return h, nil, nil, err
	}
	switch kind {
	case KindChunk:
		if len(b) < sha256.Size {
			return h, nil, nil, malformed("chunk frame of %d bytes", len(b))
		}
		copy(h[:], b)
		data = b[sha256.Size:]
		if sha256.Sum256(data) != h {
			return h, nil, nil, malformed("chunk %s: its bytes do not match its hash", h)
		}
		d.counted.Chunks++
		d.counted.Bytes += int64(len(data))
		return h, data, nil, nil
	case KindChangeset:
		cs, err := d.changeset(b)
		if err != nil {
			return h, nil, nil, err
		}
		d.state = 3
		return h, nil, cs, nil
	default:
		return h, nil, nil, malformed("%c frame among the chunks", kind)
	}
}

// changeset reads the changeset whose first frame is b, and the frames
// after it up to and including the trailer, which it checks.
func (d *Decoder) changeset(b []byte) (*Received, error) {
	cs := &Received{Ops: &fsstore.PackedOps{}}
	for part := 0; ; part++ {
		from, to, err := decodePart(b, cs.Ops)
		if err != nil {
			return nil, err
		}
		if part == 0 {
			cs.From, cs.To = from, to
		} else if from != cs.From || to != cs.To {
			return nil, malformed("changeset frame %d is of %d..%d, the first of %d..%d", part, from, to, cs.From, cs.To)
		}
		kind, next, err := d.next()
		if err != nil {
			return nil, err
		}
		switch kind {
		case KindChangeset:
			b = next
			continue
		case KindEnd:
		default:
			return nil, malformed("%c frame after the changeset, want the trailer", kind)
		}
		var t Trailer
		if err := json.Unmarshal(next, &t); err != nil {
			return nil, malformed("bad trailer: %v", err)
		}
		if t != d.counted {
			return nil, malformed("trailer says %d chunks, %d bytes; the stream held %d, %d", t.Chunks, t.Bytes, d.counted.Chunks, d.counted.Bytes)
		}
		return cs, nil
	}
}

// decodePart reads one changeset frame, {"from":F,"to":T,"ops":[...]},
// packing its ops one at a time into ops as they are decoded.
func decodePart(b []byte, ops *fsstore.PackedOps) (from, to int64, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	bad := func(err error) (int64, int64, error) { return 0, 0, malformed("bad changeset: %v", err) }
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad(fmt.Errorf("want an object, got %v (%v)", tok, err))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		switch tok {
		case "from":
			err = dec.Decode(&from)
		case "to":
			err = dec.Decode(&to)
		case "ops":
			if tok, err := dec.Token(); err != nil || (tok != json.Delim('[') && tok != nil) {
				return bad(fmt.Errorf("ops: want an array, got %v (%v)", tok, err))
			} else if tok == nil {
				continue
			}
			for dec.More() {
				var op core.Op
				if err := dec.Decode(&op); err != nil {
					return bad(err)
				}
				if err := addOp(ops, op); err != nil {
					return 0, 0, err
				}
			}
			_, err = dec.Token()
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return bad(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return bad(err)
	}
	if dec.More() {
		return bad(errors.New("data after the changeset"))
	}
	return from, to, nil
}

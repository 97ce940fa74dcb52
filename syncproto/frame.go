// Package syncproto carries changesets between a home computerd and its
// executors (docs/SYNC.md): a framed binary stream of a header, chunks and
// one changeset, pull and push handlers for the home, and a client for the
// executor. The changeset itself is core.Changeset; this package only
// encodes, decodes and transports it.
package syncproto

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"computerd/core"
)

// Version is the protocol version this build speaks. Version 2: a
// conflicting push is kept at the home and answered as such (PushResult),
// where version 1 refused it with 409. Version 3: changesets may hold
// special files (mknod ops, device numbers), which version 2 refuses.
const Version = 3

// HeaderVersion carries the protocol version on every request and answer.
const HeaderVersion = "Computerd-Sync-Version"

// Frame kinds. A stream is: Header, any number of Chunks, one Changeset, End.
const (
	KindHeader    byte = 'H' // JSON: PullHeader or PushHeader
	KindChunk     byte = 'C' // 32-byte SHA-256, then the chunk's bytes
	KindChangeset byte = 'S' // JSON: core.Changeset
	KindEnd       byte = 'E' // JSON: Trailer
)

// Limits on frame sizes: a chunk frame holds at most MaxChunk bytes of data;
// a JSON frame at most MaxJSON.
const (
	MaxChunk = 16 << 20
	MaxJSON  = 256 << 20
)

// ErrMalformed marks a stream that breaks the framing rules.
var ErrMalformed = errors.New("malformed sync stream")

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

// Changeset writes the changeset.
func (e *Encoder) Changeset(cs *core.Changeset) error {
	if e.state != 1 {
		return errors.New("sync: changeset out of order")
	}
	e.state = 2
	return e.json(KindChangeset, cs)
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
// the trailer's totals.
type Decoder struct {
	r       *bufio.Reader
	state   int
	buf     []byte
	counted Trailer
}

// NewDecoder returns a decoder reading from r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: bufio.NewReaderSize(r, 256<<10)} }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// next reads one frame; the payload is valid until the next call.
func (d *Decoder) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, malformed("stream ended before its trailer")
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, malformed("stream cut inside a frame header")
		}
		return 0, nil, err
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
			return 0, nil, malformed("stream cut inside a %c frame", kind)
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
func (d *Decoder) Next() (h core.Hash, data []byte, cs *core.Changeset, err error) {
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
		cs = new(core.Changeset)
		if err := json.Unmarshal(b, cs); err != nil {
			return h, nil, nil, malformed("bad changeset: %v", err)
		}
		d.state = 2
		kind, b, err := d.next()
		if err != nil {
			return h, nil, nil, err
		}
		if kind != KindEnd {
			return h, nil, nil, malformed("%c frame after the changeset, want the trailer", kind)
		}
		var t Trailer
		if err := json.Unmarshal(b, &t); err != nil {
			return h, nil, nil, malformed("bad trailer: %v", err)
		}
		if t != d.counted {
			return h, nil, nil, malformed("trailer says %d chunks, %d bytes; the stream held %d, %d", t.Chunks, t.Bytes, d.counted.Chunks, d.counted.Bytes)
		}
		d.state = 3
		return h, nil, cs, nil
	default:
		return h, nil, nil, malformed("%c frame among the chunks", kind)
	}
}

package fsstore

import (
	"fmt"
	"sync/atomic"

	"computerd/core"
)

// What one request may make beyond the bytes it sent: past BoundFloor, at
// most BoundRatio bytes for each byte sent. Real requests stay far below
// (source trees compress 3-10x, a tree of empty files ~200x; a sparse
// disk image is a few times its data), while a decompression bomb (1 GiB
// of zeros is 1 MiB of gzip) or a sparse tar entry of a terabyte in a
// 10 KiB archive does not.
const (
	BoundRatio = 1000
	BoundFloor = 64 << 20
)

// Bound meters what one request makes that it did not send: an archive's
// decompressed bytes, the zeros of its sparse entries, the zeros a
// truncate or write opens past a file's end. The daemon makes up and
// scans an archive's zeros, and every later reader of a file gets them,
// so a request that sends little must not ask for many: Make fails once
// the request has made more than Limit, and the caller commits nothing.
// Its methods may be called from several goroutines.
type Bound struct {
	sent, made atomic.Int64
}

// Sent counts n more bytes of the request's body.
func (b *Bound) Sent(n int64) { b.sent.Add(n) }

// Limit is what the request may make, given what it has sent so far.
func (b *Bound) Limit() int64 {
	sent := b.sent.Load()
	if sent > core.MaxFileSize/BoundRatio {
		return core.MaxFileSize
	}
	return max(BoundFloor, BoundRatio*sent)
}

// Make counts n more bytes made, failing with a *BoundError (core.ErrTooLarge)
// once they come to more than Limit.
func (b *Bound) Make(n int64) error {
	made := b.made.Add(n)
	if limit := b.Limit(); made > limit {
		return &BoundError{Made: made, Sent: b.sent.Load(), Limit: limit}
	}
	return nil
}

// Made is what the request has made so far.
func (b *Bound) Made() int64 { return b.made.Load() }

// BoundError is a request over its Bound; it is a core.ErrTooLarge.
type BoundError struct {
	Made, Sent, Limit int64
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("%d bytes made beyond the %d bytes sent (decompressed, or zeros of sparse files and holes), over the limit of %d: %d for each byte sent, and %d (64 MiB) whatever was sent",
		e.Made, e.Sent, e.Limit, BoundRatio, BoundFloor)
}

func (e *BoundError) Unwrap() error { return core.ErrTooLarge }

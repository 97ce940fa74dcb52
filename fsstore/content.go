package fsstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"time"
)

// uploadBatch is how many bytes an Uploader buffers before writing them in
// one short transaction.
const uploadBatch = 8 << 20

// Uploader writes file contents into the store as chunks ahead of the commit
// that will reference them, in short transactions, so a slow stream never
// holds the writer lock. Chunks it writes are leased against GC for
// Store.LeaseTime. All-zero chunks become holes and are not stored.
type Uploader struct {
	s       *Store
	pending []pendingChunk
	size    int
	buf     []byte
}

type pendingChunk struct {
	hash Hash
	data []byte
	c    *Content // where the chunk is named, to note its row id
	i    int
}

// NewUploader returns an Uploader; call Flush before committing what Put returned.
func (s *Store) NewUploader() *Uploader {
	return &Uploader{s: s, buf: make([]byte, s.chunkSize)}
}

// Put reads r to its end and returns its content as chunk references.
func (u *Uploader) Put(ctx context.Context, r io.Reader) (*Content, error) {
	c := &Content{Chunks: []ChunkRef{}}
	for idx := int64(0); ; idx++ {
		n, err := io.ReadFull(r, u.buf)
		if n > 0 {
			c.Size += int64(n)
			if !allZero(u.buf[:n]) {
				data := bytes.Clone(u.buf[:n])
				h := Hash(sha256.Sum256(data))
				c.Chunks = append(c.Chunks, ChunkRef{Index: idx, Hash: h, Len: n})
				u.pending = append(u.pending, pendingChunk{h, data, c, len(c.Chunks) - 1})
				u.size += n
				if u.size >= uploadBatch {
					if err := u.Flush(ctx); err != nil {
						return nil, err
					}
				}
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return c, nil
		} else if err != nil {
			return nil, err
		}
	}
}

// Flush writes the buffered chunks.
func (u *Uploader) Flush(ctx context.Context) error {
	if len(u.pending) == 0 {
		return nil
	}
	s := u.s
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var ids []int64
	err := s.inTx(ctx, func() error {
		for _, p := range u.pending {
			id, err := putChunk(ctx, s.wq, p.hash, p.data)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	exp := time.Now().Add(s.LeaseTime)
	for i, id := range ids {
		s.leases[id] = exp
		p := u.pending[i]
		p.c.Chunks[p.i].id = id
	}
	u.pending, u.size = u.pending[:0], 0
	return nil
}

// Put stores r's bytes as chunks and returns the content to name in a
// create or write op.
func (s *Store) Put(ctx context.Context, r io.Reader) (*Content, error) {
	u := s.NewUploader()
	c, err := u.Put(ctx, r)
	if err != nil {
		return nil, err
	}
	return c, u.Flush(ctx)
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

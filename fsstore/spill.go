package fsstore

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
)

// spill sorts records (byte strings, in bytes.Compare order) that may be
// too many to hold: it keeps up to spillRun bytes of them in memory,
// writes each full run, sorted, to an unlinked temporary file, and merges
// the runs as they are read back. Its memory is one run plus a read
// buffer per run written, however many records it holds; a set that fits
// one run never touches the disk.
type spill struct {
	dir      string
	runBytes int     // spillRunBytes, or less in tests
	inOrder  bool    // records are added in order: runs are neither sorted nor merged, only read one after another
	run      []byte  // the records of the current run, each a uvarint length then its bytes
	offs     []int32 // where each record of run starts
	n        int     // records added

	file  *os.File      // the runs written, back to back; nil until the first
	w     *bufio.Writer // writes to file
	size  int64         // bytes written to file
	runs  []spillRun    // where each run lies in file
	ended bool          // read once: adding more is refused
	// noDisk is set once the disk had no room for a run: from then on the
	// records stay in memory (the run grows), so that reads still work,
	// as every read of the store does, on a full disk.
	noDisk bool
}

// spillRun is where one sorted run lies in a spill's file.
type spillRun struct{ off, len int64 }

// spillRunBytes is how many bytes of records a spill holds in memory.
const spillRunBytes = 2 << 20

// spillReadBuffer is the read buffer of each run while runs merge: the
// memory of a merge is this for every spillRunBytes of records (under 1%
// of what the spill holds on disk; 1 MiB for 128 MiB of records).
const spillReadBuffer = 16 << 10

func newSpill(dir string) *spill { return &spill{dir: dir, runBytes: spillRunBytes} }

// len returns how many records s holds.
func (s *spill) len() int { return s.n }

// add appends a copy of rec.
func (s *spill) add(rec []byte) error {
	if s.ended {
		return errors.New("spill: add after read")
	}
	if !s.noDisk && len(s.offs) > 0 && len(s.run)+len(rec)+binary.MaxVarintLen32 > s.runBytes {
		err := s.flush()
		switch {
		case isNoSpace(err):
			s.noDisk = true
		case err != nil:
			return err
		case cap(s.run) < s.runBytes:
			// The runs to come are full ones: no more growing by appending.
			s.run = make([]byte, 0, s.runBytes)
		}
	}
	s.offs = append(s.offs, int32(len(s.run)))
	s.run = binary.AppendUvarint(s.run, uint64(len(rec)))
	s.run = append(s.run, rec...)
	s.n++
	return nil
}

// isNoSpace reports whether err is a full file system's (or quota's).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// record returns the record of run at off.
func (s *spill) record(off int32) []byte {
	n, k := binary.Uvarint(s.run[off:])
	start := int(off) + k
	return s.run[start : start+int(n)]
}

func (s *spill) sortRun() {
	if s.inOrder {
		return
	}
	slices.SortFunc(s.offs, func(a, b int32) int { return bytes.Compare(s.record(a), s.record(b)) })
}

// flush writes the current run, sorted, to the file and empties it. A
// run counts only once all of it is in the file: one that fails stays
// in memory.
func (s *spill) flush() error {
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, "spill-*")
		if err != nil {
			return fmt.Errorf("spill: %w", err)
		}
		os.Remove(f.Name()) // open until close; nothing left after a crash
		s.file, s.w = f, bufio.NewWriterSize(f, 64<<10)
	}
	s.sortRun()
	start, size := s.size, s.size
	var lenBuf [binary.MaxVarintLen64]byte
	for _, off := range s.offs {
		rec := s.record(off)
		k := binary.PutUvarint(lenBuf[:], uint64(len(rec)))
		s.w.Write(lenBuf[:k])
		s.w.Write(rec)
		size += int64(k + len(rec))
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	s.size = size
	s.runs = append(s.runs, spillRun{start, size - start})
	s.run, s.offs = s.run[:0], s.offs[:0]
	return nil
}

// end finishes adding: the last run is written out with the others, or
// sorted in memory if it is the only one or the disk had no room for it.
func (s *spill) end() error {
	if s.ended {
		return nil
	}
	s.ended = true
	if s.file != nil && !s.noDisk && len(s.offs) > 0 {
		err := s.flush()
		if isNoSpace(err) {
			s.noDisk = true
		} else if err != nil {
			return err
		}
	}
	s.sortRun()
	if len(s.offs) == 0 {
		s.run, s.offs = nil, nil
	}
	return nil
}

// each calls fn with every record in order; rec is valid only during the
// call. Adding is over once each has been called; each may be called
// again, for another pass.
func (s *spill) each(fn func(rec []byte) error) error {
	if err := s.end(); err != nil {
		return err
	}
	var cursors []*spillCursor
	for _, r := range s.runs {
		cursors = append(cursors, &spillCursor{r: bufio.NewReaderSize(io.NewSectionReader(s.file, r.off, r.len), spillReadBuffer)})
	}
	if len(s.offs) > 0 {
		cursors = append(cursors, &spillCursor{mem: s}) // the run in memory comes last
	}
	if s.inOrder {
		for _, c := range cursors {
			for {
				ok, err := c.next()
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				if err := fn(c.rec); err != nil {
					return err
				}
			}
		}
		return nil
	}
	m := make(spillMerge, 0, len(cursors))
	for _, c := range cursors {
		if ok, err := c.next(); err != nil {
			return err
		} else if ok {
			m = append(m, c)
		}
	}
	heap.Init(&m)
	for len(m) > 0 {
		c := m[0]
		if err := fn(c.rec); err != nil {
			return err
		}
		ok, err := c.next()
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(&m, 0)
		} else {
			heap.Pop(&m)
		}
	}
	return nil
}

// close releases the file, if any.
func (s *spill) close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
	s.run, s.offs = nil, nil
}

// spillCursor reads the records of one run: from the file, or from the
// spill's run in memory.
type spillCursor struct {
	r   *bufio.Reader
	mem *spill
	i   int // the next record of mem
	rec []byte
}

func (c *spillCursor) next() (bool, error) {
	if c.mem != nil {
		if c.i == len(c.mem.offs) {
			return false, nil
		}
		c.rec = c.mem.record(c.mem.offs[c.i])
		c.i++
		return true, nil
	}
	n, err := binary.ReadUvarint(c.r)
	if errors.Is(err, io.EOF) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("spill: %w", err)
	}
	if uint64(cap(c.rec)) < n {
		c.rec = make([]byte, n)
	}
	c.rec = c.rec[:n]
	if _, err := io.ReadFull(c.r, c.rec); err != nil {
		return false, fmt.Errorf("spill: %w", err)
	}
	return true, nil
}

// spillMerge is a heap of run cursors by their current record.
type spillMerge []*spillCursor

func (m spillMerge) Len() int           { return len(m) }
func (m spillMerge) Less(i, j int) bool { return bytes.Compare(m[i].rec, m[j].rec) < 0 }
func (m spillMerge) Swap(i, j int)      { m[i], m[j] = m[j], m[i] }
func (m *spillMerge) Push(x any)        { *m = append(*m, x.(*spillCursor)) }
func (m *spillMerge) Pop() any {
	old := *m
	c := old[len(old)-1]
	*m = old[:len(old)-1]
	return c
}

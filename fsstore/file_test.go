package fsstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// ---------------------------------------------------------------------------
// Empty files

func TestFileEmpty(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	db := bbOpenDB(t, s)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	bbCommit(t, s, w.ID,
		core.Op{Kind: core.OpCreate, Path: "full", Data: []byte("some bytes, more than one chunk of them")},
		core.Op{Kind: core.OpCreate, Path: "truncated", Data: []byte("soon gone, all of these bytes")})
	chunks := bbCount(t, db, "SELECT count(*) FROM chunks")
	empty, err := s.Put(ctx, bytes.NewReader(nil))
	if err != nil {
		t.Fatal(err)
	}
	if empty.Size != 0 || len(empty.Chunks) != 0 {
		t.Fatalf("Put of nothing: %+v", empty)
	}
	bbCommit(t, s, w.ID,
		core.Op{Kind: core.OpCreate, Path: "nil"},
		core.Op{Kind: core.OpCreate, Path: "zero-len", Data: []byte{}},
		core.Op{Kind: core.OpCreate, Path: "put", Content: empty},
		core.Op{Kind: core.OpTruncate, Path: "truncated", Size: 0},
		core.Op{Kind: core.OpCreate, Path: "empty-write"},
		core.Op{Kind: core.OpWrite, Path: "empty-write", Offset: 100, Data: []byte{}}, // writes nothing, grows nothing
		core.Op{Kind: core.OpCreate, Path: "full", Data: nil},                         // replace with nothing
		core.Op{Kind: core.OpMkdir, Path: "d"},
		core.Op{Kind: core.OpCreate, Path: "d/empty"},
	)
	// Put the same empty content into a second file in a later revision.
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "put2", Content: empty})
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"nil", "zero-len", "put", "put2", "truncated", "empty-write", "full", "d/empty"} {
		st, err := sn.Stat(ctx, p)
		if err != nil || st.Size != 0 || !st.Mode.IsRegular() {
			t.Errorf("stat %s: %+v %v", p, st, err)
		}
		data, err := sn.ReadFile(ctx, p)
		if err != nil || len(data) != 0 {
			t.Errorf("read %s: %q %v", p, data, err)
		}
		f, err := sn.Open(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := f.Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Errorf("read %s: %d %v, want 0 EOF", p, n, err)
		}
		if n, err := f.ReadAt(make([]byte, 10), 0); n != 0 || err != io.EOF {
			t.Errorf("readat %s: %d %v, want 0 EOF", p, n, err)
		}
		var buf bytes.Buffer
		if n, err := f.WriteTo(&buf); n != 0 || err != nil {
			t.Errorf("writeto %s: %d %v", p, n, err)
		}
		if all, err := io.ReadAll(f); err != nil || len(all) != 0 {
			t.Errorf("readall %s: %q %v", p, all, err)
		}
	}
	// Empty files take no chunks; nor do empty files take extents.
	if got := bbCount(t, db, "SELECT count(*) FROM chunks"); got != chunks {
		t.Errorf("chunks %d -> %d after writing only empty files", chunks, got)
	}
	if n := bbCount(t, db, "SELECT count(*) FROM extents WHERE chunk IS NOT NULL AND death > ?", bbHead(t, s, w.ID)); n != 0 {
		t.Errorf("%d live extents at head, want none", n)
	}
	// The old revision still has the bytes.
	if got := bbRead(t, s, w.ID, 2, "full"); string(got) != "some bytes, more than one chunk of them" {
		t.Errorf("rev 2 full = %q", got)
	}
	// Diff of empty files, and applying it elsewhere.
	cs, err := s.Diff(ctx, w.ID, 2, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := s.CreateWorkspace(ctx, "t", "copy")
	if err != nil {
		t.Fatal(err)
	}
	full, _ := s.Diff(ctx, w.ID, 1, core.Head)
	if _, err := s.Apply(ctx, w2.ID, &core.Changeset{From: 1, Ops: full.Ops}, fsstore.CommitInfo{}); err != nil {
		t.Fatalf("apply %v: %v", full.Ops, err)
	}
	// The diff from 2 needs no chunk, and applied to revision 2 it makes
	// exactly the head's tree.
	if got := cs.Chunks(); len(got) != 0 {
		t.Errorf("diff 2..head names chunks %v; empty files need none", got)
	}
	at2, err := s.Fork(ctx, w.ID, 2, "at2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, at2.ID, &core.Changeset{From: 1, Ops: cs.Ops}, fsstore.CommitInfo{}); err != nil {
		t.Fatalf("apply diff 2..head %v: %v", cs.Ops, err)
	}
	type file struct {
		Mode fs.FileMode
		Size int64
		Sum  [32]byte
	}
	files := func(ws int64) map[string]file {
		out := map[string]file{}
		for _, e := range bbTree(t, s, ws, core.Head) {
			out[e.Path] = file{e.Mode, e.Size, e.Sum}
		}
		return out
	}
	if got, want := files(at2.ID), files(w.ID); !maps.Equal(got, want) {
		t.Errorf("revision 2 plus diff 2..head:\n%v\nhead:\n%v", got, want)
	}
	for _, e := range bbTree(t, s, w2.ID, core.Head) {
		if e.Mode.IsRegular() && (e.Size != 0 || e.Sum != sha256.Sum256(nil)) {
			t.Errorf("copied %s: size %d", e.Path, e.Size)
		}
	}
	bbCheck(t, s)
}

// ---------------------------------------------------------------------------
// A 1 GiB file through Store.Put, streamed both ways.

const (
	hugeSize      = 1 << 30
	hugeZeroStart = 300 << 20 // [hugeZeroStart, +1 MiB) is zeros: holes
	hugeDupStart  = 600 << 20 // [hugeDupStart, +1 MiB) repeats one chunk
	hugeRegion    = 1 << 20
)

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hugeWord is the 8-byte word at word index w of the deterministic stream.
func hugeWord(w int64, chunk int64) uint64 {
	off := w * 8
	switch {
	case off >= hugeZeroStart && off < hugeZeroStart+hugeRegion:
		return 0
	case off >= hugeDupStart && off < hugeDupStart+hugeRegion:
		return splitmix64(uint64((off%chunk)/8) ^ 0xd0d0)
	}
	return splitmix64(uint64(w))
}

// fillHuge fills p with the stream's bytes from offset off.
func fillHuge(p []byte, off, chunk int64) {
	for len(p) > 0 {
		w := off / 8
		word := hugeWord(w, chunk)
		if off%8 == 0 && len(p) >= 8 {
			binary.LittleEndian.PutUint64(p, word)
			p, off = p[8:], off+8
			continue
		}
		p[0] = byte(word >> (8 * (off % 8)))
		p, off = p[1:], off+1
	}
}

type hugeReader struct{ off, size, chunk int64 }

func (r *hugeReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.size-r.off))
	fillHuge(p[:n], r.off, r.chunk)
	r.off += int64(n)
	return n, nil
}

func TestFileHuge(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB file: skipped with -short")
	}
	ctx := context.Background()
	s := fsstore.New(t.TempDir()) // the default chunk size
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := bbOpenDB(t, s)
	cs := s.ChunkSizeBytes()
	if cs != fsstore.DefaultChunkSize {
		t.Fatalf("chunk size %d", cs)
	}
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h := sha256.New()
	c, err := s.Put(ctx, io.TeeReader(&hugeReader{size: hugeSize, chunk: cs}, h))
	if err != nil {
		t.Fatal(err)
	}
	want := h.Sum(nil)
	putTime := time.Since(start)
	if c.Size != hugeSize {
		t.Fatalf("content size %d", c.Size)
	}
	zero, dup := int64(hugeRegion)/cs, int64(hugeRegion)/cs-1
	if got, wantN := int64(len(c.Chunks)), hugeSize/cs-zero; got != wantN {
		t.Errorf("content has %d chunks, want %d (all but the zero ones)", got, wantN)
	}
	if got, wantN := bbCount(t, db, "SELECT count(*) FROM chunks"), hugeSize/cs-zero-dup; got != wantN {
		t.Errorf("store holds %d chunks, want %d distinct", got, wantN)
	}
	r := bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "big", Content: c})
	commitTime := time.Since(start) - putTime

	sn, err := s.Snapshot(ctx, w.ID, r.Rev)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sn.Stat(ctx, "big")
	if err != nil || st.Size != hugeSize {
		t.Fatalf("stat: %+v %v", st, err)
	}
	f, err := sn.Open(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	h2 := sha256.New()
	n, err := io.Copy(h2, f) // File.WriteTo: a few chunks at a time
	if err != nil || n != hugeSize {
		t.Fatalf("read back %d bytes: %v", n, err)
	}
	if got := h2.Sum(nil); !bytes.Equal(got, want) {
		t.Fatalf("read back hash %x, wrote %x", got, want)
	}
	readTime := time.Since(start) - putTime - commitTime
	// Random windows, across chunk boundaries, into the holes and the repeats, and at the end.
	rng := rand.New(rand.NewPCG(1, 2))
	offs := []int64{0, cs - 3, hugeZeroStart - 5, hugeZeroStart + cs - 1, hugeDupStart - 7, hugeDupStart + 2*cs - 1, hugeSize - 10, hugeSize - 1}
	for i := 0; i < 40; i++ {
		offs = append(offs, rng.Int64N(hugeSize))
	}
	for _, off := range offs {
		buf := make([]byte, 1+rng.IntN(3*int(cs)))
		exp := make([]byte, min(int64(len(buf)), hugeSize-off))
		fillHuge(exp, off, cs)
		got, err := f.ReadAt(buf, off)
		if got != len(exp) || !bytes.Equal(buf[:got], exp) {
			t.Fatalf("ReadAt(%d bytes, %d) = %d %v: bytes differ", len(buf), off, got, err)
		}
		if got < len(buf) && err != io.EOF {
			t.Errorf("short ReadAt at %d: %v, want EOF", off, err)
		}
	}
	// A rewrite of one byte in the middle costs one chunk, not a copy of the file.
	before := bbCount(t, db, "SELECT count(*) FROM chunks")
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpWrite, Path: "big", Offset: hugeSize / 2, Data: []byte{0xAA}})
	if got := bbCount(t, db, "SELECT count(*) FROM chunks"); got != before+1 {
		t.Errorf("one-byte write: chunks %d -> %d", before, got)
	}
	f2, _ := s.Snapshot(ctx, w.ID, core.Head)
	one := make([]byte, 3)
	if _, err := f2.Open(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	g, _ := f2.Open(ctx, "big")
	g.ReadAt(one, hugeSize/2-1)
	exp := make([]byte, 3)
	fillHuge(exp, hugeSize/2-1, cs)
	exp[1] = 0xAA
	if !bytes.Equal(one, exp) {
		t.Errorf("after one-byte write: %x, want %x", one, exp)
	}
	rep, err := s.Check(ctx, fsstore.CheckOptions{AllRevisions: true})
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("check: %v %v", err, rep.Problems)
	}
	t.Logf("1 GiB: put %v, commit %v, read+hash %v", putTime, commitTime, readTime)
}

// ---------------------------------------------------------------------------
// Sparse files: writes past the end, truncates that grow, holes read as zeros.

// modelWrite applies a write of data at off to a model file.
func modelWrite(b []byte, off int64, data []byte) []byte {
	if len(data) == 0 {
		return b
	}
	if end := off + int64(len(data)); end > int64(len(b)) {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	copy(b[off:], data)
	return b
}

func modelTruncate(b []byte, size int64) []byte {
	if size <= int64(len(b)) {
		return b[:size:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func TestSparse(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t) // 16-byte chunks
	db := bbOpenDB(t, s)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	type O = core.Op
	bbCommit(t, s, w.ID,
		O{Kind: core.OpCreate, Path: "s"},
		O{Kind: core.OpWrite, Path: "s", Offset: 1000, Data: []byte("X")},
		O{Kind: core.OpCreate, Path: "t", Data: []byte("abc")},
		O{Kind: core.OpTruncate, Path: "t", Size: 100},
		O{Kind: core.OpCreate, Path: "u", Data: []byte("0123456789abcdefghij")},
		O{Kind: core.OpTruncate, Path: "u", Size: 5},
		O{Kind: core.OpTruncate, Path: "u", Size: 40},
	)
	want := map[string][]byte{
		"s": append(make([]byte, 1000), 'X'),
		"t": append([]byte("abc"), make([]byte, 97)...),
		"u": append([]byte("01234"), make([]byte, 35)...),
	}
	for p, exp := range want {
		if got := bbRead(t, s, w.ID, core.Head, p); !bytes.Equal(got, exp) {
			t.Errorf("%s = %q, want %q", p, got, exp)
		}
	}
	// A sparse file stores only its data: one extent for "s".
	if n := bbCount(t, db, "SELECT count(*) FROM extents e JOIN inodes i USING (ws, ino) WHERE i.size = 1001 AND e.chunk IS NOT NULL"); n != 1 {
		t.Errorf("sparse file has %d extents, want 1", n)
	}
	// Shrinking then growing in separate revisions reads zeros, not the old bytes.
	bbCommit(t, s, w.ID, O{Kind: core.OpCreate, Path: "v", Data: []byte("0123456789abcdefghijklmnopqrstuvwxyz")})
	bbCommit(t, s, w.ID, O{Kind: core.OpTruncate, Path: "v", Size: 17})
	bbCommit(t, s, w.ID, O{Kind: core.OpTruncate, Path: "v", Size: 36})
	bbCommit(t, s, w.ID, O{Kind: core.OpWrite, Path: "v", Offset: 30, Data: []byte("!")})
	exp := modelWrite(modelTruncate([]byte("0123456789abcdefg"), 36), 30, []byte("!"))
	if got := bbRead(t, s, w.ID, core.Head, "v"); !bytes.Equal(got, exp) {
		t.Errorf("v = %q, want %q", got, exp)
	}
	// The largest sizes work, and shrinking from them forgets the data.
	bbCommit(t, s, w.ID, O{Kind: core.OpTruncate, Path: "t", Size: core.MaxFileSize})
	bbCommit(t, s, w.ID, O{Kind: core.OpWrite, Path: "t", Offset: core.MaxFileSize - 3, Data: []byte("end")})
	sn, _ := s.Snapshot(ctx, w.ID, core.Head)
	f, err := sn.Open(ctx, "t")
	if err != nil || f.Size() != core.MaxFileSize {
		t.Fatalf("huge sparse file: %v", err)
	}
	tail := make([]byte, 8)
	if n, err := f.ReadAt(tail, core.MaxFileSize-5); n != 5 || err != io.EOF || string(tail[:5]) != "\x00\x00end" {
		t.Errorf("tail of huge file: %d %v %q", n, err, tail[:n])
	}
	if n, err := f.ReadAt(tail[:3], 0); n != 3 || err != nil || string(tail[:3]) != "abc" {
		t.Errorf("head of huge file: %d %v %q", n, err, tail[:3])
	}
	// Asking for nothing before the end is not EOF; at the end it may be.
	if n, err := f.ReadAt(nil, 10); n != 0 || err != nil {
		t.Errorf("empty ReadAt mid-file: %d %v, want 0 nil", n, err)
	}
	if n, err := f.Read(nil); n != 0 || err != nil {
		t.Errorf("empty Read mid-file: %d %v, want 0 nil", n, err)
	}
	if n, err := f.ReadAt(tail, core.MaxFileSize); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end: %d %v, want 0 EOF", n, err)
	}
	bbCommit(t, s, w.ID, O{Kind: core.OpTruncate, Path: "t", Size: 0})
	bbCommit(t, s, w.ID, O{Kind: core.OpTruncate, Path: "t", Size: 3})
	if got := bbRead(t, s, w.ID, core.Head, "t"); string(got) != "\x00\x00\x00" {
		t.Errorf("t after shrinking from the largest size and growing = %q, want zeros", got)
	}
	bbCheck(t, s)
}

// TestSparseRandom runs random writes, truncates and content writes against
// a byte-slice model, in batches of several ops, in a workspace and in a fork.
func TestSparseRandom(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	const cs = 16
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	randData := func(n int) []byte {
		b := make([]byte, n)
		switch rng.IntN(4) {
		case 0: // zeros
		case 1: // a repeated byte
			for i := range b {
				b[i] = byte('a' + rng.IntN(3))
			}
		default:
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
		}
		return b
	}
	type model map[string][]byte
	clone := func(m model) model {
		out := model{}
		for k, v := range m {
			out[k] = bytes.Clone(v)
		}
		return out
	}
	paths := []string{"f0", "f1", "f2", "sub/f3", "sub/f4"}

	verify := func(ws, rev int64, m model) {
		t.Helper()
		sn, err := s.Snapshot(ctx, ws, rev)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := sn.Walk(ctx, "", func(p string, st core.Stat) error {
			if st.Mode.IsRegular() {
				got = append(got, p)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var wantPaths []string
		for p := range m {
			wantPaths = append(wantPaths, p)
		}
		sort.Strings(wantPaths)
		if !slices.Equal(got, wantPaths) {
			t.Fatalf("ws %d rev %d: files %q, want %q", ws, rev, got, wantPaths)
		}
		for p, exp := range m {
			f, err := sn.Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if f.Size() != int64(len(exp)) {
				t.Fatalf("ws %d rev %d %s: size %d, want %d", ws, rev, p, f.Size(), len(exp))
			}
			all, err := io.ReadAll(f)
			if err != nil || !bytes.Equal(all, exp) {
				t.Fatalf("ws %d rev %d %s: read %q (%v), want %q", ws, rev, p, all, err, exp)
			}
			for i := 0; i < 3; i++ {
				off := rng.Int64N(int64(len(exp)) + 20)
				buf := make([]byte, rng.IntN(50))
				n, err := f.ReadAt(buf, off)
				wantN := max(0, min(int64(len(buf)), int64(len(exp))-off))
				if int64(n) != wantN || !bytes.Equal(buf[:n], exp[min(off, int64(len(exp))):min(off, int64(len(exp)))+wantN]) {
					t.Fatalf("ws %d rev %d %s: ReadAt(%d, %d) = %d %v, want %d bytes %q", ws, rev, p, len(buf), off, n, err, wantN, exp[min(off, int64(len(exp))):min(off, int64(len(exp)))+wantN])
				}
				if int64(n) < int64(len(buf)) && err != io.EOF {
					t.Fatalf("ws %d rev %d %s: short ReadAt without EOF: %v", ws, rev, p, err)
				}
			}
		}
	}

	// step makes one batch of random ops against m, commits it and updates m.
	step := func(ws int64, m model) {
		t.Helper()
		var ops []core.Op
		// m["sub/"] marks that directory sub exists.
		nops := 1 + rng.IntN(6)
		for i := 0; i < nops; i++ {
			p := paths[rng.IntN(len(paths))]
			cur, exists := m[p]
			if strings.HasPrefix(p, "sub/") && m["sub/"] == nil {
				// (re)create the directory in this batch: its entries are fresh
				ops = append(ops, core.Op{Kind: core.OpMkdir, Path: "sub"})
				m["sub/"] = []byte{}
			}
			switch k := rng.IntN(10); {
			case !exists || k == 0: // create (or replace) with inline data
				data := randData(rng.IntN(70))
				ops = append(ops, core.Op{Kind: core.OpCreate, Path: p, Data: data})
				m[p] = bytes.Clone(data)
			case k == 1: // create from Put content
				data := randData(rng.IntN(90))
				c, err := s.Put(ctx, bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, core.Op{Kind: core.OpCreate, Path: p, Content: c})
				m[p] = bytes.Clone(data)
			case k <= 4: // write, often past the end
				off := rng.Int64N(int64(len(cur)) + 120)
				data := randData(rng.IntN(50))
				ops = append(ops, core.Op{Kind: core.OpWrite, Path: p, Offset: off, Data: data})
				m[p] = modelWrite(cur, off, data)
			case k <= 6: // truncate, down or up
				size := rng.Int64N(int64(len(cur))*2 + 60)
				ops = append(ops, core.Op{Kind: core.OpTruncate, Path: p, Size: size})
				m[p] = modelTruncate(cur, size)
			case k == 7: // write whole chunk slots from Put content, shifted
				data := randData(1 + rng.IntN(60))
				c, err := s.Put(ctx, bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				shift := rng.Int64N(6)
				wc := &core.Content{}
				b := cur
				for _, ref := range c.Chunks {
					src := data[ref.Index*cs : ref.Index*cs+int64(ref.Len)]
					ref.Index += shift
					wc.Chunks = append(wc.Chunks, ref)
					slot := ref.Index * cs
					if end := slot + int64(ref.Len); end > int64(len(b)) {
						b = append(b, make([]byte, end-int64(len(b)))...)
					}
					for j := slot; j < min(slot+cs, int64(len(b))); j++ {
						b[j] = 0 // the slot is replaced whole
					}
					copy(b[slot:], src)
				}
				ops = append(ops, core.Op{Kind: core.OpWrite, Path: p, Content: wc})
				m[p] = b
			case k == 8: // rename over another path in the same directory level
				q := paths[rng.IntN(len(paths))]
				if q == p || (strings.HasPrefix(q, "sub/") && m["sub/"] == nil) {
					continue
				}
				ops = append(ops, core.Op{Kind: core.OpRename, From: p, Path: q})
				m[q] = cur
				delete(m, p)
			case k == 9: // delete
				ops = append(ops, core.Op{Kind: core.OpDelete, Path: p})
				delete(m, p)
			}
		}
		if rng.IntN(8) == 0 && m["sub/"] != nil {
			ops = append(ops, core.Op{Kind: core.OpDeleteAll, Path: "sub"})
			for p := range m {
				if strings.HasPrefix(p, "sub/") {
					delete(m, p)
				}
			}
		}
		if len(ops) == 0 {
			return
		}
		if _, err := s.Commit(ctx, ws, &core.Batch{Ops: ops}, fsstore.CommitInfo{}); err != nil {
			t.Fatalf("commit %v: %v", ops, err)
		}
	}
	files := func(m model) model { // the model without the directory marker
		out := model{}
		for k, v := range m {
			if !strings.HasSuffix(k, "/") {
				out[k] = v
			}
		}
		return out
	}

	hist := map[int64]model{1: {}}
	m := model{}
	for i := 0; i < 150; i++ {
		step(w.ID, m)
		head := bbHead(t, s, w.ID)
		hist[head] = clone(m)
		verify(w.ID, head, files(m))
	}
	// A fork at some revision continues on its own, over its base's rows.
	var forkRev int64 = 2 + rng.Int64N(bbHead(t, s, w.ID)-1)
	f, err := s.Fork(ctx, w.ID, forkRev, "fork")
	if err != nil {
		t.Fatal(err)
	}
	fm := clone(hist[forkRev])
	fhist := map[int64]model{1: clone(fm)}
	for i := 0; i < 80; i++ {
		step(f.ID, fm)
		head := bbHead(t, s, f.ID)
		fhist[head] = clone(fm)
		verify(f.ID, head, files(fm))
	}
	// Every revision of both still reads as it did.
	for rev, hm := range hist {
		verify(w.ID, rev, files(hm))
	}
	for rev, hm := range fhist {
		verify(f.ID, rev, files(hm))
	}
	bbCheck(t, s)
}

// ---------------------------------------------------------------------------
// Names: any bytes but NUL and '/'.

func TestNames(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{
		"\xff\xfe", "\xff", "\x80abc", "line\nbreak", "\r", " spaced name ", " ", "  ", "日本語", "emoji 😀",
		strings.Repeat("L", 255), strings.Repeat("é", 127) + "x", strings.Repeat("日", 85),
		"\x01\x02\x03", "tab\there", "back\\slash", "...", ".hidden", "-dash", "a:b", "*?[]", "\x7f", "$HOME", "'quote\"",
		"A", "a", "B", "~",
	}
	for _, n := range names {
		if len(n) > core.MaxNameLen {
			t.Fatalf("test name too long: %d", len(n))
		}
	}
	var ops []core.Op
	ops = append(ops, core.Op{Kind: core.OpMkdir, Path: "dirs"}, core.Op{Kind: core.OpMkdir, Path: "links"})
	for _, n := range names {
		ops = append(ops,
			core.Op{Kind: core.OpCreate, Path: n, Data: []byte("content of " + n)},
			core.Op{Kind: core.OpMkdir, Path: "dirs/" + n},
			core.Op{Kind: core.OpCreate, Path: "dirs/" + n + "/" + n, Data: []byte(n)},
			core.Op{Kind: core.OpSymlink, Path: "links/" + n, Target: n},
		)
	}
	r := bbCommit(t, s, w.ID, ops...)
	sorted := slices.Clone(names)
	sort.Strings(sorted)

	checkNames := func(ws, rev int64, prefix string) {
		t.Helper()
		sn, err := s.Snapshot(ctx, ws, rev)
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{"", "dirs", "links"} {
			es, err := sn.ReadDir(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range es {
				if dir == "" && (e.Name == "dirs" || e.Name == "links") {
					continue
				}
				got = append(got, e.Name)
			}
			want := make([]string, len(sorted))
			for i, n := range sorted {
				want[i] = n
			}
			if dir == "" && prefix != "" {
				want = want[:0]
				for _, n := range names {
					want = append(want, prefix+n)
				}
				sort.Strings(want)
			}
			if !slices.Equal(got, want) {
				t.Errorf("ws %d rev %d readdir %q:\n got %q\nwant %q", ws, rev, dir, got, want)
			}
		}
		for _, n := range names {
			top := prefix + n
			if data, err := sn.ReadFile(ctx, top); err != nil || string(data) != "content of "+n {
				t.Errorf("read %q: %q %v", top, data, err)
			}
			if st, err := sn.Stat(ctx, top); err != nil || st.Name != top {
				t.Errorf("stat %q: name %q %v", top, st.Name, err)
			}
			if data, err := sn.ReadFile(ctx, "dirs/"+n+"/"+n); err != nil || string(data) != n {
				t.Errorf("read dirs/%q/%q: %q %v", n, n, data, err)
			}
			if target, err := sn.Readlink(ctx, "links/"+n); err != nil || target != n {
				t.Errorf("readlink links/%q: %q %v", n, target, err)
			}
		}
	}
	checkNames(w.ID, r.Rev, "")

	// Rename every top-level file to a prefixed name in one revision, and
	// check both revisions and the diff between them.
	ops = nil
	for _, n := range names {
		if len(n) < core.MaxNameLen {
			ops = append(ops, core.Op{Kind: core.OpRename, From: n, Path: "~" + n})
		}
	}
	r2 := bbCommit(t, s, w.ID, ops...)
	checkNames(w.ID, r.Rev, "")
	cs, err := s.Diff(ctx, w.ID, r.Rev, r2.Rev)
	if err != nil {
		t.Fatal(err)
	}
	renamed := map[string]string{}
	for _, op := range cs.Ops {
		if op.Kind == core.OpRename {
			renamed[op.From] = op.Path
		}
	}
	for _, n := range names {
		if len(n) < core.MaxNameLen && renamed[n] != "~"+n {
			t.Errorf("diff: rename of %q -> %q, want %q", n, renamed[n], "~"+n)
		}
	}
	// In a fork, names of both layers merge in byte order.
	f, err := s.Fork(ctx, w.ID, r.Rev, "f")
	if err != nil {
		t.Fatal(err)
	}
	extra := []string{"\xfe", "0", "zz", "日本", "\x01"}
	ops = nil
	for _, n := range extra {
		ops = append(ops, core.Op{Kind: core.OpCreate, Path: "dirs/" + n, Data: []byte(n)})
	}
	ops = append(ops, core.Op{Kind: core.OpDeleteAll, Path: "dirs/" + names[0]})
	bbCommit(t, s, f.ID, ops...)
	sn, _ := s.Snapshot(ctx, f.ID, core.Head)
	es, err := sn.ReadDir(ctx, "dirs")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name)
	}
	want := append(slices.Clone(names[1:]), extra...)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("fork readdir dirs:\n got %q\nwant %q", got, want)
	}
	bbCheck(t, s)
}

// ---------------------------------------------------------------------------
// Dedup and forks: content is stored once, forks copy nothing.

// distinctData returns n bytes whose 16-byte chunks all differ from each other
// and from any other tag's.
func distinctData(tag string, n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", tag, i)))
		b = append(b, h[:16]...)
	}
	return b[:n]
}

func TestDedup(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	db := bbOpenDB(t, s)
	chunks := func() int64 { return bbCount(t, db, "SELECT count(*) FROM chunks") }
	w1, _ := s.CreateWorkspace(ctx, "t", "one")
	w2, _ := s.CreateWorkspace(ctx, "u", "two")
	data := distinctData("dedup", 160) // 10 distinct chunks
	c0 := chunks()
	bbCommit(t, s, w1.ID, core.Op{Kind: core.OpMkdir, Path: "a"}, core.Op{Kind: core.OpCreate, Path: "a/x", Data: data})
	if got := chunks(); got != c0+10 {
		t.Fatalf("first copy: %d chunks, want %d", got, c0+10)
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"second file", func() { bbCommit(t, s, w1.ID, core.Op{Kind: core.OpCreate, Path: "a/y", Data: data}) }},
		{"same batch twice", func() {
			bbCommit(t, s, w1.ID, core.Op{Kind: core.OpCreate, Path: "b1", Data: data}, core.Op{Kind: core.OpCreate, Path: "b2", Data: data})
		}},
		{"other workspace and tenant", func() { bbCommit(t, s, w2.ID, core.Op{Kind: core.OpCreate, Path: "z", Data: data}) }},
		{"through Put", func() {
			c, err := s.Put(ctx, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			bbCommit(t, s, w2.ID, core.Op{Kind: core.OpCreate, Path: "p", Content: c})
		}},
		{"chunk-aligned writes", func() {
			bbCommit(t, s, w2.ID,
				core.Op{Kind: core.OpCreate, Path: "shifted"},
				core.Op{Kind: core.OpWrite, Path: "shifted", Offset: 48, Data: data})
		}},
		{"piecewise writes", func() {
			ops := []core.Op{{Kind: core.OpCreate, Path: "pieces"}}
			for off := len(data) - 16; off >= 0; off -= 16 {
				ops = append(ops, core.Op{Kind: core.OpWrite, Path: "pieces", Offset: int64(off), Data: data[off : off+16]})
			}
			bbCommit(t, s, w1.ID, ops...)
		}},
		{"rewrite identical content", func() { bbCommit(t, s, w1.ID, core.Op{Kind: core.OpCreate, Path: "a/x", Data: data}) }},
	}
	for _, st := range steps {
		st.do()
		if got := chunks(); got != c0+10 {
			t.Errorf("%s: %d chunks, want %d", st.name, got, c0+10)
		}
	}
	// A file of one repeated chunk stores that chunk once.
	bbCommit(t, s, w1.ID, core.Op{Kind: core.OpCreate, Path: "rep", Data: bytes.Repeat(data[:16], 64)})
	if got := chunks(); got != c0+10 {
		t.Errorf("repeated chunk: %d chunks, want %d (it is one of the ten)", got, c0+10)
	}
	if n := bbCount(t, db, "SELECT count(DISTINCT chunk) FROM extents WHERE chunk IS NOT NULL"); n != 10 {
		t.Errorf("extents name %d distinct chunks, want 10", n)
	}
	if n := bbCount(t, db, "SELECT sum(size) FROM chunks"); n != 160 {
		t.Errorf("chunks hold %d bytes, want 160", n)
	}
	for _, c := range []struct {
		ws int64
		p  string
	}{{w1.ID, "a/x"}, {w1.ID, "a/y"}, {w1.ID, "b1"}, {w1.ID, "b2"}, {w2.ID, "z"}, {w2.ID, "p"}, {w1.ID, "pieces"}} {
		if got := bbRead(t, s, c.ws, core.Head, c.p); !bytes.Equal(got, data) {
			t.Errorf("%d:%s differs", c.ws, c.p)
		}
	}
	if got := bbRead(t, s, w2.ID, core.Head, "shifted"); !bytes.Equal(got, append(make([]byte, 48), data...)) {
		t.Errorf("shifted differs")
	}
	// Deleting one copy leaves the others intact.
	bbCommit(t, s, w1.ID, core.Op{Kind: core.OpDeleteAll, Path: "a"})
	if got := bbRead(t, s, w2.ID, core.Head, "z"); !bytes.Equal(got, data) {
		t.Errorf("z differs after deleting a")
	}
	bbCheck(t, s)
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	db := bbOpenDB(t, s)
	w, _ := s.CreateWorkspace(ctx, "t", "src")
	big := distinctData("fork-big", 400)
	r2 := bbCommit(t, s, w.ID,
		core.Op{Kind: core.OpMkdir, Path: "d"},
		core.Op{Kind: core.OpMkdir, Path: "d/e"},
		core.Op{Kind: core.OpCreate, Path: "d/big", Data: big},
		core.Op{Kind: core.OpCreate, Path: "d/e/small", Data: []byte("small")},
		core.Op{Kind: core.OpCreate, Path: "top", Data: distinctData("fork-top", 50)},
		core.Op{Kind: core.OpSymlink, Path: "sl", Target: "d/big"},
		core.Op{Kind: core.OpLink, From: "top", Path: "d/hard"},
		core.Op{Kind: core.OpTruncate, Path: "d/e/small", Size: 100},
	)
	r3 := bbCommit(t, s, w.ID,
		core.Op{Kind: core.OpWrite, Path: "d/big", Offset: 390, Data: []byte("0123456789abcdef")},
		core.Op{Kind: core.OpRename, From: "d/e", Path: "e2"},
		core.Op{Kind: core.OpChmod, Path: "top", Mode: 0o600},
	)
	tree2, tree3 := bbTree(t, s, w.ID, r2.Rev), bbTree(t, s, w.ID, r3.Rev)
	before := bbRowCounts(t, db)
	fHead, err := s.Fork(ctx, w.ID, core.Head, "f-head")
	if err != nil {
		t.Fatal(err)
	}
	fOld, err := s.Fork(ctx, w.ID, r2.Rev, "f-old")
	if err != nil {
		t.Fatal(err)
	}
	fFork, err := s.Fork(ctx, fHead.ID, core.Head, "f-fork")
	if err != nil {
		t.Fatal(err)
	}
	after := bbRowCounts(t, db)
	for _, k := range []string{"chunks", "chunks.bytes", "extents", "inodes", "dentries", "counter.ino"} {
		if before[k] != after[k] {
			t.Errorf("fork changed %s: %d -> %d", k, before[k], after[k])
		}
	}
	if after["workspaces"] != before["workspaces"]+3 || after["revisions"] != before["revisions"]+3 {
		t.Errorf("forks: workspaces %d -> %d, revisions %d -> %d", before["workspaces"], after["workspaces"], before["revisions"], after["revisions"])
	}
	for _, c := range []struct {
		name string
		ws   int64
		want []bbEntry
	}{{"f-head", fHead.ID, tree3}, {"f-old", fOld.ID, tree2}, {"f-fork", fFork.ID, tree3}} {
		if got := bbTree(t, s, c.ws, core.Head); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s tree:\n got %+v\nwant %+v", c.name, got, c.want)
		}
		if fw, _ := s.WorkspaceByID(ctx, c.ws); fw.Head != 1 || fw.BaseID == 0 {
			t.Errorf("%s: head %d base %d", c.name, fw.Head, fw.BaseID)
		}
	}
	// Changing a fork touches only what changed: one chunk for a one-byte write.
	bbCommit(t, s, fHead.ID, core.Op{Kind: core.OpWrite, Path: "d/big", Offset: 0, Data: []byte{'!'}})
	after2 := bbRowCounts(t, db)
	if after2["chunks"] != after["chunks"]+1 || after2["extents"] > after["extents"]+1 {
		t.Errorf("one-byte write in fork: chunks %d -> %d, extents %d -> %d", after["chunks"], after2["chunks"], after["extents"], after2["extents"])
	}
	bbCommit(t, s, fHead.ID,
		core.Op{Kind: core.OpDeleteAll, Path: "d"},
		core.Op{Kind: core.OpCreate, Path: "e2/small", Data: []byte("fork's own")},
		core.Op{Kind: core.OpTruncate, Path: "top", Size: 3},
	)
	bbCommit(t, s, fOld.ID, core.Op{Kind: core.OpRename, From: "d", Path: "dd"}, core.Op{Kind: core.OpWrite, Path: "dd/big", Offset: 1000, Data: []byte("x")})
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "d/big", Data: []byte("source changed")}, core.Op{Kind: core.OpTruncate, Path: "d/hard", Size: 1})
	// The source's old revisions and the untouched fork of a fork are as they were.
	for _, c := range []struct {
		name string
		ws   int64
		rev  int64
		want []bbEntry
	}{{"src@2", w.ID, r2.Rev, tree2}, {"src@3", w.ID, r3.Rev, tree3}, {"f-fork", fFork.ID, core.Head, tree3}, {"f-head@1", fHead.ID, 1, tree3}, {"f-old@1", fOld.ID, 1, tree2}} {
		if got := bbTree(t, s, c.ws, c.rev); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s changed:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	if got := bbRead(t, s, fHead.ID, core.Head, "top"); !bytes.Equal(got, distinctData("fork-top", 3)) {
		t.Errorf("fork top = %q", got)
	}
	if got := bbRead(t, s, fOld.ID, core.Head, "dd/big"); len(got) != 1001 || !bytes.Equal(got[:400], big) {
		t.Errorf("f-old dd/big: %d bytes", len(got))
	}
	if got := bbRead(t, s, w.ID, core.Head, "top"); !bytes.Equal(got, distinctData("fork-top", 1)) {
		t.Errorf("src top = %q (truncated through its hard link)", got)
	}
	bbCheck(t, s)
}

// TestFileBatchReuse replays, in one batch, sequences that reuse a name in a
// directory made by the same batch.
func TestFileBatchReuse(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, _ := s.CreateWorkspace(ctx, "t", "ws")
	type O = core.Op
	bbCommit(t, s, w.ID,
		O{Kind: core.OpMkdir, Path: "n"},
		O{Kind: core.OpCreate, Path: "n/x", Data: []byte("first")},
		O{Kind: core.OpDelete, Path: "n/x"},
		O{Kind: core.OpCreate, Path: "n/x", Data: []byte("second")},
		O{Kind: core.OpCreate, Path: "n/y", Data: []byte("why")},
		O{Kind: core.OpRename, From: "n/y", Path: "n/z"},
		O{Kind: core.OpRename, From: "n/z", Path: "n/y"},
		O{Kind: core.OpMkdir, Path: "n/d"},
		O{Kind: core.OpDelete, Path: "n/d"},
		O{Kind: core.OpMkdir, Path: "n/d"},
		O{Kind: core.OpSymlink, Path: "n/l", Target: "x"},
		O{Kind: core.OpDelete, Path: "n/l"},
		O{Kind: core.OpSymlink, Path: "n/l", Target: "y"},
		O{Kind: core.OpLink, From: "n/x", Path: "n/h"},
		O{Kind: core.OpDelete, Path: "n/h"},
		O{Kind: core.OpLink, From: "n/y", Path: "n/h"},
		O{Kind: core.OpCreate, Path: "n/d/f", Data: []byte("f")},
		O{Kind: core.OpDeleteAll, Path: "n/d"},
		O{Kind: core.OpMkdir, Path: "n/d"},
		O{Kind: core.OpCreate, Path: "n/d/f", Data: []byte("f2")},
		O{Kind: core.OpRename, From: "n/x", Path: "n/y", Exchange: true},
	)
	sn, _ := s.Snapshot(ctx, w.ID, core.Head)
	want := map[string]string{"n/x": "why", "n/y": "second", "n/h": "why", "n/d/f": "f2"}
	for p, v := range want {
		if got, err := sn.ReadFile(ctx, p); err != nil || string(got) != v {
			t.Errorf("%s = %q %v, want %q", p, got, err, v)
		}
	}
	if target, err := sn.Readlink(ctx, "n/l"); err != nil || target != "y" {
		t.Errorf("n/l -> %q %v", target, err)
	}
	es, _ := sn.ReadDir(ctx, "n")
	var names []string
	for _, e := range es {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"d", "h", "l", "x", "y"}) {
		t.Errorf("n holds %q", names)
	}
	bbCheck(t, s)
}

// ---------------------------------------------------------------------------
// GC

func TestGC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := fsstore.New(dir)
	s.ChunkSize = 16
	s.LeaseTime = time.Nanosecond // Put leases run out at once
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := bbOpenDB(t, s)
	// held reports how many of data's chunks the store holds, and how many it has.
	held := func(data []byte) (n, of int) {
		for off := 0; off < len(data); off += 16 {
			h := sha256.Sum256(data[off:min(off+16, len(data))])
			if bbCount(t, db, "SELECT count(*) FROM chunks WHERE hash = ?", h[:]) > 0 {
				n++
			}
			of++
		}
		return n, of
	}
	expect := func(when string, all map[string][]byte, present ...string) {
		t.Helper()
		for name, data := range all {
			n, of := held(data)
			want := slices.Contains(present, name)
			if want && n != of {
				t.Errorf("%s: %s: %d of %d chunks held, want all", when, name, n, of)
			}
			if !want && n != 0 {
				t.Errorf("%s: %s: %d of %d chunks held, want none", when, name, n, of)
			}
		}
	}
	content := map[string][]byte{}
	for _, n := range []string{"A", "B", "C", "D", "K", "E", "O"} {
		content[n] = distinctData("gc-"+n, 48)
	}
	w, _ := s.CreateWorkspace(ctx, "t", "ws")
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "x", Data: content["A"]}, core.Op{Kind: core.OpCreate, Path: "keep", Data: content["K"]}) // 2
	r3 := bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "x", Data: content["B"]})                                                           // 3
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "x", Data: content["C"]}, core.Op{Kind: core.OpCreate, Path: "y", Data: content["D"]})    // 4
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpDelete, Path: "x"})                                                                                     // 5
	f, err := s.Fork(ctx, w.ID, r3.Rev, "f")
	if err != nil {
		t.Fatal(err)
	}
	cE, err := s.Put(ctx, bytes.NewReader(content["E"]))
	if err != nil {
		t.Fatal(err)
	}
	bbCommit(t, s, f.ID, core.Op{Kind: core.OpCreate, Path: "z", Content: cE})

	st, err := s.GC(ctx)
	if err != nil || st.Chunks != 0 {
		t.Fatalf("GC with every revision kept: %+v %v", st, err)
	}
	expect("all kept", content, "A", "B", "C", "D", "K", "E")

	// An upload nobody commits goes once its lease is over.
	if _, err := s.Put(ctx, bytes.NewReader(content["O"])); err != nil {
		t.Fatal(err)
	}
	expect("uploaded", content, "A", "B", "C", "D", "K", "E", "O")
	time.Sleep(time.Millisecond)
	if st, err := s.GC(ctx); err != nil || st.Chunks != 3 || st.ChunkBytes != 48 {
		t.Errorf("GC of an expired upload: %+v %v", st, err)
	}
	expect("expired upload", content, "A", "B", "C", "D", "K", "E")

	// Pruning to the head keeps what the fork reads (revision 3) and what
	// the head reads; A (revision 2 only) and C (revision 4 only) go.
	if _, err := s.Prune(ctx, w.ID, fsstore.Policy{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.GC(ctx); err != nil || st.Chunks != 6 {
		t.Errorf("GC after prune: %+v %v", st, err)
	}
	expect("pruned", content, "B", "D", "K", "E")
	if got := bbRead(t, s, f.ID, core.Head, "x"); !bytes.Equal(got, content["B"]) {
		t.Errorf("fork reads x = %q", got)
	}
	if _, err := s.Snapshot(ctx, w.ID, r3.Rev); !errors.Is(err, core.ErrUnknownRevision) {
		t.Errorf("pruned revision: %v", err)
	}
	bbCheck(t, s)

	// Without the fork, and after another prune, B and E go too.
	if err := s.DeleteWorkspace(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, w.ID, fsstore.Policy{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	expect("fork deleted", content, "D", "K")
	if got := bbRead(t, s, w.ID, core.Head, "keep"); !bytes.Equal(got, content["K"]) {
		t.Errorf("keep = %q", got)
	}
	if got := bbRead(t, s, w.ID, core.Head, "y"); !bytes.Equal(got, content["D"]) {
		t.Errorf("y = %q", got)
	}
	bbCheck(t, s)
}

// TestGCLease checks that Put's lease protects uploads until it runs out, and
// that committing content whose chunks GC took fails cleanly: never by
// naming some other chunk.
func TestGCLease(t *testing.T) {
	ctx := context.Background()
	// A long lease: GC keeps the upload, and the commit after it works.
	s := MustOpen(t)
	w, _ := s.CreateWorkspace(ctx, "t", "ws")
	p := distinctData("lease-P", 40)
	c, err := s.Put(ctx, bytes.NewReader(p))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.GC(ctx); err != nil || st.Chunks != 0 {
		t.Errorf("GC took leased chunks: %+v %v", st, err)
	}
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "p", Content: c})
	if got := bbRead(t, s, w.ID, core.Head, "p"); !bytes.Equal(got, p) {
		t.Errorf("p = %q", got)
	}

	// An expired lease: GC takes the chunks, a new upload may get their row
	// ids, and the stale content must not bind to it.
	s2 := fsstore.New(t.TempDir())
	s2.ChunkSize = 16
	s2.LeaseTime = time.Nanosecond
	if err := s2.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	db := bbOpenDB(t, s2)
	w2, _ := s2.CreateWorkspace(ctx, "t", "ws")
	q := distinctData("lease-Q", 32)
	cq, err := s2.Put(ctx, bytes.NewReader(q))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	if st, err := s2.GC(ctx); err != nil || st.Chunks != 2 {
		t.Fatalf("GC of expired upload: %+v %v", st, err)
	}
	r := distinctData("lease-R", 32)
	cr, err := s2.Put(ctx, bytes.NewReader(r))
	if err != nil {
		t.Fatal(err)
	}
	before := bbCapture(t, s2, db)
	_, err = s2.Commit(ctx, w2.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpCreate, Path: "q", Content: cq}), fsstore.CommitInfo{})
	if !errors.Is(err, core.ErrMissingChunk) {
		t.Errorf("commit of collected content: %v, want core.ErrMissingChunk", err)
		if err == nil {
			t.Errorf("q reads %q (wrote %q)", bbRead(t, s2, w2.ID, core.Head, "q"), q)
		}
	} else {
		bbSameState(t, before, bbCapture(t, s2, db))
	}
	// Uploading it again makes it committable.
	cq2, err := s2.Put(ctx, bytes.NewReader(q))
	if err != nil {
		t.Fatal(err)
	}
	bbCommit(t, s2, w2.ID, core.Op{Kind: core.OpCreate, Path: "q", Content: cq2}, core.Op{Kind: core.OpCreate, Path: "r", Content: cr})
	if got := bbRead(t, s2, w2.ID, core.Head, "q"); !bytes.Equal(got, q) {
		t.Errorf("q = %q", got)
	}
	if got := bbRead(t, s2, w2.ID, core.Head, "r"); !bytes.Equal(got, r) {
		t.Errorf("r = %q", got)
	}
	bbCheck(t, s2)
}

// ---------------------------------------------------------------------------
// Concurrency: readers never see a half-committed revision.

func TestConcurrentReaders(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, _ := s.CreateWorkspace(ctx, "t", "ws")
	revs := 300
	if testing.Short() {
		revs = 80
	}
	// Revision r holds a and b (and d/c, moved around) all carrying value(r).
	value := func(r int64) []byte {
		v := fmt.Sprintf("value %06d|", r)
		return []byte(strings.Repeat(v, 1+int(r%5))) // several chunks, size varies
	}
	bbCommit(t, s, w.ID,
		core.Op{Kind: core.OpCreate, Path: "a", Data: value(2)},
		core.Op{Kind: core.OpCreate, Path: "b", Data: value(2)},
		core.Op{Kind: core.OpMkdir, Path: "d2"},
		core.Op{Kind: core.OpCreate, Path: "d2/c", Data: value(2)},
	)
	var head atomic.Int64
	head.Store(2)
	var done atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	errc := make(chan error, 16)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	check := func(sn *fsstore.Snapshot) error {
		r := sn.Rev
		want := value(r)
		dir := fmt.Sprintf("d%d", r%3)
		for _, p := range []string{"a", "b", dir + "/c"} {
			got, err := sn.ReadFile(ctx, p)
			if err != nil {
				return fmt.Errorf("rev %d: read %s: %w", r, p, err)
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("rev %d: %s = %q, want %q", r, p, got, want)
			}
		}
		es, err := sn.ReadDir(ctx, "")
		if err != nil {
			return err
		}
		if len(es) != 3 || es[2].Name != dir {
			return fmt.Errorf("rev %d: root holds %v, want a b %s", r, es, dir)
		}
		return nil
	}
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for !done.Load() {
				rev := core.Head
				if rng.IntN(2) == 0 {
					rev = 2 + rng.Int64N(head.Load()-1)
				}
				sn, err := s.Snapshot(ctx, w.ID, rev)
				if err != nil {
					fail(err)
					return
				}
				if err := check(sn); err != nil {
					fail(err)
					return
				}
				// The same snapshot reads the same after more commits.
				runtime.Gosched()
				if err := check(sn); err != nil {
					fail(fmt.Errorf("re-read: %w", err))
					return
				}
				reads.Add(1)
			}
		}(uint64(i))
	}
	for r := int64(3); r <= int64(revs)+2; r++ {
		ops := []core.Op{
			{Kind: core.OpCreate, Path: "a", Data: value(r)},
			{Kind: core.OpRename, From: fmt.Sprintf("d%d", (r-1)%3), Path: fmt.Sprintf("d%d", r%3)},
			{Kind: core.OpWrite, Path: fmt.Sprintf("d%d/c", r%3), Offset: 0, Data: value(r)},
			{Kind: core.OpTruncate, Path: fmt.Sprintf("d%d/c", r%3), Size: int64(len(value(r)))},
			{Kind: core.OpCreate, Path: "b.tmp", Data: value(r)},
			{Kind: core.OpRename, From: "b.tmp", Path: "b"},
		}
		rev, err := s.Commit(ctx, w.ID, &core.Batch{Ops: ops}, fsstore.CommitInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if rev.Rev != r {
			t.Fatalf("committed %d, want %d", rev.Rev, r)
		}
		head.Store(r)
		select {
		case err := <-errc:
			done.Store(true)
			wg.Wait()
			t.Fatal(err)
		default:
		}
	}
	done.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	t.Logf("%d revisions, %d snapshot reads", revs, reads.Load())
	if reads.Load() == 0 {
		t.Error("readers read nothing")
	}
	bbCheck(t, s)
}

// TestConcurrentPrune checks snapshots whose revision is pruned under them:
// their reads fail with core.ErrUnknownRevision, and never return partial trees
// or zeros in place of the bytes.
func TestConcurrentPrune(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, _ := s.CreateWorkspace(ctx, "t", "ws")
	y := distinctData("prune-y", 41)
	bbCommit(t, s, w.ID, // 2
		core.Op{Kind: core.OpMkdir, Path: "d"},
		core.Op{Kind: core.OpCreate, Path: "d/y", Data: y},
		core.Op{Kind: core.OpSymlink, Path: "l", Target: "d/y"},
		core.Op{Kind: core.OpCreate, Path: "keep", Data: []byte("kept")})
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpDeleteAll, Path: "d"}, core.Op{Kind: core.OpDelete, Path: "l"}) // 3
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "z", Data: []byte("z")})                          // 4
	old, err := s.Snapshot(ctx, w.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	f, err := old.Open(ctx, "d/y")
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := old.Stat(ctx, "d")
	head, _ := s.Snapshot(ctx, w.ID, core.Head)
	fk, err := s.Fork(ctx, w.ID, 2, "fork")
	if err != nil {
		t.Fatal(err)
	}
	forkSnap, _ := s.Snapshot(ctx, fk.ID, core.Head)
	if _, err := s.Prune(ctx, w.ID, fsstore.Policy{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	s3, err := s.Snapshot(ctx, w.ID, 3)
	if !errors.Is(err, core.ErrUnknownRevision) {
		t.Errorf("snapshot of pruned revision 3: %v", err)
	}
	_ = s3
	reads := map[string]func() error{
		"stat":       func() error { _, err := old.Stat(ctx, "keep"); return err },
		"stat gone":  func() error { _, err := old.Stat(ctx, "d/y"); return err },
		"readdir":    func() error { _, err := old.ReadDir(ctx, ""); return err },
		"readdirino": func() error { _, err := old.ReadDirIno(ctx, dst.Ino); return err },
		"lookup":     func() error { _, err := old.Lookup(ctx, dst.Ino, "y"); return err },
		"statino":    func() error { _, err := old.StatIno(ctx, dst.Ino); return err },
		"readlink":   func() error { _, err := old.Readlink(ctx, "l"); return err },
		"open":       func() error { _, err := old.Open(ctx, "d/y"); return err },
		"readfile":   func() error { _, err := old.ReadFile(ctx, "d/y"); return err },
		"walk":       func() error { return old.Walk(ctx, "", func(string, core.Stat) error { return nil }) },
		"readat":     func() error { _, err := f.ReadAt(make([]byte, 10), 0); return err },
		"read":       func() error { _, err := f.Read(make([]byte, 10)); return err },
		"readall":    func() error { _, err := io.ReadAll(f); return err },
		"diff":       func() error { _, err := s.Diff(ctx, w.ID, 2, core.Head); return err },
	}
	for name, fn := range reads {
		if err := fn(); !errors.Is(err, core.ErrUnknownRevision) {
			t.Errorf("%s at a pruned revision: %v, want core.ErrUnknownRevision", name, err)
		}
	}
	// The head, and the fork (which keeps revision 2's rows alive), read on.
	if got, err := head.ReadFile(ctx, "z"); err != nil || string(got) != "z" {
		t.Errorf("head snapshot after prune: %q %v", got, err)
	}
	if got, err := forkSnap.ReadFile(ctx, "d/y"); err != nil || !bytes.Equal(got, y) {
		t.Errorf("fork snapshot after prune: %q %v", got, err)
	}
	// A deleted workspace's snapshot fails likewise.
	if err := s.DeleteWorkspace(ctx, fk.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := forkSnap.ReadFile(ctx, "d/y"); !errors.Is(err, core.ErrWorkspaceNotFound) {
		t.Errorf("snapshot of a deleted workspace: %v, want core.ErrWorkspaceNotFound", err)
	}

	// Now concurrently: readers on recent revisions while the writer commits,
	// prunes and collects. Each read is right, or fails as unknown revision.
	w2, _ := s.CreateWorkspace(ctx, "t", "busy")
	value := func(r int64) []byte { return bytes.Repeat([]byte(fmt.Sprintf("<%05d>", r)), 1+int(r%4)) }
	bbCommit(t, s, w2.ID, core.Op{Kind: core.OpCreate, Path: "a", Data: value(2)}, core.Op{Kind: core.OpCreate, Path: "b", Data: value(2)})
	var headRev atomic.Int64
	headRev.Store(2)
	var done atomic.Bool
	var ok, gone atomic.Int64
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 3))
			for !done.Load() {
				h := headRev.Load()
				rev := max(2, h-rng.Int64N(15))
				sn, err := s.Snapshot(ctx, w2.ID, rev)
				if errors.Is(err, core.ErrUnknownRevision) {
					gone.Add(1)
					continue
				} else if err != nil {
					errc <- err
					return
				}
				fa, err := sn.Open(ctx, "a")
				for _, p := range []string{"a", "b", "a"} {
					var got []byte
					if err == nil {
						if p == "a" {
							got, err = io.ReadAll(io.NewSectionReader(fa, 0, fa.Size()))
						} else {
							got, err = sn.ReadFile(ctx, p)
						}
					}
					if errors.Is(err, core.ErrUnknownRevision) {
						gone.Add(1)
						break
					} else if err != nil {
						errc <- fmt.Errorf("rev %d %s: %w", rev, p, err)
						return
					}
					if !bytes.Equal(got, value(rev)) {
						errc <- fmt.Errorf("rev %d %s: %q, want %q", rev, p, got, value(rev))
						return
					}
					ok.Add(1)
					runtime.Gosched()
				}
			}
		}(uint64(i))
	}
	n := int64(300)
	if testing.Short() {
		n = 100
	}
	for r := int64(3); r <= n; r++ {
		bbCommit(t, s, w2.ID, core.Op{Kind: core.OpCreate, Path: "a", Data: value(r)}, core.Op{Kind: core.OpCreate, Path: "b", Data: value(r)})
		headRev.Store(r)
		if r%7 == 0 {
			if _, err := s.Prune(ctx, w2.ID, fsstore.Policy{KeepLast: 3}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GC(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	done.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	t.Logf("%d good reads, %d pruned away", ok.Load(), gone.Load())
	bbCheck(t, s)
}

// TestDedupAcrossStores applies a changeset made by one store to another
// that holds the same chunks under other row ids: content is found by hash.
func TestDedupAcrossStores(t *testing.T) {
	ctx := context.Background()
	a, b := MustOpen(t), MustOpen(t)
	wa, _ := a.CreateWorkspace(ctx, "t", "a")
	wb, _ := b.CreateWorkspace(ctx, "t", "b")
	data := distinctData("across", 100)
	bbCommit(t, a, wa.ID, core.Op{Kind: core.OpCreate, Path: "f", Data: data})
	// b holds other chunks first, then the same ones, under different ids.
	if _, err := b.Put(ctx, bytes.NewReader(distinctData("other", 200))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	cs, err := a.Diff(ctx, wa.ID, 1, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Apply(ctx, wb.ID, cs, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	if got := bbRead(t, b, wb.ID, core.Head, "f"); !bytes.Equal(got, data) {
		t.Errorf("applied in the other store: %q, want %q", got, data)
	}
	// Content from a's Put, committed in b, likewise.
	c, err := a.Put(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	bbCommit(t, b, wb.ID, core.Op{Kind: core.OpCreate, Path: "g", Content: c})
	if got := bbRead(t, b, wb.ID, core.Head, "g"); !bytes.Equal(got, data) {
		t.Errorf("put in one store, committed in the other: %q, want %q", got, data)
	}
	bbCheck(t, b)
}

package syncproto

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
	"computerd/internal/testheap"
)

// frameKinds lists the kinds of a stream's frames in order.
func frameKinds(t *testing.T, b []byte) string {
	t.Helper()
	var kinds strings.Builder
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("cut frame header")
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if n > MaxJSON+MaxChunk {
			t.Fatalf("frame of %d bytes", n)
		}
		if b[0] != KindChunk && n > MaxJSON {
			t.Fatalf("%c frame of %d bytes over MaxJSON", b[0], n)
		}
		kinds.WriteByte(b[0])
		b = b[5+n:]
	}
	return kinds.String()
}

// A changeset whose ops are more than a frame holds travels in several
// changeset frames, and comes back whole and in order.
func TestChangesetFrames(t *testing.T) {
	h := core.Hash(sha256.Sum256([]byte("x")))
	cs := &core.Changeset{From: 7, To: 9}
	for i := range 30000 {
		cs.Ops = append(cs.Ops, core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("dir%03d/file%06d.txt", i%100, i), Mode: 0o644, Mtime: int64(i) + 1,
			Content: &core.Content{Size: 1, Chunks: []core.ChunkRef{{Index: 0, Hash: h, Len: 1}}}})
	}
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.Header(testHeader{Kind: "push"}); err != nil {
		t.Fatal(err)
	}
	if err := enc.Chunk(h, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := enc.Changeset(cs); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	kinds := frameKinds(t, buf.Bytes())
	if n := strings.Count(kinds, "S"); n < 3 || !strings.HasPrefix(kinds, "HCS") || !strings.HasSuffix(kinds, "SE") {
		t.Fatalf("frames %q: want H C, several S, E", kinds)
	}
	_, _, got, err := decodeAll(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.From != 7 || got.To != 9 || !reflect.DeepEqual(got.Ops, cs.Ops) {
		t.Fatalf("decoded %d..%d with %d ops, want 7..9 with %d equal ops", got.From, got.To, len(got.Ops), len(cs.Ops))
	}
	// An empty changeset is one frame.
	if _, _, got, err := decodeAll(validStream(t)); err != nil || len(got.Ops) != 0 {
		t.Fatalf("empty changeset: %v %+v", err, got)
	}
}

// Changeset frames that disagree on the changeset's revisions, a chunk
// after the changeset, and ops no changeset holds are malformed.
func TestChangesetFramesMalformed(t *testing.T) {
	frame := func(kind byte, payload string) []byte {
		b := []byte{kind, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return append(b, payload...)
	}
	stream := func(frames ...[]byte) []byte {
		return bytes.Join(append([][]byte{frame(KindHeader, `{}`)}, frames...), nil)
	}
	end := frame(KindEnd, `{"chunks":0,"bytes":0}`)
	for name, b := range map[string][]byte{
		"revisions differ": stream(frame(KindChangeset, `{"from":1,"to":2,"ops":[]}`), frame(KindChangeset, `{"from":1,"to":3,"ops":[]}`), end),
		"chunk after":      stream(frame(KindChangeset, `{"from":1,"to":2,"ops":[]}`), frame(KindChunk, strings.Repeat("x", 40)), end),
		"unknown op":       stream(frame(KindChangeset, `{"from":1,"to":2,"ops":[{}]}`), end),
		"inline data":      stream(frame(KindChangeset, `{"from":1,"to":2,"ops":[{"op":"create","path":"a","data":"eA=="}]}`), end),
		"big frame":        stream(frame(KindChangeset, `{"from":1,"to":2,"ops":[`+strings.Repeat(`{"op":"delete","path":"a"},`, MaxJSON/27)+`{"op":"delete","path":"a"}]}`), end),
	} {
		if _, _, _, err := decodeAll(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// The content of a file with more chunks than an op carries travels as a
// create and writes, and commits to the same file.
func TestSplitContent(t *testing.T) {
	ctx := context.Background()
	open := func() *fsstore.Store {
		st := fsstore.New(t.TempDir())
		st.ChunkSize = 1024
		if err := st.Open(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	src, dst := open(), open()
	const chunks = 2*maxRefsPerOp + 10
	data := bytes.Repeat([]byte("0123456789abcdef"), chunks*1024/16+3) // the last chunk is short
	ws, err := src.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	c, err := src.Put(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano()
	if _, err := src.Commit(ctx, ws.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpCreate, Path: "big", Mode: 0o640, Content: c, Mtime: mtime}), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	cs, err := src.Diff(ctx, ws.ID, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	enc.Header(testHeader{})
	for _, h := range cs.Chunks() {
		b := data[:1024]
		if h != core.Hash(sha256.Sum256(b)) {
			b = data[len(data)-len(data)%1024:]
		}
		if err := enc.Chunk(h, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Changeset(cs); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	dec := NewDecoder(&buf)
	var hdr testHeader
	dec.Header(&hdr)
	up := dst.NewUploader()
	defer up.Close()
	var got *core.Changeset
	for got == nil {
		h, b, c, err := dec.Next()
		if err != nil {
			t.Fatal(err)
		}
		if c != nil {
			got = c.Changeset()
			break
		}
		if err := up.PutChunk(ctx, h, b); err != nil {
			t.Fatal(err)
		}
	}
	up.Flush(ctx)
	if len(got.Ops) != 5 || got.Ops[0].Kind != core.OpCreate || got.Ops[1].Kind != core.OpWrite || got.Ops[4].Kind != core.OpUtimes {
		t.Fatalf("split ops: %d, want create, 3 writes, utimes", len(got.Ops))
	}
	dws, _ := dst.CreateWorkspace(ctx, "t", "w")
	if _, err := dst.Apply(ctx, dws.ID, got, fsstore.CommitInfo{Base: 1}); err != nil {
		t.Fatal(err)
	}
	sn, _ := dst.Snapshot(ctx, dws.ID, core.Head)
	st, err := sn.Stat(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	back, _ := sn.ReadFile(ctx, "big")
	if !bytes.Equal(back, data) || st.Mtime.UnixNano() != mtime || st.Mode.Perm() != 0o640 {
		t.Fatalf("big: %d bytes (equal %v), mtime %v, mode %v", len(back), bytes.Equal(back, data), st.Mtime, st.Mode)
	}
}

// pushOps writes a push stream of n create ops, its changeset frames made
// as the decoder reads them, so the stream is never held whole.
func pushOps(w *io.PipeWriter, n int) {
	h := core.Hash(sha256.Sum256([]byte("x")))
	enc := NewEncoder(w)
	err := enc.Header(PushHeader{PushID: "p", Base: 1})
	if err == nil {
		err = enc.Chunk(h, []byte("x"))
	}
	// Frames as Encoder.Changeset makes them, a part of the ops at a time,
	// written straight as JSON.
	const per = 4000
	var b []byte
	for i := 0; err == nil && i < n; i += per {
		b = append(b[:0], `{"from":1,"to":2,"ops":[`...)
		for j := i; j < min(n, i+per); j++ {
			if j > i {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"op":"create","path":"dir%04d/file%07d.txt","mode":420,"mtime":%d,"content":{"size":1,"chunks":[{"i":0,"h":"%s","n":1}]}}`, j%1000, j, j+1, h)
		}
		b = append(b, "]}"...)
		err = enc.frame(KindChangeset, b)
	}
	if err == nil {
		enc.state = 2
		err = enc.Close()
	}
	w.CloseWithError(err)
}

// Decoding a push holds one frame and the ops it returns, packed: a
// changeset of about 64 MiB of JSON, which took over a gigabyte as one
// frame, stays under 64 MiB of heap; one frame that size is refused as
// it starts.
func TestDecodeHeap(t *testing.T) {
	const n = 300000 // about 64 MiB of JSON
	var cs *Received
	grew := testheap.Growth(func() {
		pr, pw := io.Pipe()
		go pushOps(pw, n)
		var hdr PushHeader
		dec := NewDecoder(pr)
		if err := dec.Header(&hdr); err != nil {
			t.Error(err)
			return
		}
		for cs == nil {
			_, _, c, err := dec.Next()
			if err != nil {
				t.Error(err)
				return
			}
			cs = c
		}
	})
	if cs == nil || cs.Ops.Len() != n {
		t.Fatalf("decoded %v", cs)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	held := ms.HeapAlloc
	runtime.KeepAlive(cs)
	cs = nil
	runtime.GC()
	runtime.ReadMemStats(&ms)
	ops := int64(held) - int64(ms.HeapAlloc)
	t.Logf("decoding %d ops: heap grew %.1f MiB at the peak; the packed ops returned hold %.1f MiB (%.0f bytes an op)", n,
		float64(grew)/(1<<20), float64(ops)/(1<<20), float64(ops)/n)
	if grew > 64<<20 {
		t.Fatalf("decoding grew the heap by %.1f MiB, want under 64 MiB", float64(grew)/(1<<20))
	}

	// One frame of 64 MiB is refused from its header, before its bytes.
	grew = testheap.Growth(func() {
		pr, pw := io.Pipe()
		go func() {
			enc := NewEncoder(pw)
			enc.Header(PushHeader{PushID: "p", Base: 1})
			hdr := []byte{KindChangeset, 0, 0, 0, 0}
			binary.BigEndian.PutUint32(hdr[1:], 64<<20)
			enc.w.Write(hdr)
			enc.w.Write(bytes.Repeat([]byte(" "), 64<<10))
			pw.CloseWithError(enc.w.Flush())
		}()
		dec := NewDecoder(pr)
		var hdr PushHeader
		dec.Header(&hdr)
		if _, _, _, err := dec.Next(); !errors.Is(err, ErrMalformed) {
			t.Errorf("64 MiB frame: %v, want ErrMalformed", err)
		}
		pr.Close()
	})
	if grew > 4<<20 {
		t.Fatalf("a refused 64 MiB frame grew the heap by %.1f MiB", float64(grew)/(1<<20))
	}
}

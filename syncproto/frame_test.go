package syncproto

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"reflect"
	"testing"

	"computerd/core"
)

type testHeader struct {
	Kind string `json:"kind"`
	Base int64  `json:"base"`
}

// validStream encodes a header, the given chunks and a changeset naming them.
func validStream(t testing.TB, chunks ...[]byte) []byte {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.Header(testHeader{Kind: "push", Base: 3}); err != nil {
		t.Fatal(err)
	}
	cs := &core.Changeset{From: 3, To: 4}
	for i, c := range chunks {
		h := core.Hash(sha256.Sum256(c))
		if err := enc.Chunk(h, c); err != nil {
			t.Fatal(err)
		}
		cs.Ops = append(cs.Ops, core.Op{Kind: core.OpCreate, Path: string(rune('a' + i)),
			Content: &core.Content{Size: int64(len(c)), Chunks: []core.ChunkRef{{Index: 0, Hash: h, Len: len(c)}}}})
	}
	if err := enc.Changeset(cs); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeAll reads a whole stream, returning what it held.
func decodeAll(b []byte) (testHeader, [][]byte, *core.Changeset, error) {
	d := NewDecoder(bytes.NewReader(b))
	var h testHeader
	if err := d.Header(&h); err != nil {
		return h, nil, nil, err
	}
	var chunks [][]byte
	for {
		_, data, cs, err := d.Next()
		if err != nil {
			return h, chunks, nil, err
		}
		if cs != nil {
			return h, chunks, cs.Changeset(), nil
		}
		chunks = append(chunks, bytes.Clone(data))
	}
}

func TestRoundTrip(t *testing.T) {
	chunks := [][]byte{[]byte("hello"), bytes.Repeat([]byte{7}, 300<<10), {}}
	h, got, cs, err := decodeAll(validStream(t, chunks...))
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != "push" || h.Base != 3 || !reflect.DeepEqual(got, chunks) || len(cs.Ops) != 3 || cs.Ops[1].Content.Chunks[0].Len != 300<<10 {
		t.Fatalf("round trip: %+v %d chunks, %+v", h, len(got), cs)
	}
}

func TestMalformed(t *testing.T) {
	good := validStream(t, []byte("abc"), []byte("defg"))
	badHash := bytes.Clone(good)
	i := bytes.Index(badHash, []byte("abc"))
	badHash[i] = 'x'
	for name, b := range map[string][]byte{
		"bad hash":     badHash,
		"unknown kind": append([]byte{'Z', 0, 0, 0, 0}, good...),
		"huge length":  {KindHeader, 0xff, 0xff, 0xff, 0xff},
		"chunk first":  good[bytes.IndexByte(good[1:], KindChunk)+1:],
	} {
		if _, _, _, err := decodeAll(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: error %v is not ErrMalformed", name, err)
		}
	}
}

// A stream that ends before its trailer is cut, not malformed: the
// transport failed, and the same stream may be sent again.
func TestCut(t *testing.T) {
	good := validStream(t, []byte("abc"), []byte("defg"))
	for name, b := range map[string][]byte{
		"empty":             {},
		"in a frame header": good[:3],
		"in a chunk":        good[:bytes.Index(good, []byte("defg"))+2],
		"truncated":         good[:len(good)-3],
		"no trailer":        good[:bytes.LastIndexByte(good, KindEnd)],
	} {
		_, _, _, err := decodeAll(b)
		if !errors.Is(err, ErrCut) || errors.Is(err, ErrMalformed) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v, want ErrCut wrapping io.ErrUnexpectedEOF", name, err)
		}
	}
	// The read's own error stays reachable: a deadline is a deadline.
	dec := NewDecoder(io.MultiReader(bytes.NewReader(good[:bytes.Index(good, []byte("abc"))]), errReader{os.ErrDeadlineExceeded}))
	var h map[string]any
	dec.Header(&h)
	if _, _, _, err := dec.Next(); !errors.Is(err, ErrCut) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a body past its deadline: %v, want ErrCut wrapping os.ErrDeadlineExceeded", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// FuzzDecoder: any input gets an error or a well-formed result, never a panic.
func FuzzDecoder(f *testing.F) {
	f.Add(validStream(f))
	f.Add(validStream(f, []byte("x")))
	f.Add(validStream(f, []byte("hello"), []byte("world")))
	f.Add([]byte{KindHeader, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, chunks, cs, err := decodeAll(b)
		if err != nil {
			return
		}
		if cs == nil {
			t.Fatal("no error and no changeset")
		}
		for _, c := range chunks {
			if len(c) > MaxChunk {
				t.Fatal("oversize chunk accepted")
			}
		}
	})
}

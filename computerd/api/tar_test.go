package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"testing"

	"computerd/computerd/api"
	"computerd/core"
	"computerd/fsstore"
	"computerd/internal/tartest"
)

// bound is what an archive of sent bytes may make, and a chunk more: a
// read past it fails, but what it read counts.
func bound(sent int) int64 {
	return max(fsstore.BoundFloor, fsstore.BoundRatio*int64(sent)) + fsstore.DefaultChunkSize
}

// ends keeps the size of what is written to it, and its first and last
// four bytes.
type ends struct {
	size       int64
	head, tail []byte
}

func (e *ends) Write(p []byte) (int, error) {
	if len(e.head) < 4 {
		e.head = append(e.head, p[:min(len(p), 4-len(e.head))]...)
	}
	e.tail = append(e.tail, p[max(0, len(p)-4):]...)
	e.tail = e.tail[max(0, len(e.tail)-4):]
	e.size += int64(len(p))
	return len(p), nil
}

// readAll reads every entry of archive as attach does, returning the
// regular files' ends, what was made beyond what was sent, and the first
// error.
func readAll(archive []byte) (map[string]*ends, int64, error) {
	files := map[string]*ends{}
	made, err := api.ReadArchive(bytes.NewReader(archive), func(hdr *tar.Header, name string, r io.Reader) error {
		if r == nil {
			return nil
		}
		// In chunks, as the store's Uploader reads.
		files[name] = &ends{}
		_, err := io.CopyBuffer(files[name], r, make([]byte, fsstore.DefaultChunkSize))
		return err
	})
	return files, made, err
}

// A sparse entry's zeros count as made: within the bound they read as the
// file, past it the read fails with core.ErrTooLarge, having made no more
// than the bound allows.
func TestArchiveSparseBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pad    int   // bytes of a plain file before the sparse one: sent
		size   int64 // the sparse file's size
		tooBig bool
	}{
		{"small", 0, 1 << 20, false},
		{"at the floor", 0, fsstore.BoundFloor - 1<<20, false},
		{"1 TiB in 3 KiB", 0, 1 << 40, true},
		{"past 1000 times what was sent", 128 << 10, 256 << 20, true},
		{"within 1000 times what was sent", 128 << 10, 100 << 20, false},
	} {
		for _, oldGNU := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/oldgnu=%v", tc.name, oldGNU), func(t *testing.T) {
				data := map[int64][]byte{0: []byte("head"), tc.size - 4: []byte("tail")}
				archive := tartest.Archive([]tartest.File{{Name: "pad", Data: bytes.Repeat([]byte{'p'}, tc.pad)}}, tartest.Sparse{Name: "sparse", Size: tc.size, Data: data, OldGNU: oldGNU})
				files, made, err := readAll(archive)
				t.Logf("%d bytes sent, %d made: %v", len(archive), made, err)
				if tc.tooBig {
					var be *fsstore.BoundError
					if !errors.Is(err, core.ErrTooLarge) || !errors.As(err, &be) {
						t.Fatalf("err %v, want a bound error", err)
					}
					if made > bound(len(archive)) {
						t.Fatalf("made %d before the refusal, want at most %d", made, bound(len(archive)))
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				got := files["sparse"]
				if got.size != tc.size || string(got.head) != "head" || string(got.tail) != "tail" || made != tc.size-8 {
					t.Fatalf("sparse: %d bytes (%q...%q), %d made; want %d bytes, %d made", got.size, got.head, got.tail, made, tc.size, tc.size-8)
				}
			})
		}
	}
}

// A plain archive makes nothing beyond what it sent; a gzip one makes its
// decompressed bytes, and a bomb meets the bound.
func TestArchiveCompressedBound(t *testing.T) {
	plain := func(size int) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)})
		tw.Write(make([]byte, size))
		tw.Close()
		return buf.Bytes()
	}
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	if _, made, err := readAll(plain(8 << 20)); err != nil || made != 0 {
		t.Fatalf("plain archive: %d made, %v; want 0", made, err)
	}
	if _, made, err := readAll(gz(plain(8 << 20))); err != nil || made < 8<<20 {
		t.Fatalf("gzip archive: %d made, %v; want its decompressed bytes", made, err)
	}
	bomb := gz(plain(128 << 20))
	if _, made, err := readAll(bomb); !errors.Is(err, core.ErrTooLarge) || made > bound(len(bomb)) {
		t.Fatalf("gzip bomb of %d bytes: %d made, %v; want a bound error by %d", len(bomb), made, err, bound(len(bomb)))
	}
}

// An entry with an empty name, or naming the root when it is not a
// directory, is invalid; the root as a directory ("./") is skipped.
func TestArchiveNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  tar.Header
		want string // the clean name, or "!" for invalid
	}{
		{"empty file", tar.Header{Name: "", Typeflag: tar.TypeReg}, "!"},
		{"empty directory", tar.Header{Name: "", Typeflag: tar.TypeDir}, "!"},
		{"file as the root", tar.Header{Name: ".", Typeflag: tar.TypeReg}, "!"},
		{"symlink as the root", tar.Header{Name: "a/..", Typeflag: tar.TypeSymlink, Linkname: "x"}, "!"},
		{"absolute", tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg}, "!"},
		{"escape", tar.Header{Name: "../x", Typeflag: tar.TypeReg}, "!"},
		{"root directory", tar.Header{Name: "./", Typeflag: tar.TypeDir}, ""},
		{"file", tar.Header{Name: "./a//b", Typeflag: tar.TypeReg}, "a/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			if err := tw.WriteHeader(&tc.hdr); err != nil {
				t.Fatal(err)
			}
			tw.Close()
			var got []string
			_, err := api.ReadArchive(&buf, func(_ *tar.Header, name string, _ io.Reader) error {
				got = append(got, name)
				return nil
			})
			if tc.want == "!" {
				if !errors.Is(err, core.ErrInvalidArgument) {
					t.Fatalf("names %q, err %v; want invalid", got, err)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0] != tc.want {
				t.Fatalf("names %q, err %v; want %q", got, err, tc.want)
			}
		})
	}
}

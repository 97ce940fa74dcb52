package fsstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"computerd/fsstore"
)

// seekFile is a file whose holes are found with SEEK_DATA.
type seekFile struct {
	*os.File
	seeks *int
}

func (f seekFile) DataAfter(off int64) (int64, error) {
	*f.seeks++
	d, err := f.Seek(off, 3) // SEEK_DATA
	if errors.Is(err, syscall.ENXIO) {
		return 0, io.EOF
	}
	return d, err
}

// PutFile makes of a sparse file the content Put makes of its bytes, and
// its work follows the file's data, not its length.
func TestPutFileSkipsHoles(t *testing.T) {
	ctx := context.Background()
	s := fsstore.New(t.TempDir())
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cs := s.ChunkSizeBytes()
	for _, tt := range []struct {
		name   string
		size   int64
		writes map[int64]string
	}{
		{"empty", 0, nil},
		{"all hole", 10 * cs, nil},
		{"data at both ends", 64 * cs, map[int64]string{0: "head", 64*cs - 3: "end"}},
		{"data across a chunk boundary", 8 * cs, map[int64]string{3*cs - 2: "span"}},
		{"short last chunk", 5*cs + 17, map[int64]string{5*cs + 10: "tail"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(tt.size); err != nil {
				t.Fatal(err)
			}
			for off, data := range tt.writes {
				if _, err := f.WriteAt([]byte(data), off); err != nil {
					t.Fatal(err)
				}
			}
			all, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			up := s.NewUploader()
			defer up.Close()
			want, err := up.Put(ctx, bytes.NewReader(all))
			if err != nil {
				t.Fatal(err)
			}
			seeks := 0
			got, err := up.PutFile(ctx, seekFile{f, &seeks}, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			if got.Size != want.Size || !reflect.DeepEqual(got.Chunks, want.Chunks) {
				t.Fatalf("PutFile: %+v, Put of its bytes: %+v", got, want)
			}
			// One look for data per chunk with data, and one per hole.
			if limit := 2*len(tt.writes) + 2; seeks > limit {
				t.Fatalf("%d SEEK_DATA calls for %d writes in %d chunks", seeks, len(tt.writes), tt.size/cs)
			}
		})
	}
}

var _ fsstore.HoleFile = seekFile{}

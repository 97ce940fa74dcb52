package fsstore_test

import (
	"context"
	"testing"

	"computerd/fsstore"
)

// MustOpen opens a store in a temporary directory with a 16-byte chunk size,
// so small test files span several chunks.
func MustOpen(tb testing.TB) *fsstore.Store {
	tb.Helper()
	s := fsstore.New(tb.TempDir())
	s.ChunkSize = 16
	if err := s.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

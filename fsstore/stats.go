package fsstore

import (
	"context"
	"os"
	"path/filepath"
)

// Stats are store-wide totals, cheap enough to read on every metrics scrape.
type Stats struct {
	Workspaces    int64 `json:"workspaces"`     // live workspaces, every tenant
	Revisions     int64 `json:"revisions"`      // retained revisions
	Chunks        int64 `json:"chunks"`         // unique chunks
	LogicalBytes  int64 `json:"logical_bytes"`  // bytes of unique content (sum of chunk sizes)
	PhysicalBytes int64 `json:"physical_bytes"` // the database and its WAL on disk
}

// Stats counts workspaces, revisions and chunks and sizes the files on disk.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.rdb.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM workspaces WHERE deleted_ns IS NULL),
		(SELECT count(*) FROM revisions),
		(SELECT count(*) FROM chunks INDEXED BY chunks_size),
		(SELECT COALESCE(sum(size), 0) FROM chunks INDEXED BY chunks_size)`).
		Scan(&st.Workspaces, &st.Revisions, &st.Chunks, &st.LogicalBytes)
	if err != nil {
		return st, wrapDB("stats", err)
	}
	for _, name := range []string{"store.db", "store.db-wal"} {
		if fi, err := os.Stat(filepath.Join(s.Dir, name)); err == nil {
			st.PhysicalBytes += fi.Size()
		}
	}
	return st, nil
}

package fsstore

import (
	"context"
	"strings"

	"computerd/core"
)

// HasChunks reports, for each hash, whether the store holds that chunk.
func (s *Store) HasChunks(ctx context.Context, hashes []core.Hash) ([]bool, error) {
	out := make([]bool, len(hashes))
	const batch = 500
	for start := 0; start < len(hashes); start += batch {
		part := hashes[start:min(start+batch, len(hashes))]
		args := make([]any, len(part))
		for i := range part {
			args[i] = part[i][:]
		}
		rows, err := s.rdb.QueryContext(ctx, `SELECT hash FROM chunks WHERE hash IN (?`+strings.Repeat(",?", len(part)-1)+`)`, args...)
		if err != nil {
			return nil, wrapDB("look up chunks", err)
		}
		have := map[core.Hash]bool{}
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				rows.Close()
				return nil, wrapDB("look up chunks", err)
			}
			var h core.Hash
			copy(h[:], b)
			have[h] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, wrapDB("look up chunks", err)
		}
		for i, h := range part {
			out[start+i] = have[h]
		}
	}
	return out, nil
}

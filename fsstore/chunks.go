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

// HasChunks is Store.HasChunks for chunks a commit is about to name: each
// chunk it reports present is leased to u, as if u had written it, so GC
// cannot take it between the look-up and the commit (a chunk no row names
// may be present now and gone by then).
func (u *Uploader) HasChunks(ctx context.Context, hashes []core.Hash) ([]bool, error) {
	if u.closed {
		return nil, errUploaderClosed
	}
	s := u.s
	if s.Shared {
		return nil, errShared
	}
	out := make([]bool, len(hashes))
	const batch = 500
	for start := 0; start < len(hashes); start += batch {
		part := hashes[start:min(start+batch, len(hashes))]
		ids, err := u.leaseKnown(ctx, part)
		if err != nil {
			return nil, err
		}
		for i, h := range part {
			_, out[start+i] = ids[h]
		}
	}
	return out, nil
}

// leaseKnown finds the chunks of hashes the store holds and leases them to
// u, under the writer lock so that no GC comes in between.
func (u *Uploader) leaseKnown(ctx context.Context, hashes []core.Hash) (map[core.Hash]int64, error) {
	s := u.s
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil, core.ErrClosed
	}
	args := make([]any, len(hashes))
	for i := range hashes {
		args[i] = hashes[i][:]
	}
	rows, err := s.wconn.QueryContext(ctx, `SELECT id, hash FROM chunks WHERE hash IN (?`+strings.Repeat(",?", len(hashes)-1)+`)`, args...)
	if err != nil {
		return nil, wrapDB("look up chunks", err)
	}
	defer rows.Close()
	ids := map[core.Hash]int64{}
	for rows.Next() {
		var id int64
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			return nil, wrapDB("look up chunks", err)
		}
		var h core.Hash
		copy(h[:], b)
		ids[h] = id
	}
	if err := rows.Err(); err != nil {
		return nil, wrapDB("look up chunks", err)
	}
	if u.held == nil {
		u.held = map[int64]struct{}{}
	}
	for _, id := range ids {
		if _, ok := u.held[id]; !ok {
			u.held[id] = struct{}{}
			l := s.leases[id]
			l.holders++
			s.leases[id] = l
		}
	}
	return ids, nil
}

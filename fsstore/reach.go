package fsstore

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"computerd/core"
)

// Chunks are shared by every tenant (the bytes are stored once), so a hash
// must not work as a key to them: a caller who could name any stored
// chunk in a write could confirm a guessed file of another tenant, or
// guess a short secret hash by hash, and then read it back. A confined
// commit (CommitInfo.Confine) therefore names by hash only
//   - chunks the request sent (CommitInfo.Sent's PutChunk), or that the
//     commit's own writes stored, and
//   - chunks the workspace's tenant reaches: referenced by a row of one of
//     its workspaces or drafts.
// Anything else is ErrMissingChunk.
//
// The refusal must not tell "stored for someone else" from "not stored":
// not by its answer, and not by its time. So reachQuery does the same
// work for both: one probe of the chunks' hash index, whose answer (a row
// id, or 0 for none) is never tested on its own but only becomes part of
// the key of the next probes, then one probe of extents_ws_chunk (ws,
// chunk) per workspace of the tenant. No probe is skipped when the chunk
// is unknown, and since the index leads with the workspace, each probe
// lands among the tenant's own rows: what other tenants hold near the
// chunk's key never comes into it. (An index led by the chunk did: a
// probe landing in a run of another tenant's rows of that chunk cost
// ~150 ns more than one landing before every row, per workspace of the
// tenant, a gap a tenant could widen by making workspaces.) The cost
// grows with the tenant's number of workspaces (~0.5 us each), not with
// how many rows reference the chunk elsewhere.

// reachQuery finds chunk ?3 (a hash) among the rows of the workspaces of
// tenants ?1 and ?2 (a tenant and its drafts). CROSS JOIN keeps the
// workspaces outside, INDEXED BY the probe on (ws, chunk);
// TestReachQueryPlan holds SQLite to that plan.
const reachQuery = `SELECT e.chunk FROM workspaces w CROSS JOIN extents e INDEXED BY extents_ws_chunk
	WHERE w.tenant IN (?1, ?2) AND e.chunk = coalesce((SELECT id FROM chunks WHERE hash = ?3), 0) AND e.ws = w.id
	LIMIT 1`

// wasSent reports whether the bytes of chunk h came with the request.
func (t *wtx) wasSent(h core.Hash) bool {
	if t.written[h] {
		return true
	}
	if t.sent == nil {
		return false
	}
	_, ok := t.sent.known[h]
	return ok
}

// reachedChunk finds the row of chunk h, which a confined commit names
// without having sent it, if the workspace's tenant reaches it.
func (t *wtx) reachedChunk(h core.Hash) (int64, error) {
	id, ok := t.reached[h]
	if !ok {
		tenant := strings.TrimPrefix(t.ws.tenant, draftTenantPrefix)
		err := t.q.chunkReach.QueryRowContext(t.ctx, tenant, draftTenantPrefix+tenant, h[:]).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			id = 0
		} else if err != nil {
			return 0, wrapDB("find chunk", err)
		}
		if t.reached == nil {
			t.reached = map[core.Hash]int64{}
		}
		t.reached[h] = id
	}
	if id == 0 {
		return 0, fmt.Errorf("chunk %s: neither sent with the request nor in a workspace of this tenant: %w", h, core.ErrMissingChunk)
	}
	return id, nil
}

package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"computerd/core"
)

// Policy says which revisions Prune keeps: a revision goes only if no rule
// keeps it. The head is always kept, and so is any revision a fork was made
// from (its rows, at least). The zero Policy keeps everything.
type Policy struct {
	KeepLast  int           // keep the newest KeepLast revisions (0: no count rule)
	KeepSince time.Time     // keep revisions made at or after this time (zero: no time rule)
	KeepFor   time.Duration // keep revisions younger than this when Prune runs, by Store.Now (0: no age rule)
}

// DefaultPolicy is computerd serve's retention: every revision of the last
// seven days, and the last 100 of each workspace however old, so that a
// workspace left alone for a while keeps its recent history.
var DefaultPolicy = Policy{KeepLast: 100, KeepFor: 7 * 24 * time.Hour}

// ParsePolicy reads a policy as String writes it: "all" (keep everything,
// the zero Policy), or comma-separated rules "for=AGE" (a Go duration or a
// number of days such as 7d) and "last=N", e.g. "for=7d,last=100".
func ParsePolicy(text string) (Policy, error) {
	var p Policy
	text = strings.TrimSpace(text)
	if text == "all" {
		return p, nil
	}
	for _, rule := range strings.Split(text, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(rule), "=")
		switch {
		case ok && key == "last":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return Policy{}, fmt.Errorf("retention %q: last=%s: want a count above 0: %w", text, val, core.ErrInvalidArgument)
			}
			p.KeepLast = n
		case ok && key == "for":
			var d time.Duration
			var err error
			if days, found := strings.CutSuffix(val, "d"); found {
				var n int
				if n, err = strconv.Atoi(days); err == nil {
					d = time.Duration(n) * 24 * time.Hour
				}
			} else {
				d, err = time.ParseDuration(val)
			}
			if err != nil || d <= 0 {
				return Policy{}, fmt.Errorf("retention %q: for=%s: want an age above 0 such as 7d or 36h: %w", text, val, core.ErrInvalidArgument)
			}
			p.KeepFor = d
		default:
			return Policy{}, fmt.Errorf("retention %q: want \"all\" or rules for=AGE,last=N: %w", text, core.ErrInvalidArgument)
		}
	}
	return p, nil
}

// String writes p as ParsePolicy reads it (KeepSince, an instant, is left
// out).
func (p Policy) String() string {
	var rules []string
	if p.KeepFor > 0 {
		if p.KeepFor%(24*time.Hour) == 0 {
			rules = append(rules, fmt.Sprintf("for=%dd", p.KeepFor/(24*time.Hour)))
		} else {
			rules = append(rules, "for="+p.KeepFor.String())
		}
	}
	if p.KeepLast > 0 {
		rules = append(rules, fmt.Sprintf("last=%d", p.KeepLast))
	}
	if len(rules) == 0 {
		return "all"
	}
	return strings.Join(rules, ",")
}

// PruneStats reports what Prune and GC removed.
type PruneStats struct {
	Revisions  int   `json:"revisions"`
	Rows       int64 `json:"rows"`
	Chunks     int64 `json:"chunks"`
	ChunkBytes int64 `json:"chunk_bytes"`
}

// Prune forgets the revisions of ws that the policy does not keep and drops
// the rows only they could read. Chunks are left to GC.
func (s *Store) Prune(ctx context.Context, ws int64, p Policy) (PruneStats, error) {
	var st PruneStats
	err := s.collect(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, ws)
		if err != nil {
			return err
		}
		if p.KeepFor > 0 {
			if since := s.Now().Add(-p.KeepFor); p.KeepSince.IsZero() || since.Before(p.KeepSince) {
				p.KeepSince = since
			}
		}
		if p.KeepLast <= 0 && p.KeepSince.IsZero() {
			return nil // no rule: keep everything
		}
		// A revision goes only if no rule keeps it.
		cut, since := int64(math.MaxInt64), int64(math.MaxInt64)
		if p.KeepLast > 0 {
			cut = w.Head - int64(p.KeepLast) + 1
		}
		if !p.KeepSince.IsZero() {
			since = p.KeepSince.UnixNano()
		}
		res, err := s.wconn.ExecContext(ctx, `DELETE FROM revisions WHERE ws = ? AND rev < ? AND rev < ? AND time_ns < ?`,
			ws, cut, w.Head, since)
		if err != nil {
			return wrapDB("prune revisions", err)
		}
		n, _ := res.RowsAffected()
		st.Revisions = int(n)
		st.Rows, err = s.collectRows(ctx, ws)
		return err
	})
	return st, err
}

// Retain prunes every workspace by p and then collects the chunks no row
// references (GC): the pass computerd serve runs on its retention policy,
// and computerd store gc once. Drafts are left alone: an exec's or mount's
// draft is read from its first revision on when its changes are delivered,
// and goes as a whole once they are. A workspace deleted meanwhile is
// skipped.
func (s *Store) Retain(ctx context.Context, p Policy) (PruneStats, error) {
	defer s.KeepReserve() // GC may have made room for it
	var total PruneStats
	if p != (Policy{}) {
		wss, err := s.Workspaces(ctx, "")
		if err != nil {
			return total, err
		}
		for _, w := range wss {
			if strings.HasPrefix(w.Tenant, draftTenantPrefix) {
				continue
			}
			st, err := s.Prune(ctx, w.ID, p)
			if errors.Is(err, core.ErrWorkspaceNotFound) {
				continue
			} else if err != nil {
				return total, fmt.Errorf("prune %s/%s: %w", w.Tenant, w.Name, err)
			}
			total.Revisions += st.Revisions
			total.Rows += st.Rows
		}
	}
	st, err := s.GC(ctx)
	if err != nil {
		return total, err
	}
	total.Chunks, total.ChunkBytes = st.Chunks, st.ChunkBytes
	return total, nil
}

// collect runs fn, a write transaction that may delete tree rows, with
// Store.pruned odd while it runs and moved on once it is over, so that
// snapshots can tell when rows may have gone under them (Snapshot.settle).
func (s *Store) collect(ctx context.Context, fn func() error) error {
	if s.Shared {
		return errShared
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return core.ErrClosed
	}
	s.pruned.Add(1)
	defer s.pruned.Add(1)
	return s.inTx(ctx, fn)
}

// keptPoints lists the revisions of layer ws that something can still read:
// its retained revisions if it is live, and the fork points of its forks.
func (s *Store) keptPoints(ctx context.Context, ws int64) ([]int64, error) {
	rows, err := s.wconn.QueryContext(ctx, `
		SELECT rev FROM revisions WHERE ws = ?1 AND EXISTS (SELECT 1 FROM workspaces WHERE id = ?1 AND deleted_ns IS NULL)
		UNION SELECT base_rev FROM workspaces WHERE base_ws = ?1`, ws)
	if err != nil {
		return nil, wrapDB("kept revisions", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var r int64
		if err := rows.Scan(&r); err != nil {
			return nil, wrapDB("kept revisions", err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, wrapDB("kept revisions", rows.Err())
}

// collectRows deletes the rows of layer ws that no kept point can see.
func (s *Store) collectRows(ctx context.Context, ws int64) (int64, error) {
	kept, err := s.keptPoints(ctx, ws)
	if err != nil || len(kept) == 0 {
		return 0, err
	}
	var total int64
	del := func(q string, args ...any) error {
		for _, table := range []string{"dentries", "inodes", "extents"} {
			res, err := s.wconn.ExecContext(ctx, fmt.Sprintf(q, table), args...)
			if err != nil {
				return wrapDB("prune rows", err)
			}
			n, _ := res.RowsAffected()
			total += n
		}
		return nil
	}
	if err := del(`DELETE FROM %s WHERE ws = ? AND death <= ?`, ws, kept[0]); err != nil {
		return total, err
	}
	for i := 0; i+1 < len(kept); i++ {
		if kept[i+1] > kept[i]+1 {
			if err := del(`DELETE FROM %s WHERE ws = ? AND birth > ? AND death <= ?`, ws, kept[i], kept[i+1]); err != nil {
				return total, err
			}
		}
	}
	if err := del(`DELETE FROM %s WHERE ws = ? AND birth > ?`, ws, kept[len(kept)-1]); err != nil {
		return total, err
	}
	// Tombstones older than every kept point mean the same as no row,
	// unless they hide a base layer's entry.
	info, err := s.workspaceInfo(ctx, s.wconn, ws)
	if err != nil {
		return total, err
	}
	if info.baseWS == 0 {
		for _, q := range []string{
			`DELETE FROM dentries WHERE ws = ? AND ino = 0 AND birth <= ?`,
			`DELETE FROM extents WHERE ws = ? AND chunk IS NULL AND birth <= ?`,
		} {
			res, err := s.wconn.ExecContext(ctx, q, ws, kept[0])
			if err != nil {
				return total, wrapDB("prune tombstones", err)
			}
			n, _ := res.RowsAffected()
			total += n
		}
	}
	return total, nil
}

// collectLayer drops what a deleted workspace no longer needs: everything,
// once no fork reads through to it, and then its base in turn.
func (s *Store) collectLayer(ctx context.Context, ws int64) error {
	for ws != 0 {
		var deleted, children int
		var base int64
		err := s.wconn.QueryRowContext(ctx, `SELECT deleted_ns IS NOT NULL, COALESCE(base_ws, 0),
			(SELECT count(*) FROM workspaces c WHERE c.base_ws = w.id) FROM workspaces w WHERE id = ?`, ws).Scan(&deleted, &base, &children)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // collected already (through a fork of it)
		}
		if err != nil {
			return wrapDB("collect workspace", err)
		}
		if deleted == 0 {
			return nil
		}
		if children > 0 {
			_, err := s.collectRows(ctx, ws)
			return err
		}
		for _, q := range []string{
			`DELETE FROM dentries WHERE ws = ?`, `DELETE FROM inodes WHERE ws = ?`, `DELETE FROM extents WHERE ws = ?`,
			`DELETE FROM revisions WHERE ws = ?`, `DELETE FROM workspaces WHERE id = ?`,
		} {
			if _, err := s.wconn.ExecContext(ctx, q, ws); err != nil {
				return wrapDB("collect workspace", err)
			}
		}
		s.uncache(ws)
		ws = base
	}
	return nil
}

// GC deletes chunks that no row references, except those leased (written
// by an Uploader still open, or by Put within Store.LeaseTime and not yet
// committed), and returns their space to the file system.
func (s *Store) GC(ctx context.Context) (PruneStats, error) {
	var st PruneStats
	err := s.write(ctx, func() error {
		now := time.Now()
		for id, l := range s.leases {
			if !l.held(now) {
				delete(s.leases, id)
			}
		}
		rows, err := s.wconn.QueryContext(ctx, `SELECT id, size FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM extents e WHERE e.chunk = c.id)`)
		if err != nil {
			return wrapDB("gc", err)
		}
		type cand struct{ id, size int64 }
		var cands []cand
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.id, &c.size); err != nil {
				rows.Close()
				return wrapDB("gc", err)
			}
			if _, leased := s.leases[c.id]; !leased {
				cands = append(cands, c)
			}
		}
		rows.Close()
		for _, c := range cands {
			if _, err := s.wconn.ExecContext(ctx, `DELETE FROM chunks WHERE id = ?`, c.id); err != nil {
				return wrapDB("gc", err)
			}
			st.Chunks++
			st.ChunkBytes += c.size
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return st, core.ErrClosed
	}
	// Outside a transaction: hand freed pages back to the file system.
	_, err = s.wconn.ExecContext(ctx, `PRAGMA incremental_vacuum`)
	return st, s.noSpace(wrapDB("vacuum", err))
}

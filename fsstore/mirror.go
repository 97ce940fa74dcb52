package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"computerd/core"
)

// A mirror is a workspace an executor keeps equal to a home's: the mirrors
// table records which revision of which home workspace one of its
// revisions equals. Commits with CommitInfo.HomeRev write it;
// RecordMirror writes it alone.

// Mirrored is a mirror's record: its revision Rev holds the tree of
// revision HomeRev of the home's workspace of id HomeWS (0: not known, a
// mirror recorded before the home's ids were).
type Mirrored struct {
	Rev, HomeRev, HomeWS int64
}

// Mirror returns the record of mirror ws (all zero if none was ever made).
func (s *Store) Mirror(ctx context.Context, ws int64) (Mirrored, error) {
	var m Mirrored
	err := s.rdb.QueryRowContext(ctx, `SELECT rev, home_rev, home_ws FROM mirrors WHERE ws = ?`, ws).Scan(&m.Rev, &m.HomeRev, &m.HomeWS)
	if errors.Is(err, sql.ErrNoRows) {
		return Mirrored{}, nil
	}
	return m, wrapDB("read mirror", err)
}

// RecordMirror records m for ws, whose head m.Rev must be: for a pull
// that found nothing to change, which commits no revision.
func (s *Store) RecordMirror(ctx context.Context, ws int64, m Mirrored) error {
	if m.HomeRev <= 0 {
		return fmt.Errorf("home revision %d: %w", m.HomeRev, core.ErrInvalidArgument)
	}
	return s.write(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, ws)
		if err != nil {
			return err
		}
		if w.Head != m.Rev {
			// Committed to since the caller looked: rev no longer says
			// what the workspace holds.
			return fmt.Errorf("mirror %s: revision %d is not the head (%d): %w", w.Name, m.Rev, w.Head, core.ErrConflict)
		}
		return s.setMirror(ctx, ws, m)
	})
}

// setMirror writes the mirrors row of ws; the caller is in a write transaction.
func (s *Store) setMirror(ctx context.Context, ws int64, m Mirrored) error {
	_, err := s.wconn.ExecContext(ctx, `INSERT INTO mirrors(ws, rev, home_rev, home_ws) VALUES (?, ?, ?, ?)
		ON CONFLICT(ws) DO UPDATE SET rev = excluded.rev, home_rev = excluded.home_rev, home_ws = excluded.home_ws`, ws, m.Rev, m.HomeRev, m.HomeWS)
	return wrapDB("record mirror", err)
}

// ExecutorHome is what an executor's store keeps of its home from the last
// handshake: the home's URL and the tenant the executor serves there.
type ExecutorHome struct {
	URL, Tenant string
}

// ExecutorHome returns what SetExecutorHome recorded (zero if nothing).
func (s *Store) ExecutorHome(ctx context.Context) (ExecutorHome, error) {
	var h ExecutorHome
	err := s.rdb.QueryRowContext(ctx, `SELECT url, tenant FROM executor_home WHERE id = 1`).Scan(&h.URL, &h.Tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return ExecutorHome{}, nil
	}
	return h, wrapDB("read executor home", err)
}

// SetExecutorHome records h, for a start while the home cannot be reached.
func (s *Store) SetExecutorHome(ctx context.Context, h ExecutorHome) error {
	return s.write(ctx, func() error {
		_, err := s.wconn.ExecContext(ctx, `INSERT INTO executor_home(id, url, tenant) VALUES (1, ?, ?)
			ON CONFLICT(id) DO UPDATE SET url = excluded.url, tenant = excluded.tenant`, h.URL, h.Tenant)
		return wrapDB("record executor home", err)
	})
}

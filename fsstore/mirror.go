package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"computerd/core"
)

// A mirror is a workspace an executor keeps equal to a home's: the mirrors
// table records which home revision one of its revisions equals. Commits
// with CommitInfo.HomeRev write it; RecordMirror writes it alone.

// Mirror returns the revision of ws that equals a home revision, and that
// home revision (0, 0 if none was ever recorded).
func (s *Store) Mirror(ctx context.Context, ws int64) (rev, homeRev int64, err error) {
	err = s.rdb.QueryRowContext(ctx, `SELECT rev, home_rev FROM mirrors WHERE ws = ?`, ws).Scan(&rev, &homeRev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, nil
	}
	return rev, homeRev, wrapDB("read mirror", err)
}

// RecordMirror records that revision rev of ws, which must be its head,
// equals home revision homeRev: for a pull that found nothing to change,
// which commits no revision.
func (s *Store) RecordMirror(ctx context.Context, ws, rev, homeRev int64) error {
	if homeRev <= 0 {
		return fmt.Errorf("home revision %d: %w", homeRev, core.ErrInvalidArgument)
	}
	return s.write(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, ws)
		if err != nil {
			return err
		}
		if w.Head != rev {
			// Committed to since the caller looked: rev no longer says
			// what the workspace holds.
			return fmt.Errorf("mirror %s: revision %d is not the head (%d): %w", w.Name, rev, w.Head, core.ErrConflict)
		}
		return s.setMirror(ctx, ws, rev, homeRev)
	})
}

// setMirror writes the mirrors row of ws; the caller is in a write transaction.
func (s *Store) setMirror(ctx context.Context, ws, rev, homeRev int64) error {
	_, err := s.wconn.ExecContext(ctx, `INSERT INTO mirrors(ws, rev, home_rev) VALUES (?, ?, ?)
		ON CONFLICT(ws) DO UPDATE SET rev = excluded.rev, home_rev = excluded.home_rev`, ws, rev, homeRev)
	return wrapDB("record mirror", err)
}

package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"computerd/core"
)

// commitStage moves what the hidden fork stage (made at ws's head by
// NewImport) holds into ws as one new revision, in one transaction that
// also drops the stage. The rows the stage wrote are copied into ws as
// born in the new revision, and the rows of ws they replace die there;
// no op is replayed and nothing is held in memory per entry. It fails
// with core.ErrConflict if ws has moved since the stage was made: the
// stage's rows were written against that head. A revision already made
// with info.Key is answered instead (nothing is written but the stage's
// removal).
func (s *Store) commitStage(ctx context.Context, ws, stage int64, info CommitInfo) (core.Revision, error) {
	var t *wtx
	var replay *core.Revision
	err := s.collect(ctx, func() error {
		var err error
		if replay, err = s.keyedRevision(ctx, ws, info.Key); err != nil {
			return err
		} else if replay != nil {
			return s.dropStage(ctx, stage)
		}
		st, err := s.liveWorkspace(ctx, s.wconn, stage)
		if err != nil {
			return err
		}
		if t, err = s.begin(ctx, ws, CommitInfo{Metered: info.Metered}); err != nil {
			return err
		}
		if head := t.rev - 1; head != st.BaseRev {
			return fmt.Errorf("the workspace moved from revision %d to %d while the import was staged; nothing was committed: %w", st.BaseRev, head, core.ErrConflict)
		}
		var fork bool
		if err := s.wconn.QueryRowContext(ctx, `SELECT base_ws IS NOT NULL FROM workspaces WHERE id = ?`, ws).Scan(&fork); err != nil {
			return wrapDB("commit import", err)
		}
		if err := s.wconn.QueryRowContext(ctx, `SELECT COALESCE(SUM(changes), 0) FROM revisions WHERE ws = ?`, stage).Scan(&t.changes); err != nil {
			return wrapDB("commit import", err)
		}
		if t.changes == 0 {
			return fmt.Errorf("commit: no changes: %w", core.ErrInvalidArgument)
		}
		// An inode dropped in the stage is a row of nlink 0 there (see
		// dropInode); ws keeps such a row only if it is a fork itself, and
		// its extents in ws die with it. Each statement runs over a range
		// of at most stageChunk of the stage's rows (cond), so what SQLite
		// gathers for it stays small however big the stage.
		for _, step := range []struct {
			table string
			key   []string
			stmts []string
		}{
			{"dentries", []string{"parent", "name"}, []string{
				`UPDATE dentries AS d SET death = ?1 FROM (SELECT parent, name FROM dentries WHERE ws = ?3 AND death = ?4 AND %[1]s) AS f
					WHERE d.ws = ?2 AND d.parent = f.parent AND d.name = f.name AND d.death = ?4`,
				`INSERT INTO dentries(ws, parent, name, birth, death, ino, kind)
					SELECT ?2, parent, name, ?1, ?4, ino, kind FROM dentries WHERE ws = ?3 AND death = ?4 AND %[1]s`,
			}},
			{"inodes", []string{"ino"}, []string{
				`UPDATE extents AS e SET death = ?1 FROM (SELECT ino FROM inodes WHERE ws = ?3 AND death = ?4 AND nlink = 0 AND %[1]s) AS f
					WHERE e.ws = ?2 AND e.ino = f.ino AND e.death = ?4`,
				`UPDATE inodes AS d SET death = ?1 FROM (SELECT ino FROM inodes WHERE ws = ?3 AND death = ?4 AND %[1]s) AS f
					WHERE d.ws = ?2 AND d.ino = f.ino AND d.death = ?4`,
				`INSERT INTO inodes(ws, ino, ` + inodeCols + `)
					SELECT ?2, ino, ?1, ?4, mode, uid, gid, nlink, size, mtime_ns, ctime_ns, target, parent, name, rdev
					FROM inodes WHERE ws = ?3 AND death = ?4 AND (nlink > 0 OR ?5) AND %[1]s`,
			}},
			{"extents", []string{"ino", "idx"}, []string{
				`UPDATE extents AS e SET death = ?1 FROM (SELECT ino, idx FROM extents WHERE ws = ?3 AND death = ?4 AND %[1]s) AS f
					WHERE e.ws = ?2 AND e.ino = f.ino AND e.idx = f.idx AND e.death = ?4`,
				`INSERT INTO extents(ws, ino, idx, birth, death, chunk)
					SELECT ?2, ino, idx, ?1, ?4, chunk FROM extents WHERE ws = ?3 AND death = ?4 AND %[1]s`,
			}},
		} {
			err := s.stageRanges(ctx, step.table, step.key, stage, func(cond string, args []any) error {
				for _, q := range step.stmts {
					if _, err := s.wconn.ExecContext(ctx, fmt.Sprintf(q, cond), append([]any{t.rev, ws, stage, forever, fork}, args...)...); err != nil {
						return wrapDB("commit import", err)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		if err := t.finish(info); err != nil {
			return err
		}
		return s.dropStage(ctx, stage)
	})
	if err != nil {
		return core.Revision{}, err
	}
	if replay != nil {
		return *replay, nil
	}
	rev := t.revision(info)
	if s.OnCommit != nil {
		s.OnCommit(ws, rev)
	}
	return rev, nil
}

// stageChunk is how many of a stage's rows one statement of commitStage
// moves (a variable for tests).
var stageChunk = 16384

// stageRanges calls fn with successive ranges, in key order, of the live
// rows of stage in table, at most stageChunk rows each: a condition on
// the key's columns whose placeholders are numbered from 6, and their
// values.
func (s *Store) stageRanges(ctx context.Context, table string, key []string, stage int64, fn func(cond string, args []any) error) error {
	cols := strings.Join(key, ", ")
	tuple := func(from int) string {
		ph := make([]string, len(key))
		for i := range ph {
			ph[i] = fmt.Sprintf("?%d", from+i)
		}
		return "(" + strings.Join(ph, ", ") + ")"
	}
	var lo []any
	for {
		cond, args := "1", []any(nil)
		if lo != nil {
			cond, args = "("+cols+") > "+tuple(6), lo
		}
		// The last key of this range: stageChunk rows on, if there are so many.
		hi := make([]any, len(key))
		ptrs := make([]any, len(key))
		for i := range hi {
			ptrs[i] = &hi[i]
		}
		q := fmt.Sprintf(`SELECT %s FROM %s WHERE ws = ?1 AND death = ?2 AND %s ORDER BY %s LIMIT 1 OFFSET %d`,
			cols, table, strings.ReplaceAll(strings.ReplaceAll(cond, "?6", "?3"), "?7", "?4"), cols, stageChunk-1)
		err := s.wconn.QueryRowContext(ctx, q, append([]any{stage, forever}, args...)...).Scan(ptrs...)
		last := errors.Is(err, sql.ErrNoRows)
		if err != nil && !last {
			return wrapDB("commit import", err)
		}
		if !last {
			cond += " AND (" + cols + ") <= " + tuple(6+len(lo))
			args = append(append([]any(nil), args...), hi...)
		}
		if err := fn(cond, args); err != nil || last {
			return err
		}
		lo = hi
	}
}

// dropStage deletes a stage and its rows; the caller is in a write
// transaction.
func (s *Store) dropStage(ctx context.Context, stage int64) error {
	if _, err := s.wconn.ExecContext(ctx, `UPDATE workspaces SET deleted_ns = ? WHERE id = ?`, s.Now().UnixNano(), stage); err != nil {
		return wrapDB("drop import stage", err)
	}
	return s.collectLayer(ctx, stage)
}

// dropStages deletes the stages of imports a crash cut short: with the
// data directory locked, no import of another process is under way.
func (s *Store) dropStages(ctx context.Context) error {
	rows, err := s.wconn.QueryContext(ctx, `SELECT id FROM workspaces WHERE deleted_ns IS NULL AND substr(tenant, 1, ?1) = ?2`,
		len(importTenantPrefix), importTenantPrefix)
	if err != nil {
		return wrapDB("find import stages", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return wrapDB("find import stages", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		if err := s.collect(ctx, func() error { return s.dropStage(ctx, id) }); err != nil {
			return err
		}
	}
	return nil
}

package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"syscall"
	"time"

	"computerd/core"
)

const wsCols = `id, tenant, name, head, COALESCE(base_ws, 0), COALESCE(base_rev, 0), created_ns`

func scanWorkspace(row interface{ Scan(...any) error }) (core.Workspace, error) {
	var w core.Workspace
	var created int64
	err := row.Scan(&w.ID, &w.Tenant, &w.Name, &w.Head, &w.BaseID, &w.BaseRev, &created)
	w.Created = time.Unix(0, created)
	return w, err
}

// validWorkspaceName reports whether name can name a workspace.
func validWorkspaceName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return name != "." && name != ".."
}

// CreateWorkspace makes an empty workspace whose revision 1 holds only the root directory.
func (s *Store) CreateWorkspace(ctx context.Context, tenant, name string) (core.Workspace, error) {
	if !validWorkspaceName(name) {
		return core.Workspace{}, fmt.Errorf("workspace name %q: want 1-128 of [A-Za-z0-9._-]: %w", name, core.ErrInvalidArgument)
	}
	var id int64
	err := s.write(ctx, func() error {
		if err := s.nameFree(ctx, tenant, name); err != nil {
			return err
		}
		now := s.Now().UnixNano()
		var ino uint64
		if err := s.wq.nextIno.QueryRowContext(ctx, 1).Scan(&ino); err != nil {
			return wrapDB("allocate inode", err)
		}
		var err error
		if id, err = s.newID(ctx, "workspace"); err != nil {
			return err
		}
		if _, err := s.wconn.ExecContext(ctx, `INSERT INTO workspaces(id, tenant, name, root_ino, head, created_ns) VALUES (?, ?, ?, ?, 1, ?)`, id, tenant, name, ino, now); err != nil {
			return wrapDB("create workspace", err)
		}
		if _, err := s.wq.insInode.ExecContext(ctx, id, ino, 1, forever, syscall.S_IFDIR|0o755, 0, 0, 2, 0, now, now, nil, 0, nil, 0); err != nil {
			return wrapDB("create root", err)
		}
		_, err = s.wq.insRevision.ExecContext(ctx, id, 1, now, string(core.SourceCreate), tenant, "", "", 0)
		return wrapDB("record revision", err)
	})
	if err != nil {
		return core.Workspace{}, err
	}
	return s.WorkspaceByID(ctx, id)
}

func (s *Store) nameFree(ctx context.Context, tenant, name string) error {
	var n int
	if err := s.wconn.QueryRowContext(ctx, `SELECT count(*) FROM workspaces WHERE tenant = ? AND name = ? AND deleted_ns IS NULL`, tenant, name).Scan(&n); err != nil {
		return wrapDB("check name", err)
	}
	if n > 0 {
		return fmt.Errorf("workspace %q: %w", name, core.ErrWorkspaceExists)
	}
	return nil
}

// Fork makes workspace name of the same tenant whose revision 1 is src at
// revision rev (Head for its newest). It copies no rows: the fork reads
// through to src for everything it has not changed.
func (s *Store) Fork(ctx context.Context, src int64, rev int64, name string) (core.Workspace, error) {
	if !validWorkspaceName(name) {
		return core.Workspace{}, fmt.Errorf("workspace name %q: %w", name, core.ErrInvalidArgument)
	}
	var id int64
	err := s.write(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, src)
		if err != nil {
			return err
		}
		if rev == core.Head {
			rev = w.Head
		} else if err := s.checkRev(ctx, s.wconn, w, rev); err != nil {
			return err
		}
		if err := s.nameFree(ctx, w.Tenant, name); err != nil {
			return err
		}
		id, err = s.insertFork(ctx, w, rev, name)
		return err
	})
	if err != nil {
		return core.Workspace{}, err
	}
	return s.WorkspaceByID(ctx, id)
}

// insertFork writes the rows of a fork of w at rev called name (free, and
// rev retained: the caller checked) inside the caller's write transaction.
func (s *Store) insertFork(ctx context.Context, w core.Workspace, rev int64, name string) (int64, error) {
	now := s.Now().UnixNano()
	id, err := s.insertLayer(ctx, w.Tenant, name, w.ID, rev, now)
	if err != nil {
		return 0, wrapDB("fork workspace", err)
	}
	_, err = s.wq.insRevision.ExecContext(ctx, id, 1, now, string(core.SourceFork), w.Tenant, "", fmt.Sprintf("fork of %s@%d", w.Name, rev), 0)
	return id, wrapDB("record revision", err)
}

// newID hands out the next id of kind (a row of counters): ids of
// workspaces and memories are never given out twice, so nothing keyed by
// a deleted one (its journal, runs, the exec view's tree) can reach
// whoever comes next. Inside the caller's write transaction.
func (s *Store) newID(ctx context.Context, kind string) (int64, error) {
	var id int64
	err := s.wq.nextID.QueryRowContext(ctx, kind).Scan(&id)
	return id, wrapDB("allocate "+kind+" id", err)
}

// uncache drops what wsCache holds of workspace id (deleted, or made in a
// transaction that rolled back, whose id the next workspace then gets).
func (s *Store) uncache(id int64) {
	s.wsmu.Lock()
	delete(s.wsCache, id)
	s.wsmu.Unlock()
}

// insertLayer writes the row of a workspace of tenant called name that
// reads through to (base, rev), inside the caller's write transaction.
func (s *Store) insertLayer(ctx context.Context, tenant, name string, base, rev, now int64) (int64, error) {
	id, err := s.newID(ctx, "workspace")
	if err != nil {
		return 0, err
	}
	_, err = s.wconn.ExecContext(ctx, `INSERT INTO workspaces(id, tenant, name, root_ino, base_ws, base_rev, head, created_ns) VALUES (?1, ?2, ?3, (SELECT root_ino FROM workspaces WHERE id = ?4), ?4, ?5, 1, ?6)`,
		id, tenant, name, base, rev, now)
	return id, err
}

type rowQuerier interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

func (s *Store) liveWorkspace(ctx context.Context, db rowQuerier, id int64) (core.Workspace, error) {
	w, err := scanWorkspace(db.QueryRowContext(ctx, `SELECT `+wsCols+` FROM workspaces WHERE id = ? AND deleted_ns IS NULL`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return w, core.ErrWorkspaceNotFound
	}
	return w, wrapDB("load workspace", err)
}

// checkRev verifies that rev is a retained revision of w.
func (s *Store) checkRev(ctx context.Context, db rowQuerier, w core.Workspace, rev int64) error {
	var n int
	if rev < 1 || rev > w.Head {
		return fmt.Errorf("revision %d of %s: %w", rev, w.Name, core.ErrUnknownRevision)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM revisions WHERE ws = ? AND rev = ?`, w.ID, rev).Scan(&n); err != nil {
		return wrapDB("check revision", err)
	}
	if n == 0 {
		return fmt.Errorf("revision %d of %s: %w", rev, w.Name, core.ErrUnknownRevision)
	}
	return nil
}

// WorkspaceByID returns a live workspace.
func (s *Store) WorkspaceByID(ctx context.Context, id int64) (core.Workspace, error) {
	return s.liveWorkspace(ctx, s.rq, id)
}

// Workspace returns the tenant's live workspace called name.
func (s *Store) Workspace(ctx context.Context, tenant, name string) (core.Workspace, error) {
	w, err := scanWorkspace(s.rq.QueryRowContext(ctx, `SELECT `+wsCols+` FROM workspaces WHERE tenant = ? AND name = ? AND deleted_ns IS NULL`, tenant, name))
	if errors.Is(err, sql.ErrNoRows) {
		return w, fmt.Errorf("workspace %q: %w", name, core.ErrWorkspaceNotFound)
	}
	return w, wrapDB("load workspace", err)
}

// Workspaces lists a tenant's live workspaces by name; tenant "" lists every tenant's.
func (s *Store) Workspaces(ctx context.Context, tenant string) ([]core.Workspace, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+wsCols+` FROM workspaces WHERE deleted_ns IS NULL AND (?1 = '' OR tenant = ?1) ORDER BY tenant, name`, tenant)
	if err != nil {
		return nil, wrapDB("list workspaces", err)
	}
	defer rows.Close()
	var out []core.Workspace
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, wrapDB("list workspaces", err)
		}
		out = append(out, w)
	}
	return out, wrapDB("list workspaces", rows.Err())
}

// DeleteWorkspace removes a workspace from its tenant's namespace and drops
// its rows, except those that forks of it still read through to, and
// with them everything else keyed by its id: its exec journal, its agent
// runs and their steps, and its mirror record. The id is never given out
// again. OnDelete, if set, then learns of it.
func (s *Store) DeleteWorkspace(ctx context.Context, id int64) error {
	var execs []string
	err := s.collect(ctx, func() error {
		if _, err := s.liveWorkspace(ctx, s.wconn, id); err != nil {
			return err
		}
		if _, err := s.wconn.ExecContext(ctx, `UPDATE workspaces SET deleted_ns = ? WHERE id = ?`, s.Now().UnixNano(), id); err != nil {
			return wrapDB("delete workspace", err)
		}
		drafts, err := s.draftsOf(ctx, id)
		if err != nil {
			return err
		}
		if execs, err = s.execIDs(ctx, id); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM mirrors WHERE ws = ?`,
			`DELETE FROM execs WHERE ws = ?`,
			`DELETE FROM run_steps WHERE run IN (SELECT id FROM runs WHERE ws = ?)`,
			`DELETE FROM runs WHERE ws = ?`,
		} {
			if _, err := s.wconn.ExecContext(ctx, q, id); err != nil {
				return wrapDB("delete workspace", err)
			}
		}
		for _, d := range drafts {
			if err := s.collectLayer(ctx, d); err != nil {
				return err
			}
		}
		return s.collectLayer(ctx, id)
	})
	if err == nil && s.OnDelete != nil {
		s.OnDelete(id, execs)
	}
	return err
}

// draftsOf marks the live drafts of workspace ws deleted (what execs and
// mounts of it had not committed yet: nothing can commit it now) and
// returns their ids, inside the writer's transaction.
func (s *Store) draftsOf(ctx context.Context, ws int64) ([]int64, error) {
	return column[int64](ctx, s.wconn, "delete drafts", `UPDATE workspaces SET deleted_ns = ?1 WHERE base_ws = ?2 AND deleted_ns IS NULL
		AND tenant = ?3 || (SELECT tenant FROM workspaces WHERE id = ?2) RETURNING id`, s.Now().UnixNano(), ws, draftTenantPrefix)
}

// execIDs lists the ids of workspace ws's execs, inside the writer's transaction.
func (s *Store) execIDs(ctx context.Context, ws int64) ([]string, error) {
	return column[string](ctx, s.wconn, "list execs", `SELECT id FROM execs WHERE ws = ?`, ws)
}

// column runs query on db and returns the one column of its rows.
func column[T any](ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, what, query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrapDB(what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, wrapDB(what, err)
		}
		out = append(out, v)
	}
	return out, wrapDB(what, rows.Err())
}

// Log lists a workspace's retained revisions, newest first; limit <= 0 means all.
func (s *Store) Log(ctx context.Context, ws int64, limit int) ([]core.Revision, error) {
	if _, err := s.WorkspaceByID(ctx, ws); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1
	}
	return s.revisions(ctx, "log", `WHERE ws = ? ORDER BY rev DESC LIMIT ?`, ws, limit)
}

// RevisionInfo describes revision rev of workspace ws (core.ErrUnknownRevision
// if it is not retained).
func (s *Store) RevisionInfo(ctx context.Context, ws, rev int64) (core.Revision, error) {
	revs, err := s.revisions(ctx, "revision", `WHERE ws = ? AND rev = ?`, ws, rev)
	if err != nil {
		return core.Revision{}, err
	}
	if len(revs) == 0 {
		return core.Revision{}, fmt.Errorf("revision %d: %w", rev, core.ErrUnknownRevision)
	}
	return revs[0], nil
}

// RevisionByKey finds the revision of ws an API mutation with idempotency
// key made (core.ErrNotFound if none).
func (s *Store) RevisionByKey(ctx context.Context, ws int64, key string) (core.Revision, error) {
	revs, err := s.revisions(ctx, "revision by key", `WHERE ws = ? AND idem_key = ?`, ws, key)
	if err != nil {
		return core.Revision{}, err
	}
	if len(revs) == 0 {
		return core.Revision{}, fmt.Errorf("revision with key %q: %w", key, core.ErrNotFound)
	}
	return revs[0], nil
}

// revisions reads revision rows: SELECT ... FROM revisions, then where.
func (s *Store) revisions(ctx context.Context, what, where string, args ...any) ([]core.Revision, error) {
	return s.revisionsOn(ctx, s.rdb, what, where, args...)
}

func (s *Store) revisionsOn(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, what, where string, args ...any) ([]core.Revision, error) {
	rows, err := db.QueryContext(ctx, `SELECT rev, time_ns, source, tenant, exec_id, message, changes FROM revisions `+where, args...)
	if err != nil {
		return nil, wrapDB(what, err)
	}
	defer rows.Close()
	var out []core.Revision
	for rows.Next() {
		var r core.Revision
		var t int64
		if err := rows.Scan(&r.Rev, &t, &r.Source, &r.Tenant, &r.ExecID, &r.Message, &r.Changes); err != nil {
			return nil, wrapDB(what, err)
		}
		r.Time = time.Unix(0, t)
		out = append(out, r)
	}
	return out, wrapDB(what, rows.Err())
}

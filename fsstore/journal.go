package fsstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"computerd/core"
)

// BeginExec records a starting exec. If e.Key is set and the tenant's
// workspace already has an exec with that key, nothing is written and the
// existing record comes back with started false.
func (s *Store) BeginExec(ctx context.Context, e core.Exec) (rec core.Exec, started bool, err error) {
	if e.ID == "" {
		e.ID = core.NewExecID()
	}
	if e.State == "" {
		e.State = core.ExecRunning
	}
	if e.Started.IsZero() {
		e.Started = s.Now()
	}
	err = s.write(ctx, func() error {
		if e.Key != "" {
			old, err := s.execWhere(ctx, s.wconn, `tenant = ? AND ws = ? AND idem_key = ?`, e.Tenant, e.WS, e.Key)
			if err == nil {
				rec = old
				return nil
			}
			if !errors.Is(err, core.ErrNotFound) {
				return err
			}
		}
		if err := s.putExec(ctx, e, true); err != nil {
			return err
		}
		rec, started = e, true
		return nil
	})
	return rec, started, err
}

// UpdateExec rewrites an exec's record (state, result, ...).
func (s *Store) UpdateExec(ctx context.Context, e core.Exec) error {
	return s.write(ctx, func() error { return s.putExec(ctx, e, false) })
}

func (s *Store) putExec(ctx context.Context, e core.Exec, insert bool) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var key any
	if e.Key != "" {
		key = e.Key
	}
	if insert {
		_, err = s.wconn.ExecContext(ctx, `INSERT INTO execs(id, tenant, ws, idem_key, state, started_ns, record) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			e.ID, e.Tenant, e.WS, key, e.State, e.Started.UnixNano(), string(body))
		return wrapDB("record exec", err)
	}
	res, err := s.wconn.ExecContext(ctx, `UPDATE execs SET state = ?, record = ? WHERE id = ?`, e.State, string(body), e.ID)
	if err != nil {
		return wrapDB("update exec", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("exec %s: %w", e.ID, core.ErrNotFound)
	}
	return nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) execWhere(ctx context.Context, q querier, where string, args ...any) (core.Exec, error) {
	var body string
	err := q.QueryRowContext(ctx, `SELECT record FROM execs WHERE `+where, args...).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return core.Exec{}, fmt.Errorf("exec: %w", core.ErrNotFound)
	}
	if err != nil {
		return core.Exec{}, wrapDB("read exec", err)
	}
	var e core.Exec
	return e, json.Unmarshal([]byte(body), &e)
}

// ExecByID returns one exec record.
func (s *Store) ExecByID(ctx context.Context, id string) (core.Exec, error) {
	return s.execWhere(ctx, s.rdb, `id = ?`, id)
}

// Execs lists a workspace's execs, newest first (limit 0: all).
func (s *Store) Execs(ctx context.Context, ws int64, limit int) ([]core.Exec, error) {
	if limit <= 0 {
		limit = -1
	}
	return s.execList(ctx, `SELECT record FROM execs WHERE ws = ? ORDER BY started_ns DESC LIMIT ?`, ws, limit)
}

// ExecsInState lists every exec in state (running ones after a crash, pending pushes).
func (s *Store) ExecsInState(ctx context.Context, state core.ExecState) ([]core.Exec, error) {
	return s.execList(ctx, `SELECT record FROM execs WHERE state = ? ORDER BY started_ns`, state)
}

func (s *Store) execList(ctx context.Context, query string, args ...any) ([]core.Exec, error) {
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrapDB("list execs", err)
	}
	defer rows.Close()
	out := []core.Exec{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, wrapDB("list execs", err)
		}
		var e core.Exec
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, wrapDB("list execs", rows.Err())
}

// ExecRevision finds the revision of ws an exec committed (0 if none): the
// commit writes the exec id into the revision row in its own transaction,
// so this answers even if computerd died before updating the journal.
func (s *Store) ExecRevision(ctx context.Context, ws int64, id string) (int64, error) {
	var rev int64
	// exec_id != '' lets SQLite use the partial index revisions_exec
	// rather than scan every revision of ws.
	err := s.rdb.QueryRowContext(ctx, `SELECT COALESCE(max(rev), 0) FROM revisions WHERE ws = ? AND exec_id = ? AND exec_id != ''`, ws, id).Scan(&rev)
	return rev, wrapDB("exec revision", err)
}

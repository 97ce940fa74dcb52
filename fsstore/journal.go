package fsstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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

// ExecByKey returns the exec of tenant's workspace ws with idempotency key key.
func (s *Store) ExecByKey(ctx context.Context, tenant string, ws int64, key string) (core.Exec, error) {
	return s.execWhere(ctx, s.rdb, `tenant = ? AND ws = ? AND idem_key = ?`, tenant, ws, key)
}

// UpdateExec rewrites an exec's record (state, result, ...).
func (s *Store) UpdateExec(ctx context.Context, e core.Exec) error {
	return s.write(ctx, func() error { return s.putExec(ctx, e, false) })
}

// execStates are the stored names of exec states, fixed here so that a
// change of core's names (which are the API's) never changes what is on
// disk, or what the journal's partial index execs_state covers.
var execStates = map[core.ExecState]string{
	core.ExecRunning:     "running",
	core.ExecExited:      "exited",
	core.ExecKilled:      "killed",
	core.ExecTimeout:     "timeout",
	core.ExecInterrupted: "interrupted",
	core.ExecFailed:      "failed",
	core.ExecPending:     "pending",
}

// storedState is the stored name of st ("" stays "": no state, as a
// pending state is when nothing waits for the home).
func storedState(st core.ExecState) (string, error) {
	if st == "" {
		return "", nil
	}
	name, ok := execStates[st]
	if !ok {
		return "", fmt.Errorf("exec state %q: %w", st, core.ErrInvalidArgument)
	}
	return name, nil
}

// loadedState is the exec state stored as name.
func loadedState(name string) (core.ExecState, error) {
	if name == "" {
		return "", nil
	}
	for st, n := range execStates {
		if n == name {
			return st, nil
		}
	}
	return "", fmt.Errorf("journal: unknown exec state %q", name)
}

// execRow is an exec as the execs table stores it: one field per column,
// converted from and to core.Exec here and nowhere else, so the API's
// JSON names never reach the disk.
type execRow struct {
	id, tenant   string
	ws           int64
	wsName       string
	key          sql.NullString
	argv         string // JSON array of strings
	cwd          string
	envNames     string // JSON array of strings
	baseRev      int64
	state        string
	startedNs    int64
	endedNs      int64 // 0: still running
	exitCode     int
	signal       string
	timedOut     bool
	stdoutBytes  int64
	stderrBytes  int64
	rev          int64
	conflict     string // JSON array of strings
	keptAs       string
	draft        int64
	errText      string
	executor     string
	homeBase     int64
	homeWS       int64
	pendingState string
	truncated    bool
	outputKept   int64
}

// execCols are the execs table's columns in the order of execRow.fields.
const execCols = `id, tenant, ws, ws_name, idem_key, argv, cwd, env_names, base_rev, state, started_ns, ended_ns, exit_code, signal, timed_out, stdout_bytes, stderr_bytes, rev, conflict, kept_as, draft, error, executor, home_base, home_ws, pending_state, output_truncated, output_bytes`

// fields points at r's fields in the order of execCols, to scan into.
func (r *execRow) fields() []any {
	return []any{&r.id, &r.tenant, &r.ws, &r.wsName, &r.key, &r.argv, &r.cwd, &r.envNames, &r.baseRev, &r.state,
		&r.startedNs, &r.endedNs, &r.exitCode, &r.signal, &r.timedOut, &r.stdoutBytes, &r.stderrBytes, &r.rev,
		&r.conflict, &r.keptAs, &r.draft, &r.errText, &r.executor, &r.homeBase, &r.homeWS, &r.pendingState, &r.truncated, &r.outputKept}
}

// values are r's fields in the order of execCols, to write.
func (r *execRow) values() []any {
	return []any{r.id, r.tenant, r.ws, r.wsName, r.key, r.argv, r.cwd, r.envNames, r.baseRev, r.state,
		r.startedNs, r.endedNs, r.exitCode, r.signal, r.timedOut, r.stdoutBytes, r.stderrBytes, r.rev,
		r.conflict, r.keptAs, r.draft, r.errText, r.executor, r.homeBase, r.homeWS, r.pendingState, r.truncated, r.outputKept}
}

func toExecRow(e core.Exec) (execRow, error) {
	r := execRow{
		id: e.ID, tenant: e.Tenant, ws: e.WS, wsName: e.WSName, key: sql.NullString{String: e.Key, Valid: e.Key != ""},
		argv: stringList(e.Argv), cwd: e.Cwd, envNames: stringList(e.EnvNames), baseRev: e.BaseRev,
		startedNs: e.Started.UnixNano(), exitCode: e.ExitCode, signal: e.Signal, timedOut: e.TimedOut,
		stdoutBytes: e.StdoutBytes, stderrBytes: e.StderrBytes, rev: e.Rev, conflict: stringList(e.Conflict),
		keptAs: e.KeptAs, draft: e.Draft, errText: e.Error, executor: e.Executor, homeBase: e.HomeBase, homeWS: e.HomeWS,
		truncated: e.OutputTruncated, outputKept: e.OutputKept,
	}
	if !e.Ended.IsZero() {
		r.endedNs = e.Ended.UnixNano()
	}
	var err error
	if r.state, err = storedState(e.State); err != nil {
		return r, err
	}
	r.pendingState, err = storedState(e.PendingState)
	return r, err
}

func (r execRow) exec() (core.Exec, error) {
	e := core.Exec{
		ID: r.id, Tenant: r.tenant, WS: r.ws, WSName: r.wsName, Key: r.key.String, Cwd: r.cwd, BaseRev: r.baseRev,
		Started: time.Unix(0, r.startedNs), ExitCode: r.exitCode, Signal: r.signal, TimedOut: r.timedOut,
		StdoutBytes: r.stdoutBytes, StderrBytes: r.stderrBytes, Rev: r.rev, KeptAs: r.keptAs, Draft: r.draft,
		Error: r.errText, Executor: r.executor, HomeBase: r.homeBase, HomeWS: r.homeWS, OutputTruncated: r.truncated, OutputKept: r.outputKept,
	}
	if r.endedNs != 0 {
		e.Ended = time.Unix(0, r.endedNs)
	}
	var err error
	if e.State, err = loadedState(r.state); err != nil {
		return e, err
	}
	if e.PendingState, err = loadedState(r.pendingState); err != nil {
		return e, err
	}
	for _, l := range []struct {
		to   *[]string
		from string
	}{{&e.Argv, r.argv}, {&e.EnvNames, r.envNames}, {&e.Conflict, r.conflict}} {
		if *l.to, err = parseStringList(l.from); err != nil {
			return e, fmt.Errorf("journal: exec %s: %w", r.id, err)
		}
	}
	return e, nil
}

// stringList is the stored form of a list of strings: a JSON array.
func stringList(l []string) string {
	if len(l) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(l) // strings always marshal
	return string(b)
}

// parseStringList reads stringList's form; an empty list reads as nil.
func parseStringList(s string) ([]string, error) {
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return nil, nil
	}
	return l, nil
}

func (s *Store) putExec(ctx context.Context, e core.Exec, insert bool) error {
	r, err := toExecRow(e)
	if err != nil {
		return err
	}
	if insert {
		_, err = s.wconn.ExecContext(ctx, `INSERT INTO execs(`+execCols+`) VALUES (`+placeholders(len(r.values()))+`)`, r.values()...)
		return wrapDB("record exec", err)
	}
	// The identity (id, tenant, workspace, idempotency key) never changes.
	res, err := s.wconn.ExecContext(ctx, `UPDATE execs SET ws_name = ?, argv = ?, cwd = ?, env_names = ?, base_rev = ?, state = ?,
		started_ns = ?, ended_ns = ?, exit_code = ?, signal = ?, timed_out = ?, stdout_bytes = ?, stderr_bytes = ?, rev = ?,
		conflict = ?, kept_as = ?, draft = ?, error = ?, executor = ?, home_base = ?, home_ws = ?, pending_state = ?, output_truncated = ?, output_bytes = ? WHERE id = ?`,
		r.wsName, r.argv, r.cwd, r.envNames, r.baseRev, r.state,
		r.startedNs, r.endedNs, r.exitCode, r.signal, r.timedOut, r.stdoutBytes, r.stderrBytes, r.rev,
		r.conflict, r.keptAs, r.draft, r.errText, r.executor, r.homeBase, r.homeWS, r.pendingState, r.truncated, r.outputKept, r.id)
	if err != nil {
		return wrapDB("update exec", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("exec %s: %w", e.ID, core.ErrNotFound)
	}
	return nil
}

// placeholders is n comma-separated question marks, for an INSERT's VALUES.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) execWhere(ctx context.Context, q querier, where string, args ...any) (core.Exec, error) {
	var r execRow
	err := q.QueryRowContext(ctx, `SELECT `+execCols+` FROM execs WHERE `+where, args...).Scan(r.fields()...)
	if errors.Is(err, sql.ErrNoRows) {
		return core.Exec{}, fmt.Errorf("exec: %w", core.ErrNotFound)
	}
	if err != nil {
		return core.Exec{}, wrapDB("read exec", err)
	}
	return r.exec()
}

// OutputExpired records that the output logs of execs ids are gone from
// disk (expired), so they no longer count against their tenants' quotas.
func (s *Store) OutputExpired(ctx context.Context, ids []string) error {
	return s.write(ctx, func() error {
		for _, id := range ids {
			if _, err := s.wconn.ExecContext(ctx, `UPDATE execs SET output_bytes = 0 WHERE id = ? AND output_bytes != 0`, id); err != nil {
				return wrapDB("expire output", err)
			}
		}
		return nil
	})
}

// ExecByID returns one exec record.
func (s *Store) ExecByID(ctx context.Context, id string) (core.Exec, error) {
	return s.execWhere(ctx, s.rdb, `id = ?`, id)
}

// Execs lists the execs of tenant's workspace ws, newest first (limit 0: all).
func (s *Store) Execs(ctx context.Context, tenant string, ws int64, limit int) ([]core.Exec, error) {
	if limit <= 0 {
		limit = -1
	}
	return s.execList(ctx, `WHERE ws = ? AND tenant = ? ORDER BY started_ns DESC LIMIT ?`, ws, tenant, limit)
}

// Undelivered lists the execs of tenant's workspace ws whose writes wait
// to reach the home (an executor's pending execs), oldest first.
func (s *Store) Undelivered(ctx context.Context, tenant string, ws int64) ([]core.Exec, error) {
	return s.execList(ctx, `WHERE ws = ? AND tenant = ? AND state = ? ORDER BY started_ns`, ws, tenant, execStates[core.ExecPending])
}

// ExecsInState lists every exec in state (running ones after a crash, pending pushes).
func (s *Store) ExecsInState(ctx context.Context, state core.ExecState) ([]core.Exec, error) {
	name, err := storedState(state)
	if err != nil {
		return nil, err
	}
	return s.execList(ctx, `WHERE state = ? ORDER BY started_ns`, name)
}

func (s *Store) execList(ctx context.Context, where string, args ...any) ([]core.Exec, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+execCols+` FROM execs `+where, args...)
	if err != nil {
		return nil, wrapDB("list execs", err)
	}
	defer rows.Close()
	out := []core.Exec{}
	for rows.Next() {
		var r execRow
		if err := rows.Scan(r.fields()...); err != nil {
			return nil, wrapDB("list execs", err)
		}
		e, err := r.exec()
		if err != nil {
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

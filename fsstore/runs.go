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

// The journal of agent runs. computerd only records: the client that drives
// the model begins each step before it starts and ends it when it is over,
// so that a resumed run replays every finished step instead of taking it
// again. One client drives a run at a time (its driver id); a resume takes
// the run over, and the old driver's next step is refused. A driver holds
// its run on a lease: each step it records renews it, and so does
// RenewRun between steps (a long model answer or command); a running run
// whose lease ran out reads as interrupted (its driver died), as does one
// whose driver said it stopped (EndRun with RunInterrupted). Either is
// taken forward by the next ClaimRun.

// MaxMemoryLen and MaxSkillLen bound what a tenant keeps for every run.
const (
	MaxMemoryLen = 4 << 10
	MaxSkillLen  = 64 << 10
)

// Bounds of what a driver records about its run.
const (
	MaxRunBaseURL = 2 << 10
	MinRunLease   = time.Second
	MaxRunLease   = time.Hour
)

const runCols = `r.id, r.tenant, r.ws, w.name, r.task, r.provider, r.model, r.base_url, r.skill, r.max_steps, r.max_tokens, r.max_cost, r.timeout,
	r.state, r.error, r.created_ns, r.ended_ns, r.base_rev, r.driver, r.lease_ns, r.renewed_ns, r.cancel, r.steps, r.input_tokens, r.output_tokens, r.cost`

const runFrom = ` FROM runs r JOIN workspaces w ON w.id = r.ws`

// scanRun reads a run; a running run whose lease ran out before now
// reads as interrupted.
func scanRun(row interface{ Scan(...any) error }, now time.Time) (core.Run, error) {
	var r core.Run
	var state string
	var created, ended, lease, renewed int64
	err := row.Scan(&r.ID, &r.Tenant, &r.WS, &r.WSName, &r.Task, &r.Provider, &r.Model, &r.BaseURL, &r.Skill,
		&r.Limits.MaxSteps, &r.Limits.MaxTokens, &r.Limits.MaxCost, &r.Limits.Timeout,
		&state, &r.Error, &created, &ended, &r.BaseRev, &r.Driver, &lease, &renewed, &r.Cancel, &r.Steps, &r.InputTokens, &r.OutputTokens, &r.Cost)
	r.State, r.Created = core.RunState(state), time.Unix(0, created)
	if ended != 0 {
		r.Ended = time.Unix(0, ended)
	}
	if lease > 0 {
		r.Lease, r.Renewed = time.Duration(lease).String(), time.Unix(0, renewed)
		if r.State == core.RunRunning && now.UnixNano()-renewed > lease {
			r.State = core.RunInterrupted
			if r.Error == "" {
				r.Error = fmt.Sprintf("its driver stopped: its lease of %s ran out at %s", r.Lease, r.Renewed.Add(time.Duration(lease)).UTC().Format(time.RFC3339))
			}
		}
	}
	return r, err
}

// parseLease reads a lease a driver asks for: a Go duration from
// MinRunLease to MaxRunLease, or "" for none.
func parseLease(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < MinRunLease || d > MaxRunLease {
		return 0, fmt.Errorf("lease %q: want a duration from %s to %s: %w", v, MinRunLease, MaxRunLease, core.ErrInvalidArgument)
	}
	return d, nil
}

// checkBaseURL checks a model server's address a run records.
func checkBaseURL(u string) error {
	if len(u) > MaxRunBaseURL {
		return fmt.Errorf("base URL of %d bytes: at most %d: %w", len(u), MaxRunBaseURL, core.ErrInvalidArgument)
	}
	return nil
}

// CreateRun records a new run of r.Task on workspace r.WS, based on its
// head, driven by r.Driver on a lease of r.Lease ("": none).
func (s *Store) CreateRun(ctx context.Context, r core.Run) (core.Run, error) {
	if strings.TrimSpace(r.Task) == "" {
		return core.Run{}, fmt.Errorf("run: empty task: %w", core.ErrInvalidArgument)
	}
	lease, err := parseLease(r.Lease)
	if err = errors.Join(err, checkBaseURL(r.BaseURL)); err != nil {
		return core.Run{}, err
	}
	if r.ID == "" {
		r.ID = core.NewRunID()
	}
	err = s.write(ctx, func() (err error) {
		w, err := s.liveWorkspace(ctx, s.wconn, r.WS)
		if err != nil {
			return err
		}
		before, err := s.storedTotal(ctx, w.Tenant)
		if err != nil {
			return err
		}
		defer func() {
			if err == nil {
				err = s.checkTotal(ctx, w.Tenant, before)
			}
		}()
		now := s.Now().UnixNano()
		_, err = s.wconn.ExecContext(ctx, `INSERT INTO runs(id, tenant, ws, task, provider, model, base_url, skill, max_steps, max_tokens, max_cost, timeout,
			state, created_ns, base_rev, driver, lease_ns, renewed_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, w.Tenant, w.ID, r.Task, r.Provider, r.Model, r.BaseURL, r.Skill, r.Limits.MaxSteps, r.Limits.MaxTokens, r.Limits.MaxCost, r.Limits.Timeout,
			string(core.RunRunning), now, w.Head, r.Driver, int64(lease), now)
		return wrapDB("record run", err)
	})
	if err != nil {
		return core.Run{}, err
	}
	return s.Run(ctx, r.ID)
}

// Run returns one run.
func (s *Store) Run(ctx context.Context, id string) (core.Run, error) {
	return s.runOn(ctx, s.rdb, id)
}

func (s *Store) runOn(ctx context.Context, q rowQuerier, id string) (core.Run, error) {
	r, err := scanRun(q.QueryRowContext(ctx, `SELECT `+runCols+runFrom+` WHERE r.id = ?`, id), s.Now())
	if errors.Is(err, sql.ErrNoRows) {
		return core.Run{}, fmt.Errorf("run %s: %w", id, core.ErrNotFound)
	}
	return r, wrapDB("read run", err)
}

// Runs lists the runs of tenant's workspace ws, newest first (limit 0: all).
func (s *Store) Runs(ctx context.Context, tenant string, ws int64, limit int) ([]core.Run, error) {
	if limit <= 0 {
		limit = -1
	}
	now := s.Now()
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+runCols+runFrom+` WHERE r.ws = ? AND r.tenant = ? ORDER BY r.created_ns DESC, r.id LIMIT ?`, ws, tenant, limit)
	if err != nil {
		return nil, wrapDB("list runs", err)
	}
	defer rows.Close()
	out := []core.Run{}
	for rows.Next() {
		r, err := scanRun(rows, now)
		if err != nil {
			return nil, wrapDB("list runs", err)
		}
		out = append(out, r)
	}
	return out, wrapDB("list runs", rows.Err())
}

// RunClaim is what a driver taking a run over asks for: its id, its
// lease ("": none), and the model it goes on with where that differs
// from the recorded one (empty fields keep what the run records).
type RunClaim struct {
	Driver, Lease            string
	Provider, Model, BaseURL string
}

// ClaimRun makes driver the run's only driver, on no lease, with the
// recorded model: ClaimRunWith.
func (s *Store) ClaimRun(ctx context.Context, id, driver string) (core.Run, error) {
	return s.ClaimRunWith(ctx, id, RunClaim{Driver: driver})
}

// ClaimRunWith makes c.Driver the run's only driver, taking it over from
// whichever client drove it before (a resume after that client died or
// stopped): the run is running again, on c's lease, with c's model.
func (s *Store) ClaimRunWith(ctx context.Context, id string, c RunClaim) (core.Run, error) {
	if c.Driver == "" {
		return core.Run{}, fmt.Errorf("claim run %s: no driver: %w", id, core.ErrInvalidArgument)
	}
	lease, err := parseLease(c.Lease)
	if err = errors.Join(err, checkBaseURL(c.BaseURL)); err != nil {
		return core.Run{}, err
	}
	err = s.write(ctx, func() (err error) {
		r, err := s.runOn(ctx, s.wconn, id)
		if err != nil {
			return err
		}
		if r.State.Final() {
			return fmt.Errorf("run %s is %s: %w", id, r.State, core.ErrInvalidArgument)
		}
		before, err := s.storedTotal(ctx, r.Tenant)
		if err != nil {
			return err
		}
		defer func() {
			if err == nil {
				err = s.checkTotal(ctx, r.Tenant, before)
			}
		}()
		_, err = s.wconn.ExecContext(ctx, `UPDATE runs SET driver = ?, state = ?, error = '', lease_ns = ?, renewed_ns = ?,
			provider = coalesce(nullif(?, ''), provider), model = coalesce(nullif(?, ''), model), base_url = coalesce(nullif(?, ''), base_url)
			WHERE id = ?`, c.Driver, string(core.RunRunning), int64(lease), s.Now().UnixNano(), c.Provider, c.Model, c.BaseURL, id)
		return wrapDB("claim run", err)
	})
	if err != nil {
		return core.Run{}, err
	}
	return s.Run(ctx, id)
}

// RenewRun renews driver's lease on its run, which must be driven by it.
func (s *Store) RenewRun(ctx context.Context, id, driver string) (core.Run, error) {
	err := s.write(ctx, func() error {
		if _, err := s.drivenRun(ctx, id, driver); err != nil {
			return err
		}
		return s.renew(ctx, id)
	})
	if err != nil {
		return core.Run{}, err
	}
	return s.Run(ctx, id)
}

// renew marks the run's lease renewed now, inside a write.
func (s *Store) renew(ctx context.Context, id string) error {
	_, err := s.wconn.ExecContext(ctx, `UPDATE runs SET renewed_ns = ? WHERE id = ?`, s.Now().UnixNano(), id)
	return wrapDB("renew run", err)
}

// drivenRun reads a run inside a write and checks that driver drives it
// and that it can take steps.
func (s *Store) drivenRun(ctx context.Context, id, driver string) (core.Run, error) {
	r, err := s.runOn(ctx, s.wconn, id)
	if err != nil {
		return r, err
	}
	if r.Driver != driver {
		return r, fmt.Errorf("run %s is driven by another client (resumed elsewhere): %w", id, core.ErrConflict)
	}
	if r.State.Final() {
		return r, fmt.Errorf("run %s is %s: %w", id, r.State, core.ErrInvalidArgument)
	}
	return r, nil
}

// storedCall is a tool call as run_steps.calls keeps it, apart from the API
// body's form.
type storedCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

func encodeCalls(calls []core.ToolCall) (string, error) {
	if len(calls) == 0 {
		return "", nil
	}
	sc := make([]storedCall, len(calls))
	for i, c := range calls {
		sc[i] = storedCall(c)
	}
	b, err := json.Marshal(sc)
	return string(b), err
}

func decodeCalls(s string) ([]core.ToolCall, error) {
	if s == "" {
		return nil, nil
	}
	var sc []storedCall
	if err := json.Unmarshal([]byte(s), &sc); err != nil {
		return nil, fmt.Errorf("stored tool calls: %w", err)
	}
	calls := make([]core.ToolCall, len(sc))
	for i, c := range sc {
		calls[i] = core.ToolCall(c)
	}
	return calls, nil
}

const stepCols = `run, seq, kind, state, tool, call_id, args, text, calls, is_error, code, exec_id, exit_code, rev,
	input_tokens, output_tokens, cost, started_ns, ended_ns`

func scanStep(row interface{ Scan(...any) error }) (core.Step, error) {
	var st core.Step
	var kind, state, args, calls string
	var exit sql.NullInt64
	var started, ended int64
	err := row.Scan(&st.Run, &st.Seq, &kind, &state, &st.Tool, &st.CallID, &args, &st.Text, &calls, &st.IsError, &st.Code,
		&st.ExecID, &exit, &st.Rev, &st.InputTokens, &st.OutputTokens, &st.Cost, &started, &ended)
	if err != nil {
		return st, err
	}
	st.Kind, st.State, st.Started = core.StepKind(kind), core.StepState(state), time.Unix(0, started)
	if ended != 0 {
		st.Ended = time.Unix(0, ended)
	}
	if args != "" {
		st.Args = json.RawMessage(args)
	}
	if exit.Valid {
		code := int(exit.Int64)
		st.ExitCode = &code
	}
	st.Calls, err = decodeCalls(calls)
	return st, err
}

func (s *Store) stepOn(ctx context.Context, q rowQuerier, run string, seq int) (core.Step, error) {
	st, err := scanStep(q.QueryRowContext(ctx, `SELECT `+stepCols+` FROM run_steps WHERE run = ? AND seq = ?`, run, seq))
	if errors.Is(err, sql.ErrNoRows) {
		return st, fmt.Errorf("run %s step %d: %w", run, seq, core.ErrNotFound)
	}
	return st, wrapDB("read step", err)
}

// BeginStep records that driver starts step st.Seq of run st.Run. Steps
// are numbered from 1 with no gaps. Beginning a step that is already
// recorded writes nothing and returns the recorded step with begun false,
// so a driver that died between recording a step and hearing back can ask
// again.
func (s *Store) BeginStep(ctx context.Context, driver string, st core.Step) (rec core.Step, begun bool, err error) {
	if st.Kind != core.StepModel && st.Kind != core.StepTool {
		return core.Step{}, false, fmt.Errorf("step kind %q: %w", st.Kind, core.ErrInvalidArgument)
	}
	if st.Kind == core.StepTool && st.Tool == "" {
		return core.Step{}, false, fmt.Errorf("tool step without a tool: %w", core.ErrInvalidArgument)
	}
	if len(st.Args) > 0 && !json.Valid(st.Args) {
		return core.Step{}, false, fmt.Errorf("step args are not JSON: %w", core.ErrInvalidArgument)
	}
	err = s.write(ctx, func() (err error) {
		r, err := s.drivenRun(ctx, st.Run, driver)
		if err != nil {
			return err
		}
		before, err := s.storedTotal(ctx, r.Tenant)
		if err != nil {
			return err
		}
		defer func() {
			if err == nil && begun {
				err = s.checkTotal(ctx, r.Tenant, before)
			}
		}()
		if old, err := s.stepOn(ctx, s.wconn, st.Run, st.Seq); err == nil {
			rec = old
			return s.renew(ctx, st.Run)
		} else if !errors.Is(err, core.ErrNotFound) {
			return err
		}
		if st.Seq != r.Steps+1 {
			return fmt.Errorf("run %s: step %d after %d: %w", st.Run, st.Seq, r.Steps, core.ErrInvalidArgument)
		}
		now := s.Now().UnixNano()
		if _, err := s.wconn.ExecContext(ctx, `INSERT INTO run_steps(run, seq, kind, state, tool, call_id, args, started_ns)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, st.Run, st.Seq, string(st.Kind), string(core.StepStarted), st.Tool, st.CallID, string(st.Args), now); err != nil {
			return wrapDB("record step", err)
		}
		if _, err := s.wconn.ExecContext(ctx, `UPDATE runs SET steps = ?, renewed_ns = ? WHERE id = ?`, st.Seq, s.Now().UnixNano(), st.Run); err != nil {
			return wrapDB("record step", err)
		}
		rec, err = s.stepOn(ctx, s.wconn, st.Run, st.Seq)
		begun = err == nil
		return err
	})
	return rec, begun, err
}

// EndStep records the result of a started step and adds its tokens and
// cost to the run's. Ending a step already ended changes nothing.
func (s *Store) EndStep(ctx context.Context, driver string, st core.Step) (core.Step, error) {
	calls, err := encodeCalls(st.Calls)
	if err != nil {
		return core.Step{}, err
	}
	var rec core.Step
	err = s.write(ctx, func() (err error) {
		r, err := s.drivenRun(ctx, st.Run, driver)
		if err != nil {
			return err
		}
		before, err := s.storedTotal(ctx, r.Tenant)
		if err != nil {
			return err
		}
		defer func() {
			if err == nil {
				err = s.checkTotal(ctx, r.Tenant, before)
			}
		}()
		old, err := s.stepOn(ctx, s.wconn, st.Run, st.Seq)
		if err != nil {
			return err
		}
		if old.State == core.StepDone {
			rec = old
			return s.renew(ctx, st.Run)
		}
		var exit any
		if st.ExitCode != nil {
			exit = *st.ExitCode
		}
		if _, err := s.wconn.ExecContext(ctx, `UPDATE run_steps SET state = ?, text = ?, calls = ?, is_error = ?, code = ?, exec_id = ?,
			exit_code = ?, rev = ?, input_tokens = ?, output_tokens = ?, cost = ?, ended_ns = ? WHERE run = ? AND seq = ?`,
			string(core.StepDone), st.Text, calls, st.IsError, st.Code, st.ExecID, exit, st.Rev,
			st.InputTokens, st.OutputTokens, st.Cost, s.Now().UnixNano(), st.Run, st.Seq); err != nil {
			return wrapDB("end step", err)
		}
		if _, err := s.wconn.ExecContext(ctx, `UPDATE runs SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, cost = cost + ?, renewed_ns = ? WHERE id = ?`,
			st.InputTokens, st.OutputTokens, st.Cost, s.Now().UnixNano(), st.Run); err != nil {
			return wrapDB("end step", err)
		}
		rec, err = s.stepOn(ctx, s.wconn, st.Run, st.Seq)
		return err
	})
	return rec, err
}

// Steps lists a run's steps after seq after, in order.
func (s *Store) Steps(ctx context.Context, run string, after int) ([]core.Step, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+stepCols+` FROM run_steps WHERE run = ? AND seq > ? ORDER BY seq`, run, after)
	if err != nil {
		return nil, wrapDB("list steps", err)
	}
	defer rows.Close()
	out := []core.Step{}
	for rows.Next() {
		st, err := scanStep(rows)
		if err != nil {
			return nil, wrapDB("list steps", err)
		}
		out = append(out, st)
	}
	return out, wrapDB("list steps", rows.Err())
}

// EndRun records that driver's run ended in state (a final one), or
// that its driver stopped short of the end (RunInterrupted: a resume
// takes it forward).
func (s *Store) EndRun(ctx context.Context, id, driver string, state core.RunState, msg string) (core.Run, error) {
	switch state {
	case core.RunDone, core.RunFailed, core.RunCancelled, core.RunLimited, core.RunInterrupted:
	default:
		return core.Run{}, fmt.Errorf("end run in state %q: want done, failed, cancelled, limited or interrupted: %w", state, core.ErrInvalidArgument)
	}
	err := s.write(ctx, func() error {
		if _, err := s.drivenRun(ctx, id, driver); err != nil {
			return err
		}
		var ended int64
		if state.Final() {
			ended = s.Now().UnixNano()
		}
		_, err := s.wconn.ExecContext(ctx, `UPDATE runs SET state = ?, error = ?, ended_ns = ? WHERE id = ?`, string(state), msg, ended, id)
		return wrapDB("end run", err)
	})
	if err != nil {
		return core.Run{}, err
	}
	return s.Run(ctx, id)
}

// CancelRun asks a run to stop: its driver sees Cancel before its next step
// and ends the run as cancelled. An interrupted run, which no driver
// takes forward, is cancelled at once. Cancelling a finished run changes
// nothing.
func (s *Store) CancelRun(ctx context.Context, id string) (core.Run, error) {
	err := s.write(ctx, func() error {
		r, err := s.runOn(ctx, s.wconn, id)
		if err != nil {
			return err
		}
		switch {
		case r.State.Final():
			return nil
		case r.State == core.RunInterrupted:
			_, err = s.wconn.ExecContext(ctx, `UPDATE runs SET cancel = 1, state = ?, error = 'cancelled while interrupted', ended_ns = ? WHERE id = ?`,
				string(core.RunCancelled), s.Now().UnixNano(), id)
		default:
			_, err = s.wconn.ExecContext(ctx, `UPDATE runs SET cancel = 1 WHERE id = ?`, id)
		}
		return wrapDB("cancel run", err)
	})
	if err != nil {
		return core.Run{}, err
	}
	return s.Run(ctx, id)
}

// AddMemory keeps a fact for every new run of tenant.
func (s *Store) AddMemory(ctx context.Context, tenant, text string) (core.Memory, error) {
	text = strings.TrimSpace(text)
	if text == "" || len(text) > MaxMemoryLen {
		return core.Memory{}, fmt.Errorf("memory: want 1 to %d bytes, got %d: %w", MaxMemoryLen, len(text), core.ErrInvalidArgument)
	}
	m := core.Memory{Text: text, Created: s.Now()}
	err := s.writeMetered(ctx, tenant, func() error {
		var err error
		if m.ID, err = s.newID(ctx, "memory"); err != nil {
			return err
		}
		_, err = s.wconn.ExecContext(ctx, `INSERT INTO memories(id, tenant, text, created_ns) VALUES (?, ?, ?, ?)`, m.ID, tenant, text, m.Created.UnixNano())
		return wrapDB("add memory", err)
	})
	return m, err
}

// Memories lists tenant's facts, oldest first.
func (s *Store) Memories(ctx context.Context, tenant string) ([]core.Memory, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, text, created_ns FROM memories WHERE tenant = ? ORDER BY id`, tenant)
	if err != nil {
		return nil, wrapDB("list memories", err)
	}
	defer rows.Close()
	out := []core.Memory{}
	for rows.Next() {
		var m core.Memory
		var created int64
		if err := rows.Scan(&m.ID, &m.Text, &created); err != nil {
			return nil, wrapDB("list memories", err)
		}
		m.Created = time.Unix(0, created)
		out = append(out, m)
	}
	return out, wrapDB("list memories", rows.Err())
}

// DeleteMemory forgets one of tenant's facts.
func (s *Store) DeleteMemory(ctx context.Context, tenant string, id int64) error {
	return s.write(ctx, func() error {
		res, err := s.wconn.ExecContext(ctx, `DELETE FROM memories WHERE tenant = ? AND id = ?`, tenant, id)
		if err != nil {
			return wrapDB("delete memory", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("memory %d: %w", id, core.ErrNotFound)
		}
		return nil
	})
}

// SaveSkill keeps (or replaces) one of tenant's named procedures.
func (s *Store) SaveSkill(ctx context.Context, tenant string, sk core.Skill) (core.Skill, error) {
	if !validWorkspaceName(sk.Name) {
		return core.Skill{}, fmt.Errorf("skill name %q: want 1-128 of [A-Za-z0-9._-]: %w", sk.Name, core.ErrInvalidArgument)
	}
	if strings.TrimSpace(sk.Body) == "" || len(sk.Body) > MaxSkillLen || len(sk.Description) > MaxMemoryLen {
		return core.Skill{}, fmt.Errorf("skill %s: want a body of 1 to %d bytes: %w", sk.Name, MaxSkillLen, core.ErrInvalidArgument)
	}
	sk.Updated = s.Now()
	err := s.writeMetered(ctx, tenant, func() error {
		_, err := s.wconn.ExecContext(ctx, `INSERT INTO skills(tenant, name, description, body, updated_ns) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(tenant, name) DO UPDATE SET description = excluded.description, body = excluded.body, updated_ns = excluded.updated_ns`,
			tenant, sk.Name, sk.Description, sk.Body, sk.Updated.UnixNano())
		return wrapDB("save skill", err)
	})
	return sk, err
}

// Skill returns one of tenant's skills.
func (s *Store) Skill(ctx context.Context, tenant, name string) (core.Skill, error) {
	sk := core.Skill{Name: name}
	var updated int64
	err := s.rdb.QueryRowContext(ctx, `SELECT description, body, updated_ns FROM skills WHERE tenant = ? AND name = ?`, tenant, name).
		Scan(&sk.Description, &sk.Body, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return core.Skill{}, fmt.Errorf("skill %q: %w", name, core.ErrNotFound)
	}
	sk.Updated = time.Unix(0, updated)
	return sk, wrapDB("read skill", err)
}

// Skills lists tenant's skills by name, without their bodies.
func (s *Store) Skills(ctx context.Context, tenant string) ([]core.Skill, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT name, description, updated_ns FROM skills WHERE tenant = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, wrapDB("list skills", err)
	}
	defer rows.Close()
	out := []core.Skill{}
	for rows.Next() {
		var sk core.Skill
		var updated int64
		if err := rows.Scan(&sk.Name, &sk.Description, &updated); err != nil {
			return nil, wrapDB("list skills", err)
		}
		sk.Updated = time.Unix(0, updated)
		out = append(out, sk)
	}
	return out, wrapDB("list skills", rows.Err())
}

// DeleteSkill removes one of tenant's skills.
func (s *Store) DeleteSkill(ctx context.Context, tenant, name string) error {
	return s.write(ctx, func() error {
		res, err := s.wconn.ExecContext(ctx, `DELETE FROM skills WHERE tenant = ? AND name = ?`, tenant, name)
		if err != nil {
			return wrapDB("delete skill", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("skill %q: %w", name, core.ErrNotFound)
		}
		return nil
	})
}

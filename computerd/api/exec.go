package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"computerd/computerd/runner"
	"computerd/core"
	"computerd/wire"
)

func (s *Server) execRoutes() []route {
	return []route{
		{"POST /v1/workspaces/{ws}/exec", s.exec},
		{"GET /v1/workspaces/{ws}/execs", s.listExecs},
		{"GET /v1/workspaces/{ws}/execs/{id}", s.getExec},
		{"GET /v1/workspaces/{ws}/execs/{id}/events", s.execEvents},
		{"POST /v1/workspaces/{ws}/execs/{id}/kill", s.killExec},
	}
}

func (s *Server) runner() (*runner.Runner, error) {
	if s.Runner == nil {
		return nil, failure(wire.ErrUnavailable, "exec is not available on this computerd")
	}
	return s.Runner, nil
}

// exec starts a command (or finds the one with the same idempotency key)
// and streams its events as NDJSON until it ends. The command does not
// depend on the connection: if the client goes away it runs on, and its
// result is recorded.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runner()
	if err != nil {
		return err
	}
	var req wire.ExecRequest
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	ws, homeRev, err := run.Workspace(r.Context(), tenantOf(r.Context()), r.PathValue("ws"))
	if err != nil {
		return err
	}
	var timeout time.Duration
	if req.Timeout != "" {
		if timeout, err = time.ParseDuration(req.Timeout); err != nil || timeout <= 0 {
			return badRequest("timeout %q: want a positive duration such as 30s", req.Timeout)
		}
	}
	key, err := requestKey(r, req.Key)
	if err != nil {
		return err
	}
	rec, err := run.Start(r.Context(), runner.Request{
		Workspace: ws, Tenant: tenantOf(r.Context()), Argv: req.Argv, Cwd: req.Cwd, Env: req.Env,
		Stdin: req.Stdin, Key: key, Timeout: timeout,
		Limits:   core.Limits{Memory: req.Memory, Pids: req.Pids, CPUs: req.CPUs},
		HomeBase: homeRev,
	})
	if err != nil {
		return err
	}
	w.Header().Set("Computerd-Exec-Id", rec.ID)
	return s.streamEvents(w, r, rec.ID)
}

// streamEvents writes an exec's events as NDJSON, flushing each.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, id string) error {
	run, err := s.runner()
	if err != nil {
		return err
	}
	out := startLines(w)
	err = run.Follow(r.Context(), id, func(ev runner.Event) error {
		if ev.Exec != nil {
			rec := s.tenantExec(*ev.Exec)
			ev.Exec = &rec
		}
		if err := out.add(ev); err != nil {
			return err
		}
		return out.flush()
	})
	if err != nil && r.Context().Err() != nil {
		return nil // the client left; the exec goes on
	}
	return err
}

// execOf finds exec {id} of workspace {ws}.
func (s *Server) execOf(r *http.Request) (core.Exec, error) {
	ws, err := s.workspace(r)
	if err != nil {
		return core.Exec{}, err
	}
	rec, err := s.Store.ExecByID(r.Context(), r.PathValue("id"))
	if err == nil && (rec.WS != ws.ID || rec.Tenant != ws.Tenant) {
		err = fmt.Errorf("exec %s: %w", r.PathValue("id"), core.ErrNotFound)
	}
	return rec, err
}

func (s *Server) listExecs(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 0)
	if err != nil {
		return err
	}
	list, err := s.Store.Execs(r.Context(), ws.Tenant, ws.ID, int(limit))
	if err != nil {
		return err
	}
	for i := range list {
		list[i] = s.tenantExec(list[i])
	}
	return writeJSON(w, http.StatusOK, list)
}

func (s *Server) getExec(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.execOf(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.tenantExec(rec))
}

// tenantExec is exec record e as its tenant reads it: its error (which
// may name the output log, the overlay's layers or a spool file) without
// the data directory's paths; the journal keeps them for the operator.
func (s *Server) tenantExec(e core.Exec) core.Exec {
	e.Error = s.hidePaths(e.Error)
	return e
}

func (s *Server) execEvents(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.execOf(r)
	if err != nil {
		return err
	}
	return s.streamEvents(w, r, rec.ID)
}

func (s *Server) killExec(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runner()
	if err != nil {
		return err
	}
	rec, err := s.execOf(r)
	if err != nil {
		return err
	}
	if err := run.Kill(rec.ID); err != nil {
		if errors.Is(err, core.ErrNotFound) {
			return failure(core.ErrInvalidArgument, "exec %s is not running (%s)", rec.ID, rec.State)
		}
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

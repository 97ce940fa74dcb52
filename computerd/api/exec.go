package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

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
	ws, homeRev, homeWS, err := run.Workspace(r.Context(), tenantOf(r.Context()), r.PathValue("ws"))
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
		HomeBase: homeRev, HomeWS: homeWS,
	})
	if err != nil {
		return err
	}
	w.Header().Set("Computerd-Exec-Id", rec.ID)
	return s.streamEvents(w, r, rec.ID, 0)
}

// streamEvents writes an exec's events as NDJSON, flushing each, leaving
// out the first offset bytes of its output. The header goes at once, so
// a client learns the exec's id before the command prints anything.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, id string, offset int64) error {
	run, err := s.runner()
	if err != nil {
		return err
	}
	out := startLines(w)
	if err := out.flush(); err != nil {
		return nil // the client left; the exec goes on
	}
	err = run.Follow(r.Context(), id, func(ev runner.Event) error {
		if ev.Type == "output" && offset > 0 {
			b := ev.Bytes()
			if int64(len(b)) <= offset {
				offset -= int64(len(b))
				return nil
			}
			ev = outputFrom(ev, b[offset:])
			offset = 0
		}
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
	var list []core.Exec
	if boolParam(r, "undelivered") {
		// An executor's execs whose writes wait to reach the home.
		list, err = s.Store.Undelivered(r.Context(), ws.Tenant, ws.ID)
	} else {
		list, err = s.Store.Execs(r.Context(), ws.Tenant, ws.ID, int(limit))
	}
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

// execEvents streams an exec's events; ?offset=N leaves out the first N
// bytes of its output (both streams, in order), so that a client that
// read that much goes on from there.
func (s *Server) execEvents(w http.ResponseWriter, r *http.Request) error {
	offset, err := intParam(r, "offset", 0)
	if err != nil {
		return err
	}
	rec, err := s.execOf(r)
	if err != nil {
		return err
	}
	return s.streamEvents(w, r, rec.ID, offset)
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

// outputFrom is output event ev holding only data, the tail of its bytes
// (base64 if the cut left them no whole UTF-8).
func outputFrom(ev runner.Event, data []byte) runner.Event {
	ev.Data, ev.Data64 = "", nil
	if utf8.Valid(data) {
		ev.Data = string(data)
	} else {
		ev.Data64 = data
	}
	return ev
}

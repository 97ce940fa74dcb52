package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// Agent runs, memories and skills. computerd keeps the journal of a run;
// the client that drives the model (and holds its key) takes the steps.

// followPoll is how often a followed run's steps are read again.
const followPoll = 100 * time.Millisecond

func (s *Server) runRoutes() []route {
	return []route{
		{"POST /v1/workspaces/{ws}/runs", s.createRun},
		{"GET /v1/workspaces/{ws}/runs", s.listRuns},
		{"GET /v1/runs/{id}", s.getRun},
		{"POST /v1/runs/{id}/claim", s.claimRun},
		{"POST /v1/runs/{id}/renew", s.renewRun},
		{"GET /v1/runs/{id}/steps", s.runSteps},
		{"POST /v1/runs/{id}/steps", s.beginStep},
		{"PUT /v1/runs/{id}/steps/{seq}", s.endStep},
		{"POST /v1/runs/{id}/end", s.endRun},
		{"POST /v1/runs/{id}/cancel", s.cancelRun},
		{"GET /v1/memories", s.listMemories},
		{"POST /v1/memories", s.addMemory},
		{"DELETE /v1/memories/{id}", s.deleteMemory},
		{"GET /v1/skills", s.listSkills},
		{"GET /v1/skills/{name}", s.getSkill},
		{"PUT /v1/skills/{name}", s.saveSkill},
		{"DELETE /v1/skills/{name}", s.deleteSkill},
	}
}

// runOf finds run {id} among the caller's: another tenant's run is not
// found, so ids do not leak.
func (s *Server) runOf(r *http.Request) (core.Run, error) {
	run, err := s.Store.Run(r.Context(), r.PathValue("id"))
	if err == nil && run.Tenant != tenantOf(r.Context()) {
		err = fmt.Errorf("run %s: %w", r.PathValue("id"), core.ErrNotFound)
	}
	return run, err
}

func (s *Server) createRun(w http.ResponseWriter, r *http.Request) error {
	var req wire.CreateRun
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	if req.Driver == "" {
		return badRequest("a run needs a driver id")
	}
	if req.Limits.Timeout != "" {
		if d, err := time.ParseDuration(req.Limits.Timeout); err != nil || d <= 0 {
			return badRequest("timeout %q: want a positive duration such as 30m", req.Limits.Timeout)
		}
	}
	if req.Limits.MaxSteps < 0 || req.Limits.MaxTokens < 0 || req.Limits.MaxCost < 0 {
		return badRequest("limits must not be negative")
	}
	run, err := s.Store.CreateRun(r.Context(), core.Run{WS: ws.ID, Task: req.Task, Provider: req.Provider, Model: req.Model,
		BaseURL: req.BaseURL, Skill: req.Skill, Limits: req.Limits, Driver: req.Driver, Lease: req.Lease})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, run)
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 0)
	if err != nil {
		return err
	}
	runs, err := s.Store.Runs(r.Context(), ws.Tenant, ws.ID, int(limit))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, runs)
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runOf(r)
	if err != nil {
		return err
	}
	steps, err := s.Store.Steps(r.Context(), run.ID, 0)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wire.RunDetail{Run: run, Steps: steps})
}

func (s *Server) claimRun(w http.ResponseWriter, r *http.Request) error {
	var req wire.ClaimRun
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if _, err := s.runOf(r); err != nil {
		return err
	}
	run, err := s.Store.ClaimRunWith(r.Context(), r.PathValue("id"), fsstore.RunClaim{Driver: req.Driver, Lease: req.Lease,
		Provider: req.Provider, Model: req.Model, BaseURL: req.BaseURL})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

func (s *Server) renewRun(w http.ResponseWriter, r *http.Request) error {
	var req wire.RenewRun
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if _, err := s.runOf(r); err != nil {
		return err
	}
	run, err := s.Store.RenewRun(r.Context(), r.PathValue("id"), req.Driver)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

// runSteps answers a run's steps after ?after= as NDJSON. With ?follow=1
// it goes on: each step is sent when it begins and again when it ends, in
// order, until the run ends or is interrupted (no driver takes it on).
func (s *Server) runSteps(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runOf(r)
	if err != nil {
		return err
	}
	after, err := intParam(r, "after", 0)
	if err != nil {
		return err
	}
	follow := boolParam(r, "follow")
	out := startLines(w)
	// sent: the steps already sent in their final state; open: the one
	// sent as begun, to be sent again when it ends.
	sent, open := int(after), 0
	// caughtUp: the steps recorded when the follow began went out; a
	// step that later began and ended between two looks is sent begun
	// first, as a follower would have seen it looking sooner.
	caughtUp := false
	for {
		// The run's state is read before its steps: once it is final no
		// step changes, so this pass sends the rest, and a step left open
		// (its driver died, the run was ended by another) goes as it stands.
		if run, err = s.Store.Run(r.Context(), run.ID); err != nil {
			return err
		}
		final := run.State.Final() || run.State == core.RunInterrupted
		steps, err := s.Store.Steps(r.Context(), run.ID, sent)
		if err != nil {
			return err
		}
		for _, st := range steps {
			if st.State != core.StepDone && !final {
				if st.Seq != open {
					if err := out.add(st); err != nil {
						return nil
					}
					open = st.Seq
				}
				break // later steps wait until this one ends
			}
			if follow && caughtUp && st.State == core.StepDone && st.Seq != open {
				if err := out.add(begunView(st)); err != nil {
					return nil
				}
			}
			if st.State == core.StepDone || st.Seq != open {
				if err := out.add(st); err != nil {
					return nil
				}
			}
			sent = st.Seq
		}
		caughtUp = true
		if err := out.flush(); err != nil {
			return nil // the client left
		}
		if !follow || final {
			return nil
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-time.After(followPoll):
		}
	}
}

// begunView is step st as it was recorded when it began: what it is,
// without its result.
func begunView(st core.Step) core.Step {
	return core.Step{Run: st.Run, Seq: st.Seq, Kind: st.Kind, State: core.StepStarted, Tool: st.Tool, CallID: st.CallID, Args: st.Args, Started: st.Started}
}

// stepBody reads a step record for run {id}, whose seq and run it fixes.
func (s *Server) stepBody(w http.ResponseWriter, r *http.Request) (wire.StepRecord, error) {
	var req wire.StepRecord
	if err := s.readJSON(w, r, &req); err != nil {
		return req, err
	}
	run, err := s.runOf(r)
	if err != nil {
		return req, err
	}
	req.Step.Run = run.ID
	if v := r.PathValue("seq"); v != "" {
		seq, err := strconv.Atoi(v)
		if err != nil || seq < 1 {
			return req, badRequest("step %q: want a number from 1", v)
		}
		if req.Step.Seq != 0 && req.Step.Seq != seq {
			return req, badRequest("step %d in the path, %d in the body", seq, req.Step.Seq)
		}
		req.Step.Seq = seq
	}
	return req, nil
}

func (s *Server) beginStep(w http.ResponseWriter, r *http.Request) error {
	req, err := s.stepBody(w, r)
	if err != nil {
		return err
	}
	st, begun, err := s.Store.BeginStep(r.Context(), req.Driver, req.Step)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if begun {
		status = http.StatusCreated
	}
	return writeJSON(w, status, st)
}

func (s *Server) endStep(w http.ResponseWriter, r *http.Request) error {
	req, err := s.stepBody(w, r)
	if err != nil {
		return err
	}
	st, err := s.Store.EndStep(r.Context(), req.Driver, req.Step)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) endRun(w http.ResponseWriter, r *http.Request) error {
	var req wire.EndRun
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if _, err := s.runOf(r); err != nil {
		return err
	}
	run, err := s.Store.EndRun(r.Context(), r.PathValue("id"), req.Driver, req.State, req.Error)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.runOf(r); err != nil {
		return err
	}
	run, err := s.Store.CancelRun(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

func (s *Server) listMemories(w http.ResponseWriter, r *http.Request) error {
	ms, err := s.Store.Memories(r.Context(), tenantOf(r.Context()))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ms)
}

func (s *Server) addMemory(w http.ResponseWriter, r *http.Request) error {
	var req wire.AddMemory
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	m, err := s.Store.AddMemory(r.Context(), tenantOf(r.Context()), req.Text)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, m)
}

func (s *Server) deleteMemory(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return badRequest("memory id %q: want a number", r.PathValue("id"))
	}
	if err := s.Store.DeleteMemory(r.Context(), tenantOf(r.Context()), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listSkills(w http.ResponseWriter, r *http.Request) error {
	sks, err := s.Store.Skills(r.Context(), tenantOf(r.Context()))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sks)
}

func (s *Server) getSkill(w http.ResponseWriter, r *http.Request) error {
	sk, err := s.Store.Skill(r.Context(), tenantOf(r.Context()), r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sk)
}

func (s *Server) saveSkill(w http.ResponseWriter, r *http.Request) error {
	var sk core.Skill
	if err := s.readJSON(w, r, &sk); err != nil {
		return err
	}
	if sk.Name != "" && sk.Name != r.PathValue("name") {
		return badRequest("skill %q in the path, %q in the body", r.PathValue("name"), sk.Name)
	}
	sk.Name = r.PathValue("name")
	sk, err := s.Store.SaveSkill(r.Context(), tenantOf(r.Context()), sk)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sk)
}

func (s *Server) deleteSkill(w http.ResponseWriter, r *http.Request) error {
	if err := s.Store.DeleteSkill(r.Context(), tenantOf(r.Context()), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

package api

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"computerd/core"
	"computerd/syncproto"
	"computerd/wire"
)

// syncRoutes are the home's side of syncproto (docs/SYNC.md).
func (s *Server) syncRoutes() []route {
	return []route{
		{"GET /v1/sync/hello", s.syncHello},
		{"POST /v1/sync/{ws}/pull", s.syncPull},
		{"POST /v1/sync/{ws}/fetch", s.syncFetch},
		{"POST /v1/sync/{ws}/push", s.syncPush},
	}
}

func (s *Server) syncHome() *syncproto.Home {
	s.homeOnce.Do(func() {
		s.home = &syncproto.Home{Store: s.Store, Observe: func(kind string, chunks int, bytes int64) {
			if s.Metrics != nil {
				s.Metrics.SyncChunks.WithLabelValues(kind).Add(float64(chunks))
				s.Metrics.SyncBytes.WithLabelValues(kind).Add(float64(bytes))
			}
		}}
	})
	return s.home
}

func versionError(r *http.Request) error {
	if err := syncproto.CheckVersion(r); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

func (s *Server) syncHello(w http.ResponseWriter, r *http.Request) error {
	if err := versionError(r); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.syncHome().Hello(tenantOf(r.Context())))
}

// observeSync records a sync call's latency.
func (s *Server) observeSync(op string, start time.Time) {
	if s.Metrics != nil {
		s.Metrics.SyncLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	}
}

func (s *Server) syncPull(w http.ResponseWriter, r *http.Request) error {
	var req syncproto.PullRequest
	return syncStream(s, w, r, "pull", &req, func(ws core.Workspace) error {
		return s.syncHome().Pull(r.Context(), w, ws, req)
	})
}

func (s *Server) syncFetch(w http.ResponseWriter, r *http.Request) error {
	var req syncproto.FetchRequest
	return syncStream(s, w, r, "fetch", &req, func(ws core.Workspace) error {
		return s.syncHome().Fetch(r.Context(), w, ws, req)
	})
}

// syncStream answers a sync call that takes a JSON request and streams
// frames: version check, request body into req, workspace, then serve.
func syncStream(s *Server, w http.ResponseWriter, r *http.Request, op string, req any, serve func(core.Workspace) error) error {
	defer s.observeSync(op, time.Now())
	if err := versionError(r); err != nil {
		return err
	}
	if err := s.readJSON(w, r, req); err != nil {
		return err
	}
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-computerd-sync")
	return serve(ws)
}

func (s *Server) syncPush(w http.ResponseWriter, r *http.Request) error {
	defer s.observeSync("push", time.Now())
	if err := versionError(r); err != nil {
		drain(r.Body)
		return err
	}
	ws, err := s.workspace(r)
	if err != nil {
		drain(r.Body)
		return err
	}
	res, err := s.syncHome().Push(r.Context(), http.MaxBytesReader(w, r.Body, s.Limits.MaxUpload), ws, tenantOf(r.Context()))
	if s.Metrics != nil {
		s.Metrics.Pushes.WithLabelValues(pushOutcome(res, err)).Inc()
	}
	if err != nil {
		if cut := pushCut(r, err); cut != nil {
			return cut
		}
		if errors.Is(err, syncproto.ErrMalformed) {
			return badRequest("%v", err)
		}
		return err
	}
	if !res.Duplicate {
		s.Metrics.Committed(res.Revision)
	}
	return writeJSON(w, http.StatusOK, res)
}

// pushCut is the answer to a push whose body did not arrive whole: cut
// (the connection closed or was reset mid-stream), stalled or trickling
// past the body deadline, or given up by the client. It is a timeout
// (408), never a malformed stream: the transport failed, nothing was
// applied, and the same push may be sent again. nil if err is none of these.
func pushCut(r *http.Request, err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil // over --max-upload: too large, whole or not
	}
	if cut := bodyCut(err, "sync push"); cut != nil {
		return cut
	}
	switch {
	case errors.Is(err, syncproto.ErrCut):
		return failure(wire.ErrTimeout, "sync push: the request body was cut before its end (%v); nothing was applied", err)
	case r.Context().Err() != nil && errors.Is(err, context.Canceled):
		// The connection failed while the push was read (a reset, a
		// read past its deadline): the server ended its context.
		return failure(wire.ErrTimeout, "sync push: the connection failed before the body's end; nothing was applied")
	}
	return nil
}

func pushOutcome(res syncproto.PushResult, err error) string {
	switch {
	case err == nil && res.BaseGone != "":
		return "base_gone" // sent again whole by the executor
	case err == nil && res.Duplicate:
		return "duplicate"
	case err == nil && (len(res.Conflict) > 0 || res.KeptAs != ""):
		return "conflict" // kept as a copy (res.KeptAs)
	case err == nil:
		return "applied"
	case errors.Is(err, core.ErrConflict):
		return "conflict"
	case errors.Is(err, syncproto.ErrCut), errors.Is(err, context.Canceled), errors.Is(err, os.ErrDeadlineExceeded):
		return "cut"
	case errors.Is(err, syncproto.ErrMalformed):
		return "malformed"
	}
	return "error"
}

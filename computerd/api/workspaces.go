package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// createMu makes the per-tenant workspace count check and the create one step.
var createMu sync.Mutex

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) error {
	list, err := s.Store.Workspaces(r.Context(), tenantOf(r.Context()))
	if err != nil {
		return err
	}
	if list == nil {
		list = []core.Workspace{}
	}
	return writeJSON(w, http.StatusOK, list)
}

// checkQuota refuses a new workspace when the tenant has as many as its quota allows.
func (s *Server) checkQuota(r *http.Request) error {
	return s.Store.CheckWorkspaceQuota(r.Context(), tenantOf(r.Context()))
}

func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request) error {
	var req wire.CreateWorkspace
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	createMu.Lock()
	defer createMu.Unlock()
	if err := s.checkQuota(r); err != nil {
		return err
	}
	ws, err := s.Store.CreateWorkspace(r.Context(), tenantOf(r.Context()), req.Name)
	if err != nil {
		return err
	}
	s.Metrics.Committed(core.Revision{Rev: 1, Source: core.SourceCreate})
	return writeJSON(w, http.StatusCreated, ws)
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ws)
}

func (s *Server) deleteWorkspace(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	if s.Mounts != nil {
		for _, m := range s.Mounts.Mounts(ws.Tenant) {
			if m.Workspace == ws.Name {
				return failure(core.ErrConflict, "workspace %s is mounted at %s: unmount it first (agentctl umount %s)", ws.Name, m.Dir, m.Dir)
			}
		}
	}
	if err := s.Store.DeleteWorkspace(r.Context(), ws.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) error {
	var req wire.Fork
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	src, err := s.workspace(r)
	if err != nil {
		return err
	}
	createMu.Lock()
	defer createMu.Unlock()
	if err := s.checkQuota(r); err != nil {
		return err
	}
	ws, err := s.Store.Fork(r.Context(), src.ID, req.Rev, req.Name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, ws)
}

func (s *Server) log(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 0)
	if err != nil {
		return err
	}
	revs, err := s.Store.Log(r.Context(), ws.ID, int(limit))
	if err != nil {
		return err
	}
	if revs == nil {
		revs = []core.Revision{}
	}
	return writeJSON(w, http.StatusOK, revs)
}

// diff answers ?from=&to=&format=unified|stat|changeset (to defaults to the
// head, from to the revision before to). Each format is written as it is
// encoded, never buffered whole.
func (s *Server) diff(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	to, err := intParam(r, "to", ws.Head)
	if err != nil {
		return err
	}
	if to == core.Head {
		to = ws.Head
	}
	from, err := intParam(r, "from", max(to-1, 1))
	if err != nil {
		return err
	}
	switch f := r.URL.Query().Get("format"); f {
	case "", "unified":
		// WriteDiff resolves both revisions before it writes a byte, so a
		// bad one is still a clean error answer.
		w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
		return s.Store.WriteDiff(r.Context(), w, ws.ID, from, to)
	case "stat":
		out := newArray(w)
		err := s.Store.EachFileChange(r.Context(), ws.ID, from, to, func(f core.FileChange) error { return out.add(f) })
		if err != nil {
			return err
		}
		return out.end()
	case "changeset":
		d, err := s.Store.OpenDiff(r.Context(), ws.ID, from, to)
		if err != nil {
			return err
		}
		defer d.Close()
		return writeChangeset(w, d)
	default:
		return badRequest("format=%q: want unified, stat or changeset", f)
	}
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) error {
	var req wire.Restore
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Rev <= 0 {
		return badRequest("restore: rev is required")
	}
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	info := commitInfo(r, 0, fmt.Sprintf("restore %s from revision %d", displayPath(req.Path), req.Rev))
	info.Source = core.SourceRestore
	rev, err := s.Store.Restore(r.Context(), ws.ID, req.Rev, req.Path, info)
	if err != nil {
		return err
	}
	return s.answerRevision(w, http.StatusOK, rev)
}

func displayPath(p string) string {
	if p == "" || p == "/" || p == "." {
		return "/"
	}
	return p
}

// writeChangeset answers the changeset d as JSON, op by op as the
// diff's spool gives them back: neither the ops nor their encoding are
// ever held whole.
func writeChangeset(w http.ResponseWriter, d *fsstore.DiffStream) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	fmt.Fprintf(bw, `{"from":%d,"to":%d,"ops":[`, d.From, d.To)
	enc := json.NewEncoder(bw)
	first := true
	err := d.Each(func(op core.Op) error {
		if !first {
			bw.WriteByte(',')
		}
		first = false
		return enc.Encode(op)
	})
	if err != nil {
		return err
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

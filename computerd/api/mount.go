package api

import (
	"context"
	"net/http"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// Mounter serves workspaces as directories on the daemon's host.
type Mounter interface {
	Mount(ctx context.Context, tenant string, ws core.Workspace, dir string) (wire.MountInfo, error)
	Unmount(ctx context.Context, tenant, dir string) error
	Mounts(tenant string) []wire.MountInfo
}

func (s *Server) mountRoutes() []route {
	return []route{
		{"POST /v1/workspaces/{ws}/mount", s.mount},
		{"GET /v1/mounts", s.listMounts},
		{"POST /v1/mounts/unmount", s.unmount},
	}
}

func (s *Server) mounter() (Mounter, error) {
	if s.Mounts == nil {
		return nil, failure(wire.ErrUnavailable, "mounts are not available on this computerd")
	}
	return s.Mounts, nil
}

func (s *Server) mount(w http.ResponseWriter, r *http.Request) error {
	m, err := s.mounter()
	if err != nil {
		return err
	}
	if err := needScope(r, fsstore.ScopeMount, "a host mount"); err != nil {
		return err
	}
	var req wire.Mount
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	info, err := m.Mount(r.Context(), tenantOf(r.Context()), ws, req.Dir)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, info)
}

func (s *Server) listMounts(w http.ResponseWriter, r *http.Request) error {
	m, err := s.mounter()
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m.Mounts(tenantOf(r.Context())))
}

func (s *Server) unmount(w http.ResponseWriter, r *http.Request) error {
	m, err := s.mounter()
	if err != nil {
		return err
	}
	if err := needScope(r, fsstore.ScopeMount, "a host unmount"); err != nil {
		return err
	}
	var req wire.Mount
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if err := m.Unmount(r.Context(), tenantOf(r.Context()), req.Dir); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

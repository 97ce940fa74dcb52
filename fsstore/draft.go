package fsstore

import (
	"context"
	"fmt"
	"strings"

	"computerd/core"
)

// Drafts are hidden forks: a FUSE mount serving an exec keeps its writes in
// one, so they survive a crash of computerd and can be committed later. A
// draft belongs to a tenant no user can name (user tenants are
// [A-Za-z0-9._-]), so Workspaces(tenant) never lists it; DeleteWorkspace,
// Diff, Snapshot and CommitNodes work on it by id as on any workspace.

// draftTenantPrefix marks the tenant of a draft; the owner's tenant follows.
const draftTenantPrefix = "~draft~"

// Draft is a hidden fork and the workspace it was made from.
type Draft struct {
	core.Workspace        // Tenant is the owner's tenant; ID and Head are the draft's
	Origin         int64  `json:"origin"`     // the workspace forked
	OriginRev      int64  `json:"origin_rev"` // its revision the draft started from
	Label          string `json:"label"`      // the name given at CreateDraft
}

// CreateDraft makes a hidden fork of workspace src at revision rev (Head for
// its newest). label names it among the drafts of src and must be unique
// among them.
func (s *Store) CreateDraft(ctx context.Context, src int64, rev int64, label string) (Draft, error) {
	if !validWorkspaceName(label) {
		return Draft{}, fmt.Errorf("draft label %q: %w", label, core.ErrInvalidArgument)
	}
	var id int64
	err := s.write(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, src)
		if err != nil {
			return err
		}
		if strings.HasPrefix(w.Tenant, draftTenantPrefix) {
			return fmt.Errorf("draft of a draft: %w", core.ErrInvalidArgument)
		}
		if rev == core.Head {
			rev = w.Head
		} else if err := s.checkRev(ctx, s.wconn, w, rev); err != nil {
			return err
		}
		tenant, name := draftTenantPrefix+w.Tenant, draftName(w.ID, label)
		if err := s.nameFree(ctx, tenant, name); err != nil {
			return err
		}
		now := s.Now().UnixNano()
		if id, err = s.insertLayer(ctx, tenant, name, w.ID, rev, now); err != nil {
			return wrapDB("create draft", err)
		}
		_, err = s.wq.insRevision.ExecContext(ctx, id, 1, now, string(core.SourceFork), w.Tenant, "", fmt.Sprintf("draft of %s@%d", w.Name, rev), 0)
		return wrapDB("record revision", err)
	})
	if err != nil {
		return Draft{}, err
	}
	w, err := s.WorkspaceByID(ctx, id)
	if err != nil {
		return Draft{}, err
	}
	return toDraft(w), nil
}

func draftName(origin int64, label string) string { return fmt.Sprintf("%d~%s", origin, label) }

func toDraft(w core.Workspace) Draft {
	d := Draft{Workspace: w, Origin: w.BaseID, OriginRev: w.BaseRev}
	d.Tenant = strings.TrimPrefix(w.Tenant, draftTenantPrefix)
	if _, label, ok := strings.Cut(w.Name, "~"); ok {
		d.Label = label
	}
	return d
}

// Drafts lists the live drafts of every workspace, oldest first.
func (s *Store) Drafts(ctx context.Context) ([]Draft, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+wsCols+` FROM workspaces WHERE deleted_ns IS NULL AND substr(tenant, 1, ?1) = ?2 ORDER BY id`,
		len(draftTenantPrefix), draftTenantPrefix)
	if err != nil {
		return nil, wrapDB("list drafts", err)
	}
	defer rows.Close()
	var out []Draft
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, wrapDB("list drafts", err)
		}
		out = append(out, toDraft(w))
	}
	return out, wrapDB("list drafts", rows.Err())
}

// KeepDraft turns draft id into an ordinary workspace of its owner's tenant
// called name (a fork of the draft's origin), so users can read, diff and
// restore from it.
func (s *Store) KeepDraft(ctx context.Context, id int64, name string) (core.Workspace, error) {
	if !validWorkspaceName(name) {
		return core.Workspace{}, fmt.Errorf("workspace name %q: %w", name, core.ErrInvalidArgument)
	}
	err := s.write(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, id)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(w.Tenant, draftTenantPrefix) {
			return fmt.Errorf("workspace %d is not a draft: %w", id, core.ErrInvalidArgument)
		}
		tenant := strings.TrimPrefix(w.Tenant, draftTenantPrefix)
		if err := s.nameFree(ctx, tenant, name); err != nil {
			return err
		}
		_, err = s.wconn.ExecContext(ctx, `UPDATE workspaces SET tenant = ?, name = ? WHERE id = ?`, tenant, name, id)
		return wrapDB("keep draft", err)
	})
	if err != nil {
		return core.Workspace{}, err
	}
	s.uncache(id)
	return s.WorkspaceByID(ctx, id)
}

package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"computerd/core"
)

// Applied says where ApplyOrKeep committed a changeset.
type Applied struct {
	// Revision is the new revision: of the workspace, or of Copy when the
	// changeset conflicted.
	Revision core.Revision
	// Conflict lists the paths the workspace changed after the base that
	// the changeset changes too; then the workspace is unchanged and Copy,
	// a fork of it at the base, holds the changeset.
	Conflict []string
	Copy     core.Workspace
	// Duplicate: Copy was made by an earlier call with the same
	// CommitInfo.ExecID, and nothing was written.
	Duplicate bool
}

// ApplyOrKeep applies cs to ws as Apply does, except that a conflict keeps
// the changes rather than failing: in the same transaction it forks ws at
// info.Base as a new workspace called copyName (copyName-2, -3, ... if the
// name is taken) and commits cs there, so both versions are retrievable
// and no caller has to make the copy in steps a crash could split.
//
// Retries are idempotent by info.ExecID: if a live fork of ws already
// holds a revision with that exec id, it is the copy and nothing is
// written. (A retry whose changes did apply to ws finds its revision with
// ExecRevision first: the caller checks that.)
func (s *Store) ApplyOrKeep(ctx context.Context, ws int64, cs *core.Changeset, info CommitInfo, copyName string) (Applied, error) {
	ops, err := cleanOps(cs.Ops)
	if err != nil {
		return Applied{}, err
	}
	return s.applyOrKeep(ctx, ws, cs.From, sliceOps(ops), info, copyName)
}

// ApplyOrKeepPacked is ApplyOrKeep of the changeset from..(ops), whose
// ops PackedOps.Add has checked.
func (s *Store) ApplyOrKeepPacked(ctx context.Context, ws int64, from int64, ops *PackedOps, info CommitInfo, copyName string) (Applied, error) {
	return s.applyOrKeep(ctx, ws, from, ops, info, copyName)
}

func (s *Store) applyOrKeep(ctx context.Context, ws int64, from int64, ops opList, info CommitInfo, copyName string) (Applied, error) {
	if ops.Len() == 0 {
		return Applied{}, fmt.Errorf("commit: no changes: %w", core.ErrInvalidArgument)
	}
	if !validWorkspaceName(copyName) {
		return Applied{}, fmt.Errorf("conflict copy name %q: %w", copyName, core.ErrInvalidArgument)
	}
	if info.Base == 0 {
		info.Base = from
	}
	var out Applied
	var t *wtx
	var copyID int64
	err := s.write(ctx, func() error {
		var err error
		if t, err = s.begin(ctx, ws, info); err != nil {
			return err
		}
		if info.Base != 0 && info.Base != t.rev-1 {
			var ce *core.ConflictError
			err := s.checkConflict(ctx, t, info.Base, ops)
			if errors.As(err, &ce) {
				out.Conflict = ce.Paths
				t, copyID, err = s.keepCopy(ctx, ws, info.Base, func(t *wtx) error { return t.applyChangeset(ops) }, ops.Len(), info, copyName, &out)
				return err
			}
			if err != nil {
				return err
			}
		}
		if err := t.applyChangeset(ops); err != nil {
			return err
		}
		t.changes = ops.Len()
		return t.finish(info)
	})
	if err != nil {
		if copyID != 0 {
			// Rolled back: the id may be given to another workspace.
			s.uncache(copyID)
		}
		return Applied{}, err
	}
	if out.Duplicate {
		return out, nil
	}
	info.Base, info.HomeRev, info.HomeWS = 0, 0, 0
	out.Revision = t.revision(info)
	if copyID != 0 {
		if out.Copy, err = s.WorkspaceByID(ctx, copyID); err != nil {
			return out, err
		}
	}
	if s.OnCommit != nil {
		s.OnCommit(t.ws.id, out.Revision)
	}
	return out, nil
}

// KeepTreePacked keeps the tree ops build from nothing (ops as a full
// sync pull's: parents first) as a conflict copy of ws, never applying
// anything to ws itself: in one transaction it forks ws at its head as a
// new workspace called copyName (copyName-2, -3, ... if the name is taken)
// and commits there, as the copy's revision 2, that tree in place of the
// fork's. It is for changes whose base ws no longer holds (pruned, or a
// revision of a workspace deleted since whose name ws now has): with no
// base, their conflicts with ws cannot be told, so all of the tree they
// were made on is kept. Retries are idempotent by info.ExecID, as
// ApplyOrKeep's are; Applied.Conflict stays empty.
func (s *Store) KeepTreePacked(ctx context.Context, ws int64, ops *PackedOps, info CommitInfo, copyName string) (Applied, error) {
	if !validWorkspaceName(copyName) {
		return Applied{}, fmt.Errorf("conflict copy name %q: %w", copyName, core.ErrInvalidArgument)
	}
	all := replacedOps{ops}
	var out Applied
	var t *wtx
	var copyID int64
	err := s.write(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, ws)
		if err != nil {
			return err
		}
		info.Base = 0
		t, copyID, err = s.keepCopy(ctx, ws, w.Head, func(t *wtx) error { return t.applyBatch(all) }, all.Len(), info, copyName, &out)
		return err
	})
	if err != nil {
		if copyID != 0 {
			s.uncache(copyID)
		}
		return Applied{}, err
	}
	if out.Duplicate {
		return out, nil
	}
	info.Base, info.HomeRev, info.HomeWS = 0, 0, 0
	out.Revision = t.revision(info)
	if out.Copy, err = s.WorkspaceByID(ctx, copyID); err != nil {
		return out, err
	}
	if s.OnCommit != nil {
		s.OnCommit(t.ws.id, out.Revision)
	}
	return out, nil
}

// keepCopy finds or makes the conflict copy of changes (see ApplyOrKeep):
// a fork of ws at revision at, to which apply writes n changes. It
// returns the transaction that writes the copy's revision, nil for a
// duplicate, and the copy's id. The caller is in a write transaction.
func (s *Store) keepCopy(ctx context.Context, ws, at int64, apply func(*wtx) error, n int, info CommitInfo, copyName string, out *Applied) (*wtx, int64, error) {
	w, err := s.liveWorkspace(ctx, s.wconn, ws)
	if err != nil {
		return nil, 0, err
	}
	if info.ExecID != "" {
		var id int64
		var r core.Revision
		var at int64
		err := s.wconn.QueryRowContext(ctx, `SELECT r.ws, r.rev, r.time_ns, r.source, r.tenant, r.exec_id, r.message, r.changes
			FROM revisions r JOIN workspaces c ON c.id = r.ws
			WHERE r.exec_id = ? AND r.exec_id != '' AND c.base_ws = ? AND c.deleted_ns IS NULL ORDER BY r.rev DESC LIMIT 1`, info.ExecID, ws).
			Scan(&id, &r.Rev, &at, &r.Source, &r.Tenant, &r.ExecID, &r.Message, &r.Changes)
		switch {
		case err == nil:
			r.Time = time.Unix(0, at)
			out.Revision, out.Duplicate = r, true
			if out.Copy, err = s.liveWorkspace(ctx, s.wconn, id); err != nil {
				return nil, 0, err
			}
			return nil, 0, nil
		case !errors.Is(err, sql.ErrNoRows):
			return nil, 0, wrapDB("find conflict copy", err)
		}
	}
	name := copyName
	for i := 2; ; i++ {
		err := s.nameFree(ctx, w.Tenant, name)
		if err == nil {
			break
		}
		if !errors.Is(err, core.ErrWorkspaceExists) || i > 100 {
			return nil, 0, fmt.Errorf("keep conflicting changes: %w", err)
		}
		if name = fmt.Sprintf("%s-%d", copyName, i); !validWorkspaceName(name) {
			return nil, 0, fmt.Errorf("keep conflicting changes: workspace %q: %w", copyName, core.ErrWorkspaceExists)
		}
	}
	id, err := s.insertFork(ctx, w, at, name)
	if err != nil {
		return nil, 0, err
	}
	t, err := s.begin(ctx, id, info)
	if err != nil {
		return nil, id, err
	}
	if err := apply(t); err != nil {
		return nil, id, err
	}
	t.changes = n
	info.Base, info.HomeRev, info.HomeWS = 0, 0, 0
	return t, id, t.finish(info)
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"computerd/computerd/overlay"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// Remote makes a runner an executor's: its workspaces are mirrors of a
// home's, each command starts from the home's latest revision, and its
// changes are pushed home as one revision.
type Remote struct {
	Mirror *syncproto.Mirror
	// RetryMin and RetryMax bound the backoff of pending pushes (default 1 s, 30 s).
	RetryMin, RetryMax time.Duration
}

// Workspace returns the workspace an exec of name runs on: on a home the
// workspace itself; on an executor its mirror, first brought up to the
// home's head (homeRev is that head).
func (r *Runner) Workspace(ctx context.Context, tenant, name string) (ws core.Workspace, homeRev int64, err error) {
	if r.Remote == nil {
		ws, err = r.Store.Workspace(ctx, tenant, name)
		return ws, 0, err
	}
	if tenant != r.Remote.Mirror.Tenant {
		return ws, 0, fmt.Errorf("this executor serves tenant %q: %w", r.Remote.Mirror.Tenant, core.ErrWorkspaceNotFound)
	}
	st, err := r.Remote.Mirror.Pull(ctx, name)
	if err != nil {
		return ws, 0, fmt.Errorf("pull %s from the home: %w", name, err)
	}
	if r.Metrics != nil {
		r.Metrics.SyncBytes.WithLabelValues("pull").Add(float64(st.Bytes))
		r.Metrics.SyncChunks.WithLabelValues("pull").Add(float64(st.Chunks))
	}
	return st.Local, st.HomeRev, nil
}

// deliverer returns the fusefs Deliver hook that pushes an exec's
// changeset home; keptAs learns the name of a conflict copy at the home.
func (r *Runner) deliverer(e core.Exec, keptAs *string) func(context.Context, fsstore.Draft, *core.Changeset, fsstore.CommitInfo) (core.Revision, error) {
	return func(ctx context.Context, d fsstore.Draft, cs *core.Changeset, info fsstore.CommitInfo) (core.Revision, error) {
		rev, kept, err := r.push(ctx, e, d.ID, cs, core.SourceExec)
		*keptAs = kept
		return rev, err
	}
}

// push sends an exec's changeset (read from draft) home. On a conflict
// the home keeps the changes in a copy of its own, in the push's
// transaction: push returns a *core.ConflictError and the copy's name. A
// transport failure wraps overlay.ErrKeepDraft (the caller retries later).
func (r *Runner) push(ctx context.Context, e core.Exec, draft int64, cs *core.Changeset, source core.Source) (core.Revision, string, error) {
	start := time.Now()
	hdr := syncproto.PushHeader{PushID: e.ID, Base: e.HomeBase, Message: commandLine(e.Argv), Source: source}
	res, err := r.Remote.Mirror.Push(ctx, e.WSName, draft, cs, hdr)
	if err == nil && len(res.Conflict) > 0 {
		err = &core.ConflictError{Base: hdr.Base, Paths: res.Conflict}
	}
	if r.Metrics != nil {
		r.Metrics.SyncLatency.WithLabelValues("push").Observe(time.Since(start).Seconds())
		r.Metrics.Pushes.WithLabelValues(pushOutcome(err)).Inc()
	}
	switch {
	case err == nil:
		return res.Revision, "", nil
	case errors.Is(err, core.ErrConflict):
		return res.Revision, res.KeptAs, err
	default:
		var we *wire.Error
		switch {
		case errors.Is(err, core.ErrMissingChunk):
			// No verdict on the changes themselves: the next push
			// carries every chunk they name again.
			return res.Revision, "", fmt.Errorf("%w: %v", overlay.ErrKeepDraft, err)
		case errors.Is(err, core.ErrNoSpace), errors.Is(err, core.ErrQuota):
			// The home cannot take them now (its disk, the tenant's
			// quota): they wait here until it can.
			return res.Revision, "", fmt.Errorf("%w: %v", overlay.ErrKeepDraft, err)
		case errors.As(err, &we) && we.Status >= 400 && we.Status < 500:
			return res.Revision, "", err // the home refused it: retrying will not help
		}
		return res.Revision, "", fmt.Errorf("%w: home unreachable: %v", overlay.ErrKeepDraft, err)
	}
}

func pushOutcome(err error) string {
	switch {
	case err == nil:
		return "applied"
	case errors.Is(err, core.ErrConflict):
		return "conflict"
	}
	return "retry"
}

// draftChanges returns the changes a draft holds (everything since it was made).
func (r *Runner) draftChanges(ctx context.Context, draft int64) (*core.Changeset, error) {
	w, err := r.Store.WorkspaceByID(ctx, draft)
	if err != nil {
		return nil, err
	}
	return r.Store.Diff(ctx, draft, 1, w.Head)
}

// settle delivers the changes of a pending or interrupted exec and
// records the outcome; it reports whether the exec is settled.
func (r *Runner) settle(ctx context.Context, e core.Exec, source core.Source) bool {
	cs, err := r.draftChanges(ctx, e.Draft)
	if err != nil {
		e.State, e.Error = e.PendingState, joinErr(e.Error, "its changes are lost: "+err.Error())
		e.PendingState = ""
		r.Store.UpdateExec(ctx, e)
		return true
	}
	var rev core.Revision
	var kept string
	if len(cs.Ops) > 0 {
		rev, kept, err = r.push(ctx, e, e.Draft, cs, source)
	}
	if errors.Is(err, overlay.ErrKeepDraft) {
		e.Error = "waiting for the home: " + err.Error()
		r.Store.UpdateExec(ctx, e)
		return false
	}
	var conflict *core.ConflictError
	switch {
	case errors.As(err, &conflict):
		e.Conflict, e.KeptAs = conflict.Paths, kept
	case err != nil:
		e.Error = joinErr(e.Error, "push: "+err.Error())
	default:
		e.Rev = rev.Rev
		e.Error = ""
	}
	e.State, e.PendingState = e.PendingState, ""
	if e.State == "" {
		e.State = core.ExecInterrupted
	}
	if err := r.Store.UpdateExec(ctx, e); err != nil {
		r.Log.Error("journal", "id", e.ID, "err", err)
		return false
	}
	if err := r.Store.DeleteWorkspace(ctx, e.Draft); err != nil {
		r.Log.Warn("delete draft", "id", e.ID, "err", err)
	}
	r.observe(e)
	return true
}

// pushPending retries the pushes of execs whose home was unreachable,
// with backoff, until ctx ends.
func (r *Runner) pushPending(ctx context.Context) {
	lo, hi := r.Remote.RetryMin, r.Remote.RetryMax
	if lo <= 0 {
		lo = time.Second
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	wait := lo
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		pending, err := r.Store.ExecsInState(ctx, core.ExecPending)
		if err != nil {
			continue
		}
		if r.Metrics != nil {
			r.Metrics.PendingPushes.Set(float64(len(pending)))
		}
		failed := false
		for _, e := range pending {
			if !r.settle(ctx, e, core.SourceExec) {
				failed = true
			}
		}
		if failed {
			wait = min(wait*2, hi)
		} else {
			wait = lo
		}
	}
}

// recoverRemote handles the drafts an executor's previous process left:
// each exec that was running is interrupted, and its writes go home as an
// interrupted revision (or wait as pending if the home is away).
func (r *Runner) recoverRemote(ctx context.Context) error {
	drafts, err := r.Store.Drafts(ctx)
	if err != nil {
		return err
	}
	for _, d := range drafts {
		id, ok := strings.CutPrefix(d.Label, "exec-")
		if !ok {
			continue
		}
		e, err := r.Store.ExecByID(ctx, id)
		if err != nil || e.State != core.ExecRunning {
			continue // pending ones are the retry loop's
		}
		e.Draft, e.Ended = d.ID, r.Store.Now()
		e.State, e.PendingState = core.ExecPending, core.ExecInterrupted
		e.Error = "the executor stopped while the command ran; its writes so far were kept"
		if err := r.Store.UpdateExec(ctx, e); err != nil {
			return err
		}
		r.settle(ctx, e, core.SourceInterrupted)
	}
	return nil
}

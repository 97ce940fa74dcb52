package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"computerd/computerd/overlay"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// Remote makes a runner an executor's: its workspaces are mirrors of a
// home's, each command starts from the home's latest revision, and its
// changes are pushed home as one revision.
//
// What an exec wrote reaches the home exactly once, or stays in its draft
// with the exec pending (listed by Store.Undelivered) until it does: a
// push that fails in any way that is not the home's verdict on it (no
// answer, a cut or timed-out connection, a status the home's API did not
// make, the home's own refusal of the moment) is tried again with
// backoff, under the same push id, which the home applies at most once.
// The verdicts that end a push: applied, kept as a conflict copy at the
// home (a base the home no longer has included: the whole tree is kept),
// or the workspace deleted at the home (whose execs, as at the home, go
// with it).
type Remote struct {
	Mirror *syncproto.Mirror
	// RetryMin and RetryMax bound the backoff of pending pushes (default
	// 1 s, 30 s); after a push the home refused (an answer of its own,
	// such as a quota or a limit) the wait starts at RetryMax and doubles
	// up to RetryRefused (default 10 min).
	RetryMin, RetryMax, RetryRefused time.Duration
	// Pushers is how many pending pushes run at once (default 4), so that
	// one slow push does not hold the others back.
	Pushers int

	mu    sync.Mutex
	retry map[string]*backoff // per pending exec: when to try it next
	wake  chan struct{}       // an exec's own push failed
}

// backoff is when a pending exec's push is tried next.
type backoff struct {
	wait time.Duration
	next time.Time
	busy bool // a push of it is under way
}

func (x *Remote) defaults() {
	if x.RetryMin <= 0 {
		x.RetryMin = time.Second
	}
	if x.RetryMax <= 0 {
		x.RetryMax = 30 * time.Second
	}
	if x.RetryRefused <= 0 {
		x.RetryRefused = 10 * time.Minute
	}
	if x.Pushers <= 0 {
		x.Pushers = 4
	}
	x.wake = make(chan struct{}, 1)
}

// Workspace returns the workspace an exec of name runs on: on a home the
// workspace itself; on an executor its mirror, first brought up to the
// home's head (homeRev is that head, of the home's workspace homeWS).
func (r *Runner) Workspace(ctx context.Context, tenant, name string) (ws core.Workspace, homeRev, homeWS int64, err error) {
	if r.Remote == nil {
		ws, err = r.Store.Workspace(ctx, tenant, name)
		return ws, 0, 0, err
	}
	if tenant != r.Remote.Mirror.Tenant {
		return ws, 0, 0, fmt.Errorf("this executor serves tenant %q: %w", r.Remote.Mirror.Tenant, core.ErrWorkspaceNotFound)
	}
	st, err := r.Remote.Mirror.Pull(ctx, name)
	if err != nil {
		return ws, 0, 0, fmt.Errorf("pull %s from the home: %w", name, err)
	}
	if r.Metrics != nil {
		r.Metrics.SyncBytes.WithLabelValues("pull").Add(float64(st.Bytes))
		r.Metrics.SyncChunks.WithLabelValues("pull").Add(float64(st.Chunks))
	}
	return st.Local, st.HomeRev, st.HomeWS, nil
}

// deliverer returns the overlay's Deliver hook that pushes an exec's
// changeset home when the command ends. What does not reach the home (or
// a copy there) at once stays in the draft: the exec is pending, and the
// pending-push loop takes it from there.
func (r *Runner) deliverer(e core.Exec, l *layer) func(context.Context, fsstore.Draft, *core.Changeset, fsstore.CommitInfo) (core.Revision, error) {
	return func(ctx context.Context, d fsstore.Draft, cs *core.Changeset, info fsstore.CommitInfo) (core.Revision, error) {
		out, err := r.push(ctx, e, d.ID, cs, core.SourceExec)
		switch {
		case err != nil:
			r.Remote.wakeUp()
			return core.Revision{}, fmt.Errorf("%w: %v", overlay.ErrKeepDraft, err)
		case out.gone != "":
			// Settled by the loop, which also lets the draft go.
			r.Remote.wakeUp()
			return core.Revision{}, fmt.Errorf("%w: %s", overlay.ErrKeepDraft, out.gone)
		case out.keptAs != "":
			l.homeKept, l.homeNote = out.keptAs, out.note
			return out.rev, &core.ConflictError{Base: e.HomeBase, Paths: out.conflict}
		}
		return out.rev, nil
	}
}

// delivery is what became of an exec's changes at the home.
type delivery struct {
	rev      core.Revision // the revision holding them: the workspace's, or its copy's
	conflict []string      // paths changed at the home meanwhile (then keptAs)
	keptAs   string        // the conflict copy that holds them
	note     string        // how they were kept, when that needs saying
	gone     string        // why there is nowhere for them at the home
}

// errRefused marks a push the home answered with a refusal of its own
// that may not last (a quota, a full disk, a limit, a token): it is tried
// again, less often (Remote.RetryRefused).
var errRefused = errors.New("the home refused the push")

// push sends an exec's changeset (read from draft) home, as a push with
// the exec's id, which the home applies at most once however often it is
// sent. On a conflict the home keeps the changes in a copy of its own, in
// the push's transaction; when the push's base is gone at the home, the
// draft's whole tree goes as a push the home keeps as a copy. An error
// says the changes are still only in the draft: errRefused when the home
// said no for now, otherwise a transport failure (ErrUnreachable, or a
// home that cannot answer this moment).
func (r *Runner) push(ctx context.Context, e core.Exec, draft int64, cs *core.Changeset, source core.Source) (delivery, error) {
	start := time.Now()
	hdr := syncproto.PushHeader{PushID: e.ID, Base: e.HomeBase, WS: e.HomeWS, Message: commandLine(e.Argv), Source: source}
	res, err := r.Remote.Mirror.Push(ctx, e.WSName, draft, cs, hdr)
	var out delivery
	if err == nil && res.BaseGone != "" {
		out.note = fmt.Sprintf("its base home@%d is gone at the home (%s): the whole tree it wrote on was kept as ", e.HomeBase, res.BaseGone)
		res, err = r.Remote.Mirror.PushWhole(ctx, e.WSName, draft, cs.To, hdr)
		out.note += res.KeptAs
	}
	out.rev, out.conflict, out.keptAs = res.Revision, res.Conflict, res.KeptAs
	var we *wire.Error
	switch {
	case err == nil:
	case errors.Is(err, core.ErrWorkspaceNotFound) && errors.As(err, &we) && !we.Foreign && r.homeServes(ctx, e.Tenant):
		// The home's own answer, to the exec's tenant: no workspace of
		// that name. As at the home, where a deleted workspace's execs
		// go with it, there is nowhere for the changes.
		out.gone = fmt.Sprintf("workspace %s was deleted at the home: its writes went with it", e.WSName)
		err = nil
	case errors.Is(err, syncproto.ErrUnreachable), errors.Is(err, wire.ErrUnavailable), errors.Is(err, wire.ErrInternal),
		errors.Is(err, wire.ErrTimeout), errors.Is(err, wire.ErrBusy), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// No verdict: the home was not reached, or could not answer.
	case errors.Is(err, core.ErrMissingChunk):
		// No verdict on the changes either: the next push carries every
		// chunk they name again.
	default:
		err = fmt.Errorf("%w: %w", errRefused, err)
	}
	if r.Metrics != nil {
		r.Metrics.SyncLatency.WithLabelValues("push").Observe(time.Since(start).Seconds())
		r.Metrics.Pushes.WithLabelValues(pushOutcome(out, err)).Inc()
	}
	return out, err
}

// homeServes reports whether the home takes this executor's token for
// tenant now: only then is its "no such workspace" about the tenant's
// workspaces (and not about another tenant's, whose token it was given
// since).
func (r *Runner) homeServes(ctx context.Context, tenant string) bool {
	h, err := r.Remote.Mirror.Client.Hello(ctx)
	return err == nil && h.Tenant == tenant
}

func pushOutcome(out delivery, err error) string {
	switch {
	case err != nil:
		return "retry"
	case out.gone != "":
		return "gone"
	case out.keptAs != "":
		return "conflict"
	}
	return "applied"
}

// draftChanges returns the changes a draft holds (everything since it was made).
func (r *Runner) draftChanges(ctx context.Context, draft int64) (*core.Changeset, error) {
	w, err := r.Store.WorkspaceByID(ctx, draft)
	if err != nil {
		return nil, err
	}
	return r.Store.Diff(ctx, draft, 1, w.Head)
}

// settle delivers the changes of a pending exec and records the outcome.
// It reports whether the exec is settled, and if not, the push's error.
func (r *Runner) settle(ctx context.Context, e core.Exec) (bool, error) {
	source := core.SourceExec
	if e.PendingState == core.ExecInterrupted {
		source = core.SourceInterrupted
	}
	if e.Tenant != r.Remote.Mirror.Tenant {
		// Started with another tenant's token: its pushes would land in
		// (or miss) another tenant's workspaces. They wait for a start
		// as the exec's tenant.
		return false, fmt.Errorf("%w: this executor now serves tenant %q, the exec is %q's", errRefused, r.Remote.Mirror.Tenant, e.Tenant)
	}
	cs, err := r.draftChanges(ctx, e.Draft)
	var out delivery
	switch {
	case errors.Is(err, core.ErrWorkspaceNotFound):
		// The draft went with its mirror, deleted here.
		e.Error = joinErr(e.Error, "its draft was deleted with the workspace's mirror before its writes reached the home")
		err = nil
	case err != nil:
		return false, err // the local store: tried again
	case len(cs.Ops) > 0:
		out, err = r.push(ctx, e, e.Draft, cs, source)
	}
	if err != nil {
		if ctx.Err() == nil {
			e.Error = joinErr(withoutWaiting(e.Error), waitingNote+err.Error())
			if uerr := r.Store.UpdateExec(ctx, e); uerr != nil && !errors.Is(uerr, core.ErrNotFound) {
				r.Log.Warn("journal", "id", e.ID, "err", uerr)
			}
		}
		return false, err
	}
	e.Error = withoutWaiting(e.Error)
	switch {
	case out.gone != "":
		e.Error = joinErr(e.Error, out.gone)
	case out.keptAs != "":
		e.Conflict, e.KeptAs = out.conflict, out.keptAs
		if out.note != "" {
			e.Error = joinErr(e.Error, out.note)
		}
	case out.rev.Rev > 0:
		e.Rev = out.rev.Rev
	}
	e.State, e.PendingState = e.PendingState, ""
	if e.State == "" {
		e.State = core.ExecInterrupted
	}
	draft := e.Draft
	e.Draft = 0
	if err := r.Store.UpdateExec(ctx, e); errors.Is(err, core.ErrNotFound) {
		// Its record went with its workspace: so does the draft.
	} else if err != nil {
		r.Log.Error("journal", "id", e.ID, "err", err)
		return false, err
	}
	if err := r.Store.DeleteWorkspace(ctx, draft); err != nil && !errors.Is(err, core.ErrWorkspaceNotFound) {
		r.Log.Warn("delete draft (the next start collects it)", "id", e.ID, "err", err)
	}
	r.observe(e)
	return true, nil
}

// awaitDelivery records, before an exec's writes are pushed home, how its
// command ended and that its writes wait in its draft: a push cut short by
// the end of this process (SIGKILL) leaves the exec pending with its true
// status, for the next start to deliver, rather than running, which the
// next start could only call interrupted.
func (r *Runner) awaitDelivery(ctx context.Context, e core.Exec, m *layer) {
	e.State, e.PendingState = core.ExecPending, e.State
	e.Draft, _, _ = m.Status()
	e.Error = joinErr(e.Error, waitingNote+"its writes are being pushed")
	if err := r.Store.UpdateExec(ctx, e); err != nil && !errors.Is(err, core.ErrNotFound) {
		r.Log.Warn("journal", "id", e.ID, "err", err)
	}
}

// waitingNote begins what a pending exec's error says of its push; it is
// the last part of the error, and goes when the exec settles.
const waitingNote = "waiting for the home: "

// withoutWaiting is an exec's error less what it said of a push under way.
func withoutWaiting(s string) string {
	if i := strings.Index(s, waitingNote); i >= 0 {
		return strings.TrimSuffix(s[:i], "; ")
	}
	return s
}

// pushPending delivers the changes of pending execs until ctx ends: each
// is tried when its backoff says (RetryMin, doubling to RetryMax; after
// a refusal RetryRefused), Pushers at a time, so that a push that takes
// long (a home that answers slowly, a large changeset) holds back no
// other. An exec still running here (its record goes pending before its
// first push) is left to its own push.
func (r *Runner) pushPending(ctx context.Context) {
	x := r.Remote
	var g errgroup.Group
	g.SetLimit(x.Pushers)
	defer g.Wait()
	done := make(chan struct{}, 1)
	for {
		pending, err := r.Store.ExecsInState(ctx, core.ExecPending)
		if err != nil && ctx.Err() == nil {
			r.Log.Warn("list pending execs", "err", err)
		}
		if r.Metrics != nil && err == nil {
			r.Metrics.PendingPushes.Set(float64(len(pending)))
		}
		now := time.Now()
		next := now.Add(x.RetryMax)
		x.mu.Lock()
		live := map[string]bool{}
		for _, e := range pending {
			live[e.ID] = true
			b := x.retry[e.ID]
			if b == nil {
				b = &backoff{next: now}
				if x.retry == nil {
					x.retry = map[string]*backoff{}
				}
				x.retry[e.ID] = b
			}
			if b.busy {
				continue
			}
			if r.isRunning(e.ID) {
				// Its own push is under way; then it may be the loop's.
				if soon := now.Add(x.RetryMin); soon.Before(next) {
					next = soon
				}
				continue
			}
			if b.next.After(now) {
				if b.next.Before(next) {
					next = b.next
				}
				continue
			}
			b.busy = true
			if !g.TryGo(func() error {
				settled, err := r.settle(ctx, e)
				x.mu.Lock()
				b.busy = false
				switch {
				case settled:
					delete(x.retry, e.ID)
				case errors.Is(err, errRefused):
					b.wait = min(max(2*b.wait, x.RetryMax), x.RetryRefused)
				default:
					b.wait = min(max(2*b.wait, x.RetryMin), x.RetryMax)
				}
				b.next = time.Now().Add(b.wait)
				x.mu.Unlock()
				select {
				case done <- struct{}{}:
				default:
				}
				return nil
			}) {
				b.busy = false // every pusher is busy: the next round
			}
		}
		for id, b := range x.retry {
			if !live[id] && !b.busy {
				delete(x.retry, id)
			}
		}
		x.mu.Unlock()
		t := time.NewTimer(max(time.Until(next), 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-x.wake:
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
}

// wakeUp wakes the pending-push loop: an exec's writes wait (it finds
// the exec once it no longer runs).
func (x *Remote) wakeUp() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// isRunning reports whether exec id runs in this process.
func (r *Runner) isRunning(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[id] != nil
}

// recoverRemote looks at the drafts an executor's previous process left
// (overlay.Recover has moved into them what their layers held) and
// leaves each exec with undelivered writes pending, for the pending-push
// loop, which delivers them whether or not the home is there now: an
// exec that was running is interrupted; a record that ended without its
// writes reaching the home (written by a computerd that gave up on them)
// is pending again. A draft whose exec's writes did reach the home (or
// whose record is gone with its workspace) is collected.
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
		if errors.Is(err, core.ErrNotFound) {
			r.collectDraft(ctx, d, "its exec's record is gone")
			continue
		}
		if err != nil {
			return err
		}
		switch {
		case e.State == core.ExecRunning:
			e.Ended = r.Store.Now()
			e.State, e.PendingState = core.ExecPending, core.ExecInterrupted
			e.Error = "the executor stopped while the command ran; its writes so far were kept"
		case e.State == core.ExecPending:
			if e.Draft == d.ID {
				continue
			}
		case e.Rev > 0 || e.KeptAs != "":
			r.collectDraft(ctx, d, "its writes reached the home")
			continue
		case !r.draftWritten(ctx, d):
			// An exec that wrote nothing (its overlay was shelved).
			r.collectDraft(ctx, d, "it holds no writes")
			continue
		default:
			e.State, e.PendingState = core.ExecPending, e.State
			if i := strings.Index(e.Error, "commit: home: "); i >= 0 {
				e.Error = strings.TrimSuffix(e.Error[:i], "; ") // what it gave up on
			}
			e.Error = joinErr(e.Error, waitingNote+"its writes had not reached the home")
		}
		e.Draft = d.ID
		if err := r.Store.UpdateExec(ctx, e); err != nil {
			return err
		}
		r.Log.Warn("an exec's writes wait to reach the home", "id", e.ID, "draft", d.ID)
	}
	return nil
}

// draftWritten reports whether draft d holds writes: a commit after the
// revision it was made at (a failure to look says yes: it is kept).
func (r *Runner) draftWritten(ctx context.Context, d fsstore.Draft) bool {
	w, err := r.Store.WorkspaceByID(ctx, d.ID)
	return err != nil || w.Head > 1
}

// collectDraft deletes a draft nothing needs any more.
func (r *Runner) collectDraft(ctx context.Context, d fsstore.Draft, why string) {
	if err := r.Store.DeleteWorkspace(ctx, d.ID); err != nil && !errors.Is(err, core.ErrWorkspaceNotFound) {
		r.Log.Warn("collect draft", "draft", d.Label, "err", err)
		return
	}
	r.Log.Info("collected a draft", "draft", d.Label, "why", why)
}

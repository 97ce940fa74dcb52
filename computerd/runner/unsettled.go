package runner

import (
	"context"
	"errors"
	"time"

	"computerd/core"
)

// unsettled is an exec whose end could not be recorded in full when it
// ended, for want of disk space: its commit failed (layer holds its
// writes, still mounted) or its journal record could not be written
// (rec is the record it should hold). settleLoop tries again until the
// disk has room, so that freeing space is all it takes.
type unsettled struct {
	rec   core.Exec
	base  string         // rec.Error without the commit's failure
	ended core.ExecState // rec.State, had the commit not failed
	layer *layer         // nil once committed
}

// settleLater hands u to settleLoop.
func (r *Runner) settleLater(u *unsettled) {
	r.mu.Lock()
	r.unsettled = append(r.unsettled, u)
	r.mu.Unlock()
	select {
	case r.resettle <- struct{}{}:
	default:
	}
}

// settleLoop settles what settleLater queued, retrying every second at
// first and backing off to every 30 s while the disk stays full. When ctx
// ends, what is still unsettled is left for the next start: a layer's
// writes to Recover, a record to the recovery of running execs.
func (r *Runner) settleLoop(ctx context.Context) {
	const first, most = time.Second, 30 * time.Second
	wait := first
	for {
		r.mu.Lock()
		pending := len(r.unsettled) > 0
		r.mu.Unlock()
		var retry <-chan time.Time
		if pending {
			retry = time.After(wait)
		}
		select {
		case <-ctx.Done():
			r.abandonUnsettled()
			return
		case <-r.resettle:
			wait = first
		case <-retry:
		}
		if r.settleAll(ctx) {
			wait = first
		} else {
			wait = min(2*wait, most)
		}
	}
}

// settleAll tries every unsettled exec once and reports whether all settled.
func (r *Runner) settleAll(ctx context.Context) bool {
	r.mu.Lock()
	list := r.unsettled
	r.unsettled = nil
	r.mu.Unlock()
	var left []*unsettled
	for _, u := range list {
		if !r.settleOne(ctx, u) {
			left = append(left, u)
		}
	}
	r.mu.Lock()
	r.unsettled = append(r.unsettled, left...)
	r.mu.Unlock()
	return len(left) == 0
}

// settleOne commits u's layer and writes its record, as far as the disk allows.
func (r *Runner) settleOne(ctx context.Context, u *unsettled) bool {
	if u.layer != nil {
		rev, changed, err := u.layer.Retry(ctx)
		if errors.Is(err, core.ErrNoSpace) {
			return false
		}
		u.rec.Error = u.base
		if r.noteCommit(&u.rec, u.layer, rev, changed, err) {
			u.rec.Error = joinErr(u.base, "commit: "+err.Error())
		} else {
			u.rec.State = u.ended
			u.rec.Error = joinErr(u.base, "its writes were committed once space was freed")
		}
		// A failure of another kind leaves the writes to Recover.
		if err := u.layer.Unmount(ctx); err != nil {
			r.Log.Warn("unmount", "id", u.rec.ID, "err", err)
		}
		u.layer = nil
	}
	if err := r.Store.UpdateExec(ctx, u.rec); errors.Is(err, core.ErrNotFound) {
		return true // its record went with its workspace
	} else if err != nil {
		return false
	}
	r.Log.Info("exec settled once space was freed", "id", u.rec.ID, "rev", u.rec.Rev)
	return true
}

// abandonUnsettled unmounts the layers still unsettled: their writes stay
// in the layer's directory for Recover at the next start.
func (r *Runner) abandonUnsettled() {
	r.mu.Lock()
	list := r.unsettled
	r.unsettled = nil
	r.mu.Unlock()
	for _, u := range list {
		if u.layer != nil {
			u.layer.Unmount(context.WithoutCancel(r.ctx))
		}
	}
}

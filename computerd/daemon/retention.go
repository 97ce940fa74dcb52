package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"computerd/computerd/metrics"
	"computerd/fsstore"
)

// DefaultGCInterval is computerd serve's --gc-interval: often enough that
// pruned history and deleted workspaces give their space back within the
// hour, rarely enough that GC's scan of the chunks (under the writer lock)
// costs nothing noticeable.
const DefaultGCInterval = time.Hour

// errRetentionClosed is the cause its context ends with when a retention closes.
var errRetentionClosed = errors.New("retention closed")

// retention prunes the store on a policy and collects the chunks no
// revision needs any more, every interval, in one goroutine of its own: the
// first pass a minute after Open (sooner if the interval is shorter), so a
// daemon that just recovered serves first.
type retention struct {
	store   *fsstore.Store
	policy  fsstore.Policy
	every   time.Duration
	metrics *metrics.Metrics
	log     *slog.Logger

	cancel context.CancelCauseFunc
	done   chan struct{}
}

// newRetention returns a retention of store; call Open to start it.
func newRetention(store *fsstore.Store, policy fsstore.Policy, every time.Duration, m *metrics.Metrics, log *slog.Logger) *retention {
	return &retention{store: store, policy: policy, every: every, metrics: m, log: log}
}

// Open starts the passes.
func (r *retention) Open(ctx context.Context) {
	ctx, r.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go r.loop(ctx)
}

// Close stops the passes, cutting one under way (its transaction rolls
// back: nothing is half pruned), and waits for the goroutine.
func (r *retention) Close() {
	if r == nil || r.cancel == nil {
		return
	}
	r.cancel(errRetentionClosed)
	<-r.done
}

func (r *retention) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTimer(min(r.every, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.pass(ctx)
		t.Reset(r.every)
	}
}

// pass runs one retention pass and reports it.
func (r *retention) pass(ctx context.Context) {
	start := time.Now()
	st, err := r.store.Retain(ctx, r.policy)
	// A cut pass may still have pruned some workspaces: count what it did.
	r.metrics.GCRevisions.Add(float64(st.Revisions))
	r.metrics.GCChunks.Add(float64(st.Chunks))
	r.metrics.GCBytes.Add(float64(st.ChunkBytes))
	if ctx.Err() != nil {
		return
	}
	r.metrics.GCDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		r.metrics.GCRuns.WithLabelValues("error").Inc()
		r.log.Warn("retention pass failed", "policy", r.policy.String(), "err", err)
		return
	}
	r.metrics.GCRuns.WithLabelValues("ok").Inc()
	r.log.Info("retention pass", "policy", r.policy.String(), "revisions", st.Revisions, "chunks", st.Chunks,
		"bytes", st.ChunkBytes, "took", time.Since(start).Round(time.Millisecond))
}

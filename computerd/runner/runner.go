// Package runner runs commands against workspaces: each exec gets a fresh
// sandbox (computerd/sandbox) whose /workspace is an exec-mode FUSE view
// (computerd/fusefs) of its base revision, streams its output as events,
// and commits its writes as exactly one revision when it ends. It keeps the
// journal (fsstore's execs table) and each exec's output log, answers
// retries with the same idempotency key from them, and recovers after a
// crash.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"computerd/computerd/fusefs"
	"computerd/computerd/loopfs"
	"computerd/computerd/metrics"
	"computerd/computerd/overlay"
	"computerd/computerd/sandbox"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// Request asks for one command.
type Request struct {
	Workspace core.Workspace
	Tenant    string
	Argv      []string
	Cwd       string            // relative to /workspace
	Env       map[string]string // added to the sandbox's clean environment
	Stdin     []byte
	Key       string        // idempotency key: a retry returns the recorded result
	Timeout   time.Duration // 0: the runner's default
	Limits    core.Limits
	HomeBase  int64 // executor: the home revision Workspace mirrors
	HomeWS    int64 // executor: the id of the home workspace HomeBase is of
}

// Defaults of the Runner's fields: the ceilings no request may ask
// above, and the bounds of what execs may hold at once. Each bounds one
// way a caller could take the host: memory and pids that the host must
// actually have (4 GiB and 4096 sit well above the sandbox's defaults of
// 1 GiB and 512, yet far below a host's whole), CPUs beyond the host's
// own are meaningless, an exec held an hour holds its mount and container
// that long, and every running exec holds a container, a FUSE mount and a
// few goroutines: 8 per tenant lets an agent fan out, 32 in all keeps a
// 2-core host answering. 64 MiB of output per exec is far more than any
// reader (human or model) takes in, and 32 execs of it stay under 2 GiB.
// 4 GiB of writes per exec holds an npm install, a pip install of a
// machine-learning stack or the clone of a large repository, and is the
// disk space an exec's upper layer takes while it runs (see writeBound).
const (
	DefaultTimeout   = 10 * time.Minute
	MaxTimeout       = time.Hour
	OutputRetention  = 24 * time.Hour
	MaxMemory        = 4 << 30
	MaxPids          = 4096
	MaxPerTenant     = 8
	MaxTotal         = 32
	MaxOutput        = 64 << 20
	MaxWrite         = 4 << 30
	outputMarkerText = "computerd: output truncated at %s of %d bytes; the command runs on, its further output is counted, not kept\n"
)

// MaxCPUs is the default CPU ceiling: the host's CPUs.
func MaxCPUs() float64 { return float64(runtime.NumCPU()) }

// Event is one line of an exec's event stream.
type Event = wire.ExecEvent

// Runner runs execs for one daemon.
type Runner struct {
	Store   *fsstore.Store
	Sandbox *sandbox.Manager
	Metrics *metrics.Metrics // may be nil
	Log     *slog.Logger
	// Dir holds mount points, spool files and output logs.
	Dir string
	// DefaultTimeout bounds a command that names no timeout (default
	// DefaultTimeout); MaxTimeout bounds any (default MaxTimeout).
	DefaultTimeout, MaxTimeout time.Duration
	// OutputRetention is how long output logs are kept (default
	// OutputRetention).
	OutputRetention time.Duration
	// MaxLimits are the ceilings of a request's limits (zero fields:
	// MaxMemory, MaxPids, MaxCPUs); a request above one is refused.
	MaxLimits core.Limits
	// MaxPerTenant and MaxTotal bound the execs running at once, of one
	// tenant and in all (defaults MaxPerTenant, MaxTotal); an exec over
	// either is refused as busy.
	MaxPerTenant, MaxTotal int
	// MaxOutput bounds the bytes of an exec's stored output log, both
	// streams together (default MaxOutput); beyond it the log holds a
	// truncated event and the command runs on unrecorded.
	MaxOutput int64
	// MaxWrite bounds what one exec may write to /workspace (default
	// MaxWrite): beyond it (or beyond what its tenant's byte quota or the
	// disk leave, see writeBound) the command's writes fail with ENOSPC.
	MaxWrite int64
	// Remote, if set, makes this an executor's runner (see Remote).
	Remote *Remote
	// Shelf is how many overlays of execs that left no trace in them are
	// kept mounted for the next exec on the same revision (default
	// ShelfLayers; negative: none), each for at most ShelfIdle.
	Shelf int

	// view serves the revisions execs start from (Dir/view), from Open
	// to Close; every exec's /workspace is an overlay over it, made from
	// mounts (the view and the layers' directory, idmapped with the
	// containers' ids).
	view   *fusefs.View
	mounts *overlay.Mounts
	// shelf keeps the overlays of execs that wrote nothing for the next
	// exec on the same revision (overlay.Shelf).
	shelf *overlay.Shelf
	// volumes makes the volumes that hold execs' upper layers (templates
	// in Dir/templates); pool keeps a few of MaxWrite's size ready
	// (Dir/volumes), one per warm container.
	volumes *loopfs.Maker
	pool    *loopfs.Pool
	// promised is the space given to execs whose volumes are still
	// being made (see writeBound), under spaceMu.
	spaceMu  sync.Mutex
	promised int64

	mu      sync.Mutex
	running map[string]*run
	active  map[string]int // running execs (and admitted ones) per tenant
	total   int            // their sum
	closing bool           // set by Close: no new execs (under mu)
	execs   sync.WaitGroup // execs in flight, each also in group

	// Between Open and Close: every goroutine the runner starts is in
	// group; stop ends the execs' context (ctx), stopLoops the
	// background loops' (loops).
	group     *errgroup.Group
	unsettled []*unsettled  // execs whose end is not yet fully recorded (under mu)
	resettle  chan struct{} // wakes settleLoop
	ctx       context.Context
	stop      context.CancelCauseFunc
	loops     context.Context
	stopLoops context.CancelCauseFunc
}

// run is one exec in flight.
type run struct {
	id     string
	cancel context.CancelCauseFunc
	log    *outputLog
}

// Causes of an exec's end other than its command's.
var (
	// errKilled: Kill ended it.
	errKilled = errors.New("killed on request")
	// errShutdown: Close ended it once its grace was over.
	errShutdown = errors.New("computerd is shutting down")
	// errDeleted: its workspace was deleted.
	errDeleted = errors.New("its workspace was deleted")
)

func (r *Runner) defaults() {
	if r.DefaultTimeout <= 0 {
		r.DefaultTimeout = DefaultTimeout
	}
	if r.MaxTimeout <= 0 {
		r.MaxTimeout = MaxTimeout
	}
	if r.OutputRetention <= 0 {
		r.OutputRetention = OutputRetention
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.running == nil {
		r.running = map[string]*run{}
	}
	if r.active == nil {
		r.active = map[string]int{}
	}
	r.MaxLimits = r.MaxLimits.Or(core.Limits{Memory: MaxMemory, Pids: MaxPids, CPUs: MaxCPUs()})
	if r.MaxPerTenant <= 0 {
		r.MaxPerTenant = MaxPerTenant
	}
	if r.MaxTotal <= 0 {
		r.MaxTotal = MaxTotal
	}
	if r.MaxOutput <= 0 {
		r.MaxOutput = MaxOutput
	}
	if r.MaxWrite <= 0 {
		r.MaxWrite = MaxWrite
	}
}

func (r *Runner) outputPath(id string) string { return filepath.Join(r.Dir, "output", id+".ndjson") }
func (r *Runner) mountPath(id string) string  { return filepath.Join(r.Dir, "mnt", id) }
func (r *Runner) layerPath(id string) string  { return filepath.Join(r.Dir, "layers", id) }
func (r *Runner) viewPath() string            { return filepath.Join(r.Dir, "view") }
func (r *Runner) poolPath() string            { return filepath.Join(r.Dir, "volumes") }

// CleanupMounts detaches what a runner that died left mounted under dir
// (its Dir): the overlays of its execs, then its revision view. Open does
// it; so can whoever removes a dead daemon's data directory.
func CleanupMounts(dir string) error {
	errs := []error{overlay.CleanupStale(filepath.Join(dir, "layers"))}
	ready, _ := os.ReadDir(filepath.Join(dir, "volumes")) // a pool's volumes
	for _, v := range ready {
		errs = append(errs, loopfs.Unmount(filepath.Join(dir, "volumes", v.Name(), loopfs.VolumeFS)))
	}
	mounts, _ := os.ReadDir(filepath.Join(dir, "mnt")) // exec mounts of older versions
	for _, m := range mounts {
		p := filepath.Join(dir, "mnt", m.Name())
		errs = append(errs, fusefs.CleanupStale(p))
		os.Remove(p)
	}
	if err := fusefs.CleanupStale(filepath.Join(dir, "view")); err != nil {
		errs = append(errs, fmt.Errorf("stale revision view: %w", err))
	}
	return errors.Join(errs...)
}

// Open cleans up after a previous process that died: it removes its
// containers and stale mounts, commits what its execs had written as
// interrupted revisions (overlay.RecoverDrafts), and marks their journal records
// interrupted. Then it starts the runner's background loops (output
// pruning; on an executor, the pending pushes). Call it once, before
// Start; when it fails nothing of the runner is left running. Close ends
// what it started.
func (r *Runner) Open(ctx context.Context) error {
	r.defaults()
	if err := CleanupMounts(r.Dir); err != nil {
		return err
	}
	for _, sub := range []string{"mnt", "output", "spool", "layers", "view", "templates"} {
		if err := os.MkdirAll(filepath.Join(r.Dir, sub), 0o700); err != nil {
			return err
		}
	}
	swept, err := r.Sandbox.Sweep(ctx)
	if err != nil {
		return fmt.Errorf("sweep containers: %w", err)
	}
	if len(swept) > 0 {
		r.Log.Warn("removed containers left by a previous process", "ids", swept)
	}
	if r.view, err = fusefs.OpenView(r.viewPath(), fusefs.ViewOptions{Store: r.Store}); err != nil {
		return err
	}
	opened := false
	defer func() {
		if !opened {
			r.closeView(context.WithoutCancel(ctx))
		}
	}()
	if r.mounts, err = overlay.OpenMounts(r.viewPath(), filepath.Join(r.Dir, "layers"), r.Sandbox.MappedIDs()); err != nil {
		return err
	}
	if err := overlay.Recover(ctx, r.Store, filepath.Join(r.Dir, "layers")); errors.Is(err, core.ErrNoSpace) {
		// A full disk: the layers, drafts and records stay as they are
		// for the next start with room (an empty draft must not go
		// while its layer still holds the writes). Serving what is
		// stored goes on meanwhile.
		r.Log.Warn("the writes of interrupted execs wait in their layers for a start with room to commit them", "err", err)
	} else if err != nil {
		return fmt.Errorf("recover exec layers: %w", err)
	} else if err := r.recoverExecs(ctx); err != nil {
		return err
	}
	r.pruneOutput()
	r.volumes = &loopfs.Maker{Dir: filepath.Join(r.Dir, "templates")}
	check := filepath.Join(r.Dir, "templates", "check")
	loopfs.RemoveVolume(check) // left by a process that died checking
	if err := r.volumes.Check(check); err != nil {
		return fmt.Errorf("upper layer volumes: %w", err)
	}
	if r.Sandbox != nil {
		// As many as warm containers, and one when there are none: the
		// volumes of finished execs come back to it.
		r.pool = &loopfs.Pool{Maker: r.volumes, Dir: r.poolPath(), Size: loopfs.SizeClass(r.MaxWrite), Count: max(r.Sandbox.Warm, 1),
			Room: r.poolRoom}
		if err := r.pool.Open(ctx); err != nil {
			return fmt.Errorf("upper layer volumes: %w", err)
		}
	}
	opened = true
	if r.Shelf == 0 {
		r.Shelf = ShelfLayers
	}
	r.shelf = overlay.NewShelf(r.Shelf, ShelfIdle, r.Log)
	if r.Metrics != nil {
		r.shelf.Report(func(n int) { r.Metrics.ExecShelved.Set(float64(n)) })
	}

	// Execs and loops outlive the call that opens the runner (a signal
	// that cancels it starts a graceful shutdown, in which they go on):
	// only Close ends them.
	r.ctx, r.stop = context.WithCancelCause(context.WithoutCancel(ctx))
	r.loops, r.stopLoops = context.WithCancelCause(r.ctx)
	r.group = &errgroup.Group{}
	r.group.Go(func() error { r.pruneLoop(r.loops); return nil })
	r.resettle = make(chan struct{}, 1)
	r.group.Go(func() error { r.settleLoop(r.loops); return nil })
	if r.Remote != nil {
		r.Remote.defaults()
		r.group.Go(func() error { r.pushPending(r.loops); return nil })
	}
	return nil
}

// recoverExecs commits what the drafts of execs a previous process left
// hold (their layers' writes, moved there by overlay.Recover), as
// interrupted revisions (on an executor: pushes), and marks their journal
// records interrupted.
func (r *Runner) recoverExecs(ctx context.Context) error {
	var recovered []overlay.Recovered
	var err error
	if r.Remote != nil {
		if err := r.recoverRemote(ctx); err != nil {
			return fmt.Errorf("recover drafts: %w", err)
		}
	} else if recovered, err = overlay.RecoverDrafts(ctx, r.Store); err != nil {
		return fmt.Errorf("recover drafts: %w", err)
	}
	for _, rc := range recovered {
		r.Log.Warn("recovered the writes of an interrupted exec", "draft", rc.Draft.Label, "rev", rc.Revision.Rev, "kept", rc.Kept, "err", rc.Err)
	}
	stale, err := r.Store.ExecsInState(ctx, core.ExecRunning)
	if err != nil {
		return err
	}
	for _, e := range stale {
		e.State, e.Ended = core.ExecInterrupted, r.Store.Now()
		e.Error = "computerd stopped while the command ran; its writes so far were kept"
		if rev, err := r.Store.ExecRevision(ctx, e.WS, e.ID); err == nil && rev > 0 {
			e.Rev = rev
		}
		for _, rc := range recovered {
			if rc.Draft.Label == "exec-"+e.ID && rc.Kept != "" {
				e.KeptAs = rc.Kept
			}
		}
		if err := r.Store.UpdateExec(ctx, e); errors.Is(err, core.ErrNoSpace) {
			r.Log.Warn("journal: an interrupted exec stays marked running until a start with room", "id", e.ID, "err", err)
		} else if err != nil {
			return err
		}
		r.observe(e)
		r.Log.Warn("exec interrupted by a restart", "id", e.ID, "rev", e.Rev)
	}
	return nil
}

// pruneLoop prunes output logs every ten minutes until ctx ends.
func (r *Runner) pruneLoop(ctx context.Context) {
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.pruneOutput()
		}
	}
}

// pruneOutput removes output logs older than OutputRetention, and
// records that they no longer count against their tenants' quotas.
func (r *Runner) pruneOutput() {
	ents, _ := os.ReadDir(filepath.Join(r.Dir, "output"))
	var gone []string
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > r.OutputRetention {
			if os.Remove(filepath.Join(r.Dir, "output", e.Name())) == nil {
				gone = append(gone, strings.TrimSuffix(e.Name(), ".ndjson"))
			}
		}
	}
	if len(gone) > 0 {
		if err := r.Store.OutputExpired(r.loops, gone); err != nil {
			r.Log.Warn("record expired output logs", "err", err)
		}
	}
}

// Start begins an exec, or finds the one a request with the same key
// began. It returns the exec's record; Follow streams its events.
func (r *Runner) Start(ctx context.Context, req Request) (core.Exec, error) {
	r.defaults()
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return core.Exec{}, fmt.Errorf("exec: empty command: %w", core.ErrInvalidArgument)
	}
	timeout := req.Timeout
	if timeout <= 0 {
		// The default never exceeds the ceiling: a request naming no
		// timeout is not refused for one it did not ask for.
		timeout = min(r.DefaultTimeout, r.MaxTimeout)
	}
	if timeout > r.MaxTimeout {
		r.refused("ceiling")
		return core.Exec{}, fmt.Errorf("exec: timeout %v is over the ceiling exec-max-timeout=%v: %w", timeout, r.MaxTimeout, core.ErrInvalidArgument)
	}
	if err := r.checkCeilings(req.Limits); err != nil {
		r.refused("ceiling")
		return core.Exec{}, err
	}
	if _, err := core.CleanPath(req.Cwd); err != nil {
		return core.Exec{}, err
	}
	envNames := make([]string, 0, len(req.Env))
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return core.Exec{}, fmt.Errorf("exec: bad environment variable name %q: %w", k, core.ErrInvalidArgument)
		}
		envNames = append(envNames, k)
	}
	slices.Sort(envNames)
	if err := r.checkKey(ctx, req, envNames); err != nil {
		return core.Exec{}, err
	}
	if r.isClosing() {
		return core.Exec{}, errClosing
	}
	if err := r.admit(req.Tenant); err != nil {
		// A retry of a keyed exec is no new exec: it attaches to the
		// one it started (or gets its result) even while the tenant is
		// at its limit.
		if req.Key != "" {
			if rec, ferr := r.Store.ExecByKey(ctx, req.Tenant, req.Workspace.ID, req.Key); ferr == nil {
				return rec, nil
			}
		}
		r.refused("busy")
		return core.Exec{}, err
	}
	admitted := true
	defer func() {
		if admitted {
			r.release(req.Tenant)
		}
	}()
	// A disk too full for the exec's writes refuses it before it is
	// journaled, so that the same request (key included) runs once there
	// is room; a retry of one that ran still gets its result.
	size, unpromise, err := r.writeBound(ctx, req.Tenant)
	if err == nil {
		defer unpromise() // the exec's volume is made (or not) below
	}
	if err != nil {
		if req.Key != "" {
			if rec, ferr := r.Store.ExecByKey(ctx, req.Tenant, req.Workspace.ID, req.Key); ferr == nil {
				return rec, nil
			}
		}
		return core.Exec{}, err
	}
	rec, started, err := r.Store.BeginExec(ctx, core.Exec{
		Tenant: req.Tenant, WS: req.Workspace.ID, WSName: req.Workspace.Name, Key: req.Key,
		Argv: req.Argv, Cwd: req.Cwd, EnvNames: envNames, BaseRev: req.Workspace.Head, HomeBase: req.HomeBase, HomeWS: req.HomeWS,
	})
	if err == nil && !started {
		err = sameCommand(rec, req.Argv, req.Cwd, envNames) // a request with the key came first
	}
	if err != nil || !started {
		return rec, err
	}
	out, err := r.createOutputLog(ctx, rec)
	if err != nil {
		r.fail(ctx, rec, err)
		return rec, fmt.Errorf("exec: output log: %w", err)
	}
	r.mu.Lock()
	if r.closing || r.group == nil {
		// Close began after the check above: it waits for no exec it has
		// not seen, so this one does not start.
		r.mu.Unlock()
		out.finish(r.fail(ctx, rec, errClosing))
		return rec, errClosing
	}
	// Registered from here, as its journal record says it runs: a Kill
	// that comes while its /workspace is made ends it (its context).
	rctx, cancel := context.WithCancelCause(r.ctx)
	ru := &run{id: rec.ID, cancel: cancel, log: out}
	r.running[rec.ID] = ru
	r.execs.Add(1) // Close waits for it
	r.mu.Unlock()
	// The /workspace is made before the answer, so that what keeps it
	// from being made (a full disk) is the answer.
	layer, err := r.openLayer(ctx, rec, size)
	if err != nil {
		r.mu.Lock()
		delete(r.running, rec.ID)
		r.mu.Unlock()
		cancel(nil)
		out.finish(r.fail(ctx, rec, err))
		r.execs.Done()
		return rec, err
	}
	admitted = false // the exec's goroutine releases it
	if r.Metrics != nil {
		r.Metrics.ExecsRunning.Inc()
	}
	r.group.Go(func() error {
		defer r.execs.Done()
		defer cancel(nil)
		final, cleanup := r.execute(rctx, rec, req, timeout, out, layer)
		out.finish(final) // the answer goes out before the mount is taken down
		r.mu.Lock()
		delete(r.running, rec.ID)
		r.mu.Unlock()
		r.release(req.Tenant)
		if r.Metrics != nil {
			r.Metrics.ExecsRunning.Dec()
		}
		if cleanup != nil {
			cleanup()
		}
		return nil
	})
	return rec, nil
}

// Changed tells the runner that workspace ws has a new head, rev (the
// store's OnCommit): an overlay shelved at an older revision is dropped.
// It does not block.
func (r *Runner) Changed(ws, rev int64) { r.shelf.Moved(ws, rev) }

// Forget lets go of everything of workspace ws, which was deleted (the
// store's OnDelete, with the ids of the execs whose records went with
// it): those still running are killed, their output logs removed, an
// overlay shelved for it dropped, and the view's trees of it forgotten.
// It does not block.
func (r *Runner) Forget(ws int64, execs []string) {
	r.mu.Lock()
	for _, id := range execs {
		if ru := r.running[id]; ru != nil {
			ru.cancel(errDeleted)
		}
	}
	r.mu.Unlock()
	for _, id := range execs {
		if err := os.Remove(r.outputPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.Log.Warn("remove the output log of a deleted workspace's exec", "id", id, "err", err)
		}
	}
	r.shelf.Forget(ws)
	if r.view != nil {
		r.view.Forget(ws)
	}
}

// checkCeilings refuses limits above the runner's ceilings.
func (r *Runner) checkCeilings(l core.Limits) error {
	switch {
	case l.Memory > r.MaxLimits.Memory:
		return fmt.Errorf("exec: memory %d bytes is over the ceiling exec-max-memory=%d: %w", l.Memory, r.MaxLimits.Memory, core.ErrInvalidArgument)
	case l.Pids > r.MaxLimits.Pids:
		return fmt.Errorf("exec: pids %d is over the ceiling exec-max-pids=%d: %w", l.Pids, r.MaxLimits.Pids, core.ErrInvalidArgument)
	case l.CPUs > r.MaxLimits.CPUs:
		return fmt.Errorf("exec: cpus %v is over the ceiling exec-max-cpus=%v: %w", l.CPUs, r.MaxLimits.CPUs, core.ErrInvalidArgument)
	case l.Tmp > r.MaxLimits.Memory:
		return fmt.Errorf("exec: tmp %d bytes is over the ceiling exec-max-memory=%d: %w", l.Tmp, r.MaxLimits.Memory, core.ErrInvalidArgument)
	}
	return nil
}

func (r *Runner) refused(reason string) {
	if r.Metrics != nil {
		r.Metrics.ExecsRefused.WithLabelValues(reason).Inc()
	}
}

// admit takes a slot for one more exec of tenant, or says why not.
func (r *Runner) admit(tenant string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.active[tenant] >= r.MaxPerTenant:
		return fmt.Errorf("exec: tenant %s already runs the most execs at once, exec-max-per-tenant=%d; retry when one ends: %w", tenant, r.MaxPerTenant, wire.ErrBusy)
	case r.total >= r.MaxTotal:
		return fmt.Errorf("exec: computerd already runs the most execs at once, exec-max-total=%d; retry when one ends: %w", r.MaxTotal, wire.ErrBusy)
	}
	r.active[tenant]++
	r.total++
	return nil
}

// release gives back a slot admit took.
func (r *Runner) release(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active[tenant]--; r.active[tenant] <= 0 {
		delete(r.active, tenant)
	}
	r.total--
}

// An exec's overlay that nothing touched is kept mounted for the next exec
// on its workspace's revision (overlay.Shelf): by default at most
// ShelfLayers of them (one a workspace), each for at most ShelfIdle.
const (
	ShelfLayers = 16
	ShelfIdle   = 10 * time.Minute
)

// errClosing refuses an exec that arrives while the runner closes.
var errClosing = fmt.Errorf("exec: computerd is shutting down: %w", core.ErrClosed)

func (r *Runner) isClosing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closing
}

// fail records an exec that could not run.
func (r *Runner) fail(ctx context.Context, e core.Exec, err error) core.Exec {
	e.State, e.Error, e.Ended = core.ExecFailed, err.Error(), r.Store.Now()
	// The record must reach the journal even if the exec's context ended.
	if uerr := r.Store.UpdateExec(context.WithoutCancel(ctx), e); uerr != nil {
		r.Log.Error("journal", "id", e.ID, "err", uerr)
	}
	r.observe(e)
	return e
}

func (r *Runner) observe(e core.Exec) {
	if r.Metrics == nil {
		return
	}
	r.Metrics.Execs.WithLabelValues(string(e.State)).Inc()
	if !e.Ended.IsZero() {
		r.Metrics.ExecDuration.Observe(e.Duration().Seconds())
	}
}

// openLayer makes exec e's /workspace: an overlay of its base revision
// whose upper layer is a volume of size (writeBound's).
func (r *Runner) openLayer(ctx context.Context, e core.Exec, size int64) (*layer, error) {
	var err error
	l := &layer{}
	opt := overlay.Options{
		Store: r.Store, View: r.view, Workspace: e.WS, BaseRev: e.BaseRev, Dir: r.layerPath(e.ID),
		Mounts: r.mounts, UpperSize: size, Volumes: r.volumes, Pool: r.pool, Shelf: r.shelf,
		Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: e.Tenant, ExecID: e.ID, Message: commandLine(e.Argv)},
	}
	if r.Remote != nil {
		opt.Deliver = r.deliverer(e, l)
	}
	if l.Layer, err = overlay.Open(ctx, opt); err != nil {
		return nil, fmt.Errorf("exec: make /workspace: %w", err)
	}
	if r.Metrics != nil {
		kind := "new"
		if l.Reused() {
			kind = "shelved"
		}
		r.Metrics.ExecWorkspaces.WithLabelValues(kind).Inc()
	}
	return l, nil
}

// layer is an exec's /workspace, and where its changes went at the home
// when a push of an executor's conflicted (the copy's name, and how).
type layer struct {
	*overlay.Layer
	homeKept, homeNote string
}

// execute runs one exec to its end and returns its final record, and
// what is left to clean up once the caller has sent it (the mount).
func (r *Runner) execute(ctx context.Context, e core.Exec, req Request, timeout time.Duration, out *outputLog, m *layer) (core.Exec, func()) {
	begin := time.Now()
	dir := m.Mountpoint()
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = strings.NewReader(string(req.Stdin))
	}
	res, runErr := r.Sandbox.Run(ctx, sandbox.Spec{
		ID: e.ID, Argv: e.Argv, Env: env, Cwd: e.Cwd, Stdin: stdin, WorkspaceDir: dir, WorkspaceMapped: true,
		Limits: req.Limits, Timeout: timeout,
	}, func(ev sandbox.Event) { out.output(ev.Stream, ev.Data) })
	// The records written from here on say what the log holds: it is on
	// the disk first.
	out.sync()
	if r.Metrics != nil && res.Duration > 0 {
		r.Metrics.ExecStart.Observe(max(time.Since(begin)-res.Duration, 0).Seconds())
		kind := "new"
		if res.Warm {
			kind = "warm"
		}
		r.Metrics.ExecContainers.WithLabelValues(kind).Inc()
	}
	e.Ended = r.Store.Now()
	e.StdoutBytes, e.StderrBytes = res.Stdout, res.Stderr
	e.OutputTruncated = out.isTruncated()
	e.OutputKept = out.stored()
	if err := out.lostErr(); err != nil {
		// The command ran on; what it printed from then on is gone.
		e.OutputTruncated = true
		e.Error = joinErr(e.Error, "output log: "+err.Error()+"; the output from then on was not kept")
	}
	if e.OutputTruncated && r.Metrics != nil {
		r.Metrics.ExecsTruncated.Inc()
	}
	switch {
	case errors.Is(runErr, sandbox.ErrStart), errors.Is(runErr, sandbox.ErrInvalidSpec):
		// The command never ran (not found, bad cwd, ...): like a shell, 127.
		e.State, e.Error = core.ExecFailed, joinErr(e.Error, runErr.Error())
	case runErr != nil:
		e.Error = joinErr(e.Error, runErr.Error())
		e.State = core.ExecKilled
	case res.TimedOut:
		e.State, e.TimedOut = core.ExecTimeout, true
	case res.Signal != 0:
		e.State = core.ExecKilled
	default:
		e.State = core.ExecExited
	}
	if res.Signal != 0 {
		e.Signal = signalName(res.Signal)
		e.ExitCode = 128 + int(res.Signal)
	} else if e.State != core.ExecFailed {
		e.ExitCode = res.ExitCode
	} else {
		e.ExitCode = 127
	}
	if res.OOMKills > 0 {
		e.Error = joinErr(e.Error, fmt.Sprintf("%d processes killed: out of memory", res.OOMKills))
	}
	if cause := context.Cause(ctx); errors.Is(cause, errKilled) {
		e.Error = joinErr(e.Error, "killed on request")
	}
	// The command is over: commit what it wrote as one revision, even
	// when it ended because its context did (kill, shutdown).
	cctx := context.WithoutCancel(ctx)
	if r.Remote != nil {
		// The push home may take long or be cut: until it is done the
		// record says how the command ended, and that its writes wait.
		r.awaitDelivery(cctx, e, m)
	}
	rev, changed, commitErr := m.Commit(cctx)
	failed := r.noteCommit(&e, m, rev, changed, commitErr)
	// A commit that failed for want of space is tried again once the
	// exec has answered (unsettled.go); the layer keeps the writes.
	late := failed && errors.Is(commitErr, core.ErrNoSpace)
	var later *unsettled
	shelved := false
	cleanup := func() {
		if !shelved && (later == nil || later.layer == nil) {
			// After a failed delivery this commit fails the same way and
			// the draft stays; otherwise there is nothing left to commit.
			if err := m.Unmount(cctx); err != nil && commitErr == nil {
				r.Log.Warn("unmount", "id", e.ID, "err", err)
			}
		}
		if later != nil {
			r.settleLater(later)
		}
	}
	if e.Draft != 0 {
		e.State, e.PendingState = core.ExecPending, e.State
	}
	// A commit that failed fails the exec, whatever the command's status:
	// its writes are not in the workspace (or not yet, when space runs out).
	base, ended := e.Error, e.State // without the commit's failure
	switch {
	case late:
		e.State, e.Error = core.ExecFailed, joinErr(e.Error, "commit: "+commitErr.Error()+"; its writes are kept and committed once space is freed")
	case failed:
		e.State, e.Error = core.ExecFailed, joinErr(e.Error, "commit: "+commitErr.Error())
	}
	journalErr := r.Store.UpdateExec(cctx, e)
	if errors.Is(journalErr, core.ErrNotFound) {
		journalErr = nil // its record went with its workspace (Forget)
	} else if journalErr != nil {
		r.Log.Error("journal", "id", e.ID, "err", journalErr)
	}
	if late {
		later = &unsettled{rec: e, base: base, ended: ended, layer: m}
	} else if journalErr != nil {
		later = &unsettled{rec: e, base: e.Error, ended: e.State}
	}
	// An overlay nothing touched, of a command whose processes are all
	// gone, waits on the shelf for the next exec. It goes there before
	// the answer (a few stat calls), so that the exec a client sends as
	// soon as it has the answer finds it.
	shelved = runErr == nil && later == nil && r.shelf.Put(m.Layer)
	r.observe(e)
	return e, cleanup
}

// noteCommit records in e where the commit of its layer m went, and
// reports whether it failed for a reason other than a conflict (whose
// changes a copy keeps) or an absent home (whose draft keeps them).
func (r *Runner) noteCommit(e *core.Exec, m *layer, rev core.Revision, changed bool, err error) (failed bool) {
	var conflict *fusefs.ConflictError
	var storeConflict *core.ConflictError
	switch {
	case err == nil && changed:
		e.Rev = rev.Rev
		if r.Metrics != nil {
			r.Metrics.Committed(rev)
		}
	case errors.Is(err, overlay.ErrKeepDraft):
		// An executor whose home is away: the draft holds the changes
		// until the pending-push loop delivers them.
		e.Draft, _, _ = m.Status()
		e.Error = joinErr(e.Error, "waiting for the home: "+strings.TrimPrefix(err.Error(), overlay.ErrKeepDraft.Error()+": "))
	case errors.As(err, &conflict):
		e.KeptAs = conflict.Name
		if m.homeKept != "" {
			e.KeptAs = m.homeKept
			e.Error = joinErr(e.Error, m.homeNote)
		}
		if errors.As(err, &storeConflict) {
			e.Conflict = storeConflict.Paths
		}
	case err != nil:
		return true
	}
	return false
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func commandLine(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGHUP: "SIGHUP", syscall.SIGPIPE: "SIGPIPE", syscall.SIGQUIT: "SIGQUIT"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// Kill ends a running exec (its result is recorded as killed).
func (r *Runner) Kill(id string) error {
	r.mu.Lock()
	ru := r.running[id]
	r.mu.Unlock()
	if ru == nil {
		return fmt.Errorf("exec %s is not running: %w", id, core.ErrNotFound)
	}
	ru.cancel(errKilled)
	return nil
}

// Follow writes exec id's events to fn from the start of its output log,
// then as they happen until the exit event. For an exec whose log has
// expired it sends only the exit event.
func (r *Runner) Follow(ctx context.Context, id string, fn func(Event) error) error {
	r.mu.Lock()
	ru := r.running[id]
	r.mu.Unlock()
	if ru != nil {
		return ru.log.follow(ctx, fn)
	}
	rec, err := r.Store.ExecByID(ctx, id)
	if err != nil {
		return err
	}
	if rec.State == core.ExecRunning {
		// Started by a Start that has not registered it yet: wait briefly.
		for range 100 {
			time.Sleep(10 * time.Millisecond)
			r.mu.Lock()
			ru = r.running[id]
			r.mu.Unlock()
			if ru != nil {
				return ru.log.follow(ctx, fn)
			}
			if rec, err = r.Store.ExecByID(ctx, id); err != nil || rec.State != core.ExecRunning {
				break
			}
		}
	}
	return replayLog(ctx, r.outputPath(id), rec, fn)
}

// Close refuses new execs, stops the background loops, and waits for
// running execs until ctx ends; then it kills them (each still commits
// what it wrote). It returns once every goroutine of the runner has
// ended. Closing a runner that was not opened does nothing.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closing = true
	group := r.group
	r.mu.Unlock()
	if group == nil {
		return nil
	}
	r.stopLoops(errShutdown)
	done := make(chan struct{})
	r.group.Go(func() error { r.execs.Wait(); close(done); return nil })
	select {
	case <-done:
	case <-ctx.Done():
		r.stop(errShutdown) // every exec's context ends with it
	}
	err := group.Wait()
	r.stop(errShutdown)
	r.abandonUnsettled() // those of execs that ended after settleLoop did
	err = errors.Join(err, r.shelf.Close())
	if r.pool != nil {
		err = errors.Join(err, r.pool.Close())
	}
	return errors.Join(err, r.closeView(context.WithoutCancel(ctx)))
}

// closeView unmounts the revision view, after the copies of its mount
// (which would keep its FUSE connection).
func (r *Runner) closeView(ctx context.Context) error {
	if r.mounts != nil {
		r.mounts.Close()
	}
	return r.view.Close(ctx)
}

// outputLog is an exec's event log: a file, plus a way for followers to
// wait for more.
type outputLog struct {
	path  string
	max   int64  // bytes of output events the log keeps
	bound string // what max is, for the truncated event
	mu    sync.Mutex
	f     *os.File
	size  int64
	kept  int64 // bytes of output events in it
	cut   bool  // the truncated event is in it: no more output goes in
	seq   uint64
	done  bool
	wake  chan struct{} // closed and replaced on every append
	// lost is the error of a write to the file (a full disk): from then
	// on the file takes nothing more (it ends at its last whole event)
	// and exit, the last event, is held here for followers.
	lost error
	exit *Event
}

// createOutputLog makes exec rec's output log. It keeps MaxOutput bytes
// of output, or what the tenant's quota leaves if that is less (an output
// log counts against the quota while it exists): a tenant at its quota
// gets the truncated event, not its output stored. (Execs of a tenant
// that start together each get what was left at their start.) An
// executor keeps MaxOutput: quotas are the home's.
func (r *Runner) createOutputLog(ctx context.Context, rec core.Exec) (*outputLog, error) {
	keep, bound := r.MaxOutput, "the exec output cap"
	if r.Remote == nil {
		left, err := r.Store.Remaining(ctx, rec.Tenant)
		if err != nil {
			return nil, err
		}
		// The log holds the marker and the exit event beside the output.
		if left -= outputLogRoom; left < keep {
			keep, bound = max(left, 0), "what the tenant's quota leaves"
		}
	}
	return createOutputLog(r.outputPath(rec.ID), keep, bound)
}

// outputLogRoom is what an output log holds besides output events (the
// truncated and exit events), for a quota's sake.
const outputLogRoom = 4 << 10

func createOutputLog(path string, max int64, bound string) (*outputLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &outputLog{path: path, max: max, bound: bound, f: f, wake: make(chan struct{})}, nil
}

func (l *outputLog) append(ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.appendLocked(ev)
}

func (l *outputLog) appendLocked(ev Event) {
	l.seq++
	ev.Seq = l.seq
	if ev.Type == "exit" {
		l.exit = &ev
	}
	if l.lost == nil {
		b, _ := json.Marshal(ev)
		b = append(b, '\n')
		if n, err := l.f.Write(b); err != nil {
			l.lost = err
			l.f.Truncate(l.size) // no half event for a follower to choke on
		} else {
			l.size += int64(n)
		}
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

// lostErr is the error that stopped the log's file taking events (nil: none did).
func (l *outputLog) lostErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// output logs a piece of output while the log is under its cap. The cap
// counts the stored form (JSON-escaped or base64, with the event's
// framing), so that it bounds the disk the log takes, whatever the
// command writes; the piece that would cross it is cut short, and a
// truncated event marks where the log stops.
func (l *outputLog) output(stream string, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return
	}
	ev := outputEvent(stream, data)
	n := l.eventSize(ev)
	if l.kept+n > l.max {
		// Keep the longest prefix that fits (halving: a piece is at most
		// the sandbox's flush size), then the marker.
		lo, hi := 0, len(data)
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if l.kept+l.eventSize(outputEvent(stream, data[:mid])) <= l.max {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo > 0 {
			l.kept += l.eventSize(outputEvent(stream, data[:lo]))
			l.appendLocked(outputEvent(stream, data[:lo]))
		}
		l.cut = true
		l.appendLocked(Event{Type: "truncated", Data: fmt.Sprintf(outputMarkerText, l.bound, l.max)})
		return
	}
	l.kept += n
	l.appendLocked(ev)
}

func outputEvent(stream string, data []byte) Event {
	ev := Event{Type: "output", Stream: stream}
	if utf8.Valid(data) {
		ev.Data = string(data)
	} else {
		ev.Data64 = data
	}
	return ev
}

// eventSize is the bytes ev takes in the log as its next event.
func (l *outputLog) eventSize(ev Event) int64 {
	ev.Seq = l.seq + 1
	b, _ := json.Marshal(ev)
	return int64(len(b)) + 1
}

// stored is the size of the log's file so far.
func (l *outputLog) stored() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

func (l *outputLog) isTruncated() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// sync makes what the log holds durable, its name included; failing, it
// is lost (lostErr): the exec's record says its output was not all kept.
func (l *outputLog) sync() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return
	}
	err := l.f.Sync()
	if err == nil {
		var d *os.File
		if d, err = os.Open(filepath.Dir(l.path)); err == nil {
			err = errors.Join(d.Sync(), d.Close())
		}
	}
	if err != nil {
		l.lost = fmt.Errorf("sync: %w", err)
	}
}

func (l *outputLog) finish(e core.Exec) {
	l.append(Event{Type: "exit", Exec: &e})
	l.mu.Lock()
	l.done = true
	l.f.Close()
	l.mu.Unlock()
}

// follow streams the log from its start until the exit event.
func (l *outputLog) follow(ctx context.Context, fn func(Event) error) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := newLineReader(f)
	var read int64
	for {
		l.mu.Lock()
		size, done, wake, lost, exit := l.size, l.done, l.wake, l.lost, l.exit
		l.mu.Unlock()
		for read < size {
			line, err := dec.next()
			if err != nil {
				return err
			}
			read += int64(len(line)) + 1
			var ev Event
			if err := json.Unmarshal(line, &ev); err != nil {
				return err
			}
			if err := fn(ev); err != nil {
				return err
			}
			if ev.Type == "exit" {
				return nil
			}
		}
		if done {
			if lost != nil && exit != nil {
				return fn(*exit) // the file could not take it
			}
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// replayLog sends a finished exec's logged output, then its exit event
// from the journal (the record there is the truth).
func replayLog(ctx context.Context, path string, rec core.Exec, fn func(Event) error) error {
	var seq uint64
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		lr := newLineReader(f)
		for {
			line, err := lr.next()
			if err != nil {
				break
			}
			var ev Event
			if json.Unmarshal(line, &ev) != nil || ev.Type != "output" && ev.Type != "truncated" {
				continue
			}
			seq = ev.Seq
			if err := fn(ev); err != nil {
				return err
			}
		}
	}
	return fn(Event{Seq: seq + 1, Type: "exit", Exec: &rec})
}

// Package daemon assembles a running computerd: the store, the API server,
// the metrics endpoint, and their orderly start and stop. Tests and
// benchmarks start one in-process with Start.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"computerd/computerd/api"
	"computerd/computerd/idmap"
	"computerd/computerd/metrics"
	"computerd/computerd/runner"
	"computerd/computerd/sandbox"
	"computerd/core"
	"computerd/fsstore"
)

// Config says where a daemon keeps its data and listens.
type Config struct {
	// DataDir holds the store; created 0700 if missing.
	DataDir string
	// Listen is the API address (default DefaultListen; ":0" picks a free port).
	Listen string
	// MetricsListen is the Prometheus address ("" for none).
	MetricsListen string
	// Limits bound callers (zero values take the API's defaults).
	Limits api.Limits
	// Quota is every tenant's quota unless `computerd tenant set` gave it
	// one of its own: zero fields take DefaultQuotaBytes and
	// DefaultMaxWorkspaces, negative ones set no limit.
	Quota fsstore.Quota
	// HTTP bounds how long a connection to the API or metrics server may
	// wait on its client (zero fields take the defaults of HTTPTimeouts).
	HTTP HTTPTimeouts
	// Log receives the daemon's log (default: discard).
	Log *slog.Logger
	// NoFsync acknowledges writes before they are on the disk
	// (fsstore.Store.NoFsync): faster, but a power loss loses the last
	// seconds of acknowledged writes and hands their revision numbers
	// out again. Off, an acknowledged write survives a power loss.
	NoFsync bool
	// NoExec turns sandboxed exec off (it needs root, cgroup v2 and /dev/fuse).
	NoExec bool
	// SandboxLimits are the default container limits (zero: sandbox defaults).
	SandboxLimits core.Limits
	// SandboxHelper is the computerd-sandbox binary that runs the
	// containers (see sandbox.Manager.Helper); empty runs them in-process.
	SandboxHelper string
	// SandboxWarm is how many containers are kept made ahead of need, so
	// that an exec starts at once (see sandbox.Manager.Warm); 0 makes each
	// when its exec comes.
	SandboxWarm int
	// SandboxIDs are the host ids the containers' user namespaces map: a
	// container's root is host id SandboxIDs.Base. The daemon claims them
	// in SandboxIDClaims for as long as it runs, and does not start if a
	// live claim there overlaps them. Zero: the first range from
	// idmap.DefaultBase on that no other daemon holds (idmap.ClaimFree).
	SandboxIDs idmap.Range
	// SandboxIDClaims is the directory where the daemons of the host
	// claim their SandboxIDs (default idmap.DefaultClaimDir).
	SandboxIDClaims string
	// ExecTimeout is the default exec timeout (0: DefaultExecTimeout).
	ExecTimeout time.Duration
	// ExecMaxLimits are the ceilings of what an exec may ask for (zero
	// fields: DefaultExecMaxMemory, DefaultExecMaxPids, DefaultExecMaxCPUs),
	// ExecMaxTimeout the ceiling of its timeout (0: DefaultExecMaxTimeout).
	ExecMaxLimits  core.Limits
	ExecMaxTimeout time.Duration
	// ExecMaxPerTenant and ExecMaxTotal bound the execs running at once
	// (0: DefaultExecMaxPerTenant, DefaultExecMaxTotal).
	ExecMaxPerTenant, ExecMaxTotal int
	// ExecShelf is how many overlays of execs that wrote nothing stay
	// mounted for the next exec on the same revision (0:
	// DefaultExecShelf; negative: none).
	ExecShelf int
	// ExecMaxOutput bounds each exec's stored output log, bytes
	// (0: DefaultExecMaxOutput).
	ExecMaxOutput int64
	// ExecMaxWrite bounds what each exec may write to /workspace, bytes
	// (0: DefaultExecMaxWrite); the tenant's byte quota and the disk's
	// free space may bound it further.
	ExecMaxWrite int64
	// Retention is the policy by which the daemon prunes old revisions
	// (serve's default: fsstore.DefaultPolicy; the zero Policy keeps all).
	Retention fsstore.Policy
	// GCInterval is how often it prunes by Retention and then collects the
	// chunks nothing needs (0: never; serve's default DefaultGCInterval).
	GCInterval time.Duration
	// MountRoots are the directories beneath which tenants' tokens with the
	// mount scope may mount workspaces (serve's --mount-root); none: host
	// mounts are refused. docs/SECURITY.md ("Host mounts") has the rules.
	MountRoots []string
	// Home, if set, makes this daemon an executor of the home computerd at
	// that URL, acting for the tenant of HomeToken (see docs/SYNC.md).
	Home, HomeToken string
	// HomeCA is a PEM file of the certificate authorities an executor
	// trusts for an https Home ("": the system's roots).
	HomeCA string
	// HomeTimeout bounds how long an executor's call to its home may go
	// without progress (default DefaultHomeTimeout).
	HomeTimeout time.Duration
	// TLSCert and TLSKey, PEM files, make the API serve HTTPS (both or
	// neither; the metrics listener stays plain HTTP).
	TLSCert, TLSKey string
}

// Defaults of Config (and of computerd serve's flags, which name these).
const (
	// DefaultListen is the API's address: loopback only.
	DefaultListen = "127.0.0.1:7777"
	// DefaultMetricsListen is computerd serve's --metrics-listen (a
	// Config without MetricsListen serves no metrics).
	DefaultMetricsListen = "127.0.0.1:7778"
	// DefaultSandboxWarm is computerd serve's --sandbox-warm.
	DefaultSandboxWarm = 2
	// DefaultQuotaBytes bounds what one tenant stores, history included
	// (--quota-bytes): room for many large repositories and their
	// revisions, while one tenant cannot take a whole disk from others.
	DefaultQuotaBytes = 100 << 30
	// DefaultMaxWorkspaces bounds a tenant's live workspaces, conflict
	// and interrupted copies included (--max-workspaces).
	DefaultMaxWorkspaces = 1000
	// DefaultExecTimeout is the timeout of an exec that names none.
	DefaultExecTimeout = runner.DefaultTimeout
	// The exec ceilings and bounds; runner.Runner's defaults say why these.
	DefaultExecMaxMemory    = runner.MaxMemory
	DefaultExecMaxPids      = runner.MaxPids
	DefaultExecMaxTimeout   = runner.MaxTimeout
	DefaultExecMaxPerTenant = runner.MaxPerTenant
	DefaultExecMaxTotal     = runner.MaxTotal
	DefaultExecMaxOutput    = runner.MaxOutput
	DefaultExecMaxWrite     = runner.MaxWrite
	DefaultExecShelf        = runner.ShelfLayers
)

// DefaultExecMaxCPUs is the CPU ceiling of an exec: the host's CPUs.
func DefaultExecMaxCPUs() float64 { return runner.MaxCPUs() }

// Daemon is a running computerd.
type Daemon struct {
	Store   *fsstore.Store
	Metrics *metrics.Metrics
	Runner  *runner.Runner // nil with NoExec
	mounts  *mounts

	cfg      Config
	opened   bool       // the store is open
	retain   *retention // nil without GCInterval
	remote   *executor
	ids      *idmap.Claim // the containers' host ids, held while the sandbox runs
	sandbox  *sandbox.Manager
	api      *http.Server
	apiLn    net.Listener
	tls      *tls.Config // nil: the API speaks plain HTTP
	metrics  *http.Server
	metricLn net.Listener
	served   chan error

	group    errgroup.Group // the HTTP servers' goroutines
	stopping atomic.Bool    // Shutdown began: a listener's end is no failure
	stopOnce sync.Once
	stopErr  error
}

// Start makes a daemon of cfg and opens it (see New and Open).
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	d := New(cfg)
	if err := d.Open(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// New returns a daemon of cfg, not yet started.
func New(cfg Config) *Daemon {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Daemon{cfg: cfg, Metrics: metrics.New(), served: make(chan error, 2)}
}

// Open opens the store (which takes the data directory's lock, and
// recovers from any crash), starts the mount manager, the runner and its
// sandbox, the retention loop, and last the API and metrics listeners (see docs/LIFECYCLE.md). If any step
// fails, what the earlier ones started is stopped again, in reverse
// order, before Open returns: no goroutine, helper process, container,
// mount or open store is left behind.
func (d *Daemon) Open(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			d.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	cfg := &d.cfg
	if d.tls, err = serverTLS(cfg.TLSCert, cfg.TLSKey); err != nil {
		return err
	}
	// Mounts and containers need absolute paths; the directory can move
	// under a relative one if the working directory changes.
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	cfg.DataDir = abs
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	d.Store = fsstore.New(cfg.DataDir)
	d.Store.NoFsync = cfg.NoFsync
	d.Store.Owner = "computerd serve" // the store's lock names its holder
	d.Store.DefaultQuota = quotaOf(cfg.Quota)
	if cfg.Home != "" {
		if d.remote, err = newExecutor(ctx, *cfg, d.Store); err != nil {
			return err
		}
	}
	if err := releaseDyingHolder(cfg.DataDir, cfg.Log); err != nil {
		return err
	}
	if err := d.Store.Open(ctx); err != nil {
		return err
	}
	d.opened = true
	if d.remote != nil {
		if err := d.remote.check(ctx, d.Store, cfg.Log); err != nil {
			return err
		}
	}
	d.Metrics.WatchStore(d.Store)
	policy, err := newMountPolicy(cfg.MountRoots, cfg.DataDir)
	if err != nil {
		return err
	}
	d.mounts = newMounts(cfg.DataDir, policy, d.Store, d.Metrics, cfg.Log)
	if err := d.mounts.Open(ctx); err != nil {
		return err
	}
	d.Store.OnDelete = func(ws int64, execs []string) {
		if d.Runner != nil {
			d.Runner.Forget(ws, execs)
		}
	}
	d.Store.OnCommit = func(ws int64, rev core.Revision) {
		d.mounts.changed(ws)
		if d.Runner != nil { // set before any commit but the runner's own recovery
			d.Runner.Changed(ws, rev.Rev)
		}
	}
	if !cfg.NoExec {
		if err := d.openRunner(ctx); err != nil {
			return err
		}
	}
	if cfg.GCInterval > 0 {
		// After recovery, so that drafts left by a crash are delivered first.
		d.retain = newRetention(d.Store, cfg.Retention, cfg.GCInterval, d.Metrics, cfg.Log)
		d.retain.Open(ctx)
	}
	srv := &api.Server{Store: d.Store, Limits: cfg.Limits, Metrics: d.Metrics, Log: cfg.Log, Runner: d.Runner, Mounts: d.mounts}
	if d.remote != nil {
		srv.Home, srv.Authenticate, srv.Mounts = d.remote.proxy, d.remote.authenticate, nil
	}
	d.api = newHTTPServer(srv.Handler(), cfg.HTTP, cfg.Log)
	d.api.RegisterOnShutdown(srv.EndMCPStreams)
	if d.apiLn, err = listen(cfg.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if d.tls != nil {
		d.api.Protocols = http1Only()
		d.apiLn = tls.NewListener(d.apiLn, d.tls) // closing it closes the once-closing listener under it
	}
	if cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", d.Metrics.Handler())
		d.metrics = newHTTPServer(mux, cfg.HTTP, cfg.Log)
		if d.metricLn, err = listen(cfg.MetricsListen); err != nil {
			return fmt.Errorf("metrics listen: %w", err)
		}
		d.group.Go(func() error { return d.serve(d.metrics, d.metricLn) })
	}
	d.group.Go(func() error { return d.serve(d.api, d.apiLn) })
	cfg.Log.Info("serving", "api", d.URL(), "metrics", d.MetricsURL(), "data", cfg.DataDir)
	d.warnExposed()
	return nil
}

// quotaOf is the store's default quota for a Config's: zero fields take
// the defaults, negative ones (no limit) become the store's zero.
func quotaOf(q fsstore.Quota) fsstore.Quota {
	pick := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return fsstore.Quota{MaxBytes: pick(q.MaxBytes, DefaultQuotaBytes), MaxWorkspaces: pick(q.MaxWorkspaces, DefaultMaxWorkspaces)}
}

// SandboxStateDir is where a daemon on dataDir keeps its containers'
// state (sandbox.Manager.StateDir). After a computerd killed with SIGKILL
// that is not started again, a Manager on it can Sweep what was left.
func SandboxStateDir(dataDir string) string { return filepath.Join(runDir(dataDir), "sandbox") }

// CleanupMounts detaches what a daemon that died left mounted under
// dataDir for its execs (see runner.CleanupMounts); its next start does
// the same.
func CleanupMounts(dataDir string) error { return runner.CleanupMounts(runDir(dataDir)) }

// runDir holds what execs need while computerd runs: mount points, spool
// files, output logs, the containers' state.
func runDir(dataDir string) string { return filepath.Join(dataDir, "run") }

// openRunner prepares sandboxed exec and recovers from a previous crash:
// orphaned containers and mounts go, interrupted execs' writes are kept.
// Then the sandbox makes its warm containers.
func (d *Daemon) openRunner(ctx context.Context) error {
	if err := d.claimIDs(); err != nil {
		return err
	}
	d.sandbox = &sandbox.Manager{StateDir: SandboxStateDir(d.cfg.DataDir), Limits: d.cfg.SandboxLimits, Helper: d.cfg.SandboxHelper,
		Warm: d.cfg.SandboxWarm, IDs: d.ids.Range}
	if d.sandbox.Helper != "" {
		d.cfg.Log.Info("containers run from the sandbox helper", "helper", d.sandbox.Helper)
	} else {
		d.cfg.Log.Info("containers run from computerd itself (no computerd-sandbox helper)")
	}
	d.Runner = &runner.Runner{
		Store: d.Store, Sandbox: d.sandbox, Metrics: d.Metrics, Log: d.cfg.Log,
		Dir: runDir(d.cfg.DataDir), DefaultTimeout: d.cfg.ExecTimeout,
		MaxTimeout: d.cfg.ExecMaxTimeout, MaxLimits: d.cfg.ExecMaxLimits,
		MaxPerTenant: d.cfg.ExecMaxPerTenant, MaxTotal: d.cfg.ExecMaxTotal, MaxOutput: d.cfg.ExecMaxOutput,
		MaxWrite: d.cfg.ExecMaxWrite, Shelf: d.cfg.ExecShelf,
	}
	if d.remote != nil {
		d.Runner.Remote = d.remote.runner()
	}
	if err := d.Runner.Open(ctx); err != nil {
		return fmt.Errorf("exec recovery: %w", err)
	}
	if d.sandbox.Warm > 0 {
		if err := d.sandbox.Warmup(); err != nil {
			// Execs still run, each making its container.
			d.cfg.Log.Warn("no warm containers", "err", err)
		}
	}
	return nil
}

// claimIDs claims the containers' host ids on the host, so that no
// other daemon's containers run as the same host ids.
func (d *Daemon) claimIDs() (err error) {
	dir := d.cfg.SandboxIDClaims
	if dir == "" {
		dir = idmap.DefaultClaimDir
	}
	if d.cfg.SandboxIDs == (idmap.Range{}) {
		d.ids, err = idmap.ClaimFree(dir, d.cfg.DataDir)
	} else {
		d.ids, err = d.cfg.SandboxIDs.Claim(dir, d.cfg.DataDir)
	}
	var ce *idmap.ClaimedError
	switch {
	case errors.As(err, &ce) && ce.Free != (idmap.Range{}):
		return fmt.Errorf("sandbox ids: %w: give --sandbox-id-base %d, or leave it out to take a free range", err, ce.Free.Base)
	case err != nil:
		return fmt.Errorf("sandbox ids: %w", err)
	}
	d.cfg.Log.Info("containers map their ids to host ids", "ids", d.ids.Range, "claim", d.ids.Path())
	return nil
}

// SandboxIDs are the host ids its containers map (the zero Range
// without execs).
func (d *Daemon) SandboxIDs() idmap.Range {
	if d.ids == nil {
		return idmap.Range{}
	}
	return d.ids.Range
}

// serve serves s on ln until Shutdown; any other end is reported on Wait.
func (d *Daemon) serve(s *http.Server, ln net.Listener) error {
	err := s.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) || d.stopping.Load() {
		err = nil
	}
	d.served <- err
	return err
}

// listen listens on addr; the listener may be closed more than once.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &onceCloseListener{Listener: ln}, nil
}

// onceCloseListener closes its listener once: Shutdown closes it, then
// http.Server.Shutdown does again.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// URL is the API's base URL (https when it serves TLS).
func (d *Daemon) URL() string {
	if d.tls != nil {
		return "https://" + d.apiLn.Addr().String()
	}
	return "http://" + d.apiLn.Addr().String()
}

// MetricsURL is the metrics endpoint's URL ("" when disabled).
func (d *Daemon) MetricsURL() string {
	if d.metricLn == nil {
		return ""
	}
	return "http://" + d.metricLn.Addr().String() + "/metrics"
}

// Wait returns when a listener fails (or after Shutdown).
func (d *Daemon) Wait() <-chan error { return d.served }

// Shutdown stops what Open started, in reverse order, whatever step Open
// reached (see docs/LIFECYCLE.md):
//
//  1. The API and metrics listeners close: nothing new arrives. Calls in
//     flight go on until ctx ends; then they are cut.
//  2. The runner refuses new execs and lets running ones finish until ctx
//     ends; then they are killed, and what they wrote is committed.
//  3. The sandbox stops its helper and destroys its warm containers;
//     the claim of its host ids goes.
//  4. The calls in flight have ended (their exec streams among them).
//  5. The mount manager unmounts every host mount, committing what is
//     pending.
//  6. The retention loop stops; the store closes, releasing the data
//     directory's lock.
//
// Cleanup that must finish (commits, unmounts) is not cut by ctx. It
// returns the first error; later calls return the same.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.stopOnce.Do(func() { d.stopErr = d.shutdown(ctx) })
	return d.stopErr
}

func (d *Daemon) shutdown(ctx context.Context) error {
	var first error
	keep := func(what string, err error) {
		if err == nil {
			return
		}
		if first == nil {
			first = err
		} else {
			d.cfg.Log.Warn("shutdown", "step", what, "err", err)
		}
	}
	d.stopping.Store(true)
	drained := make(chan error, 1)
	if d.apiLn != nil {
		keep("api listener", d.apiLn.Close())
		d.group.Go(func() error { drained <- d.api.Shutdown(ctx); return nil })
	} else {
		drained <- nil
	}
	if d.metricLn != nil {
		keep("metrics", d.metrics.Close())
	}
	if d.Runner != nil {
		keep("runner", d.Runner.Close(ctx))
	}
	if d.sandbox != nil {
		keep("sandbox", d.sandbox.Close())
	}
	// Once no container of ours runs, another daemon may have the ids.
	keep("sandbox ids", d.ids.Close())
	if err := <-drained; err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			d.api.Close()
		}
		keep("api", err)
	}
	keep("api", d.group.Wait())
	if d.mounts != nil {
		keep("mounts", d.mounts.Close(context.WithoutCancel(ctx)))
	}
	if d.remote != nil {
		d.remote.close()
	}
	if d.retain != nil {
		d.retain.Close()
	}
	if d.opened {
		keep("store", d.Store.Close()) // and with it the data directory's lock
	}
	return first
}

// Close stops at once: open calls are cut. Committed revisions are safe anyway.
func (d *Daemon) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Package daemon assembles a running computerd: the store, the API server,
// the metrics endpoint, and their orderly start and stop. Tests and
// benchmarks start one in-process with Start.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"computerd/computerd/api"
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
	// Listen is the API address (default 127.0.0.1:7777; ":0" picks a free port).
	Listen string
	// MetricsListen is the Prometheus address ("" for none).
	MetricsListen string
	// Limits bound callers (zero values take the API's defaults).
	Limits api.Limits
	// Log receives the daemon's log (default: discard).
	Log *slog.Logger
	// SyncFull makes every commit fsync (survives power loss, not only crashes).
	SyncFull bool
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
	// ExecTimeout is the default exec timeout (0: the runner's default).
	ExecTimeout time.Duration
	// Retention is the policy by which the daemon prunes old revisions
	// (serve's default: fsstore.DefaultPolicy; the zero Policy keeps all).
	Retention fsstore.Policy
	// GCInterval is how often it prunes by Retention and then collects the
	// chunks nothing needs (0: never; serve's default DefaultGCInterval).
	GCInterval time.Duration
	// Home, if set, makes this daemon an executor of the home computerd at
	// that URL, acting for the tenant of HomeToken (see docs/SYNC.md).
	Home, HomeToken string
}

// DefaultListen is the API's default address: loopback only.
const DefaultListen = "127.0.0.1:7777"

// DefaultSandboxWarm is computerd serve's --sandbox-warm.
const DefaultSandboxWarm = 2

// Daemon is a running computerd.
type Daemon struct {
	Store   *fsstore.Store
	Metrics *metrics.Metrics
	Runner  *runner.Runner // nil with NoExec
	mounts  *mounts
	retain  *retention // nil without GCInterval

	cfg      Config
	api      *http.Server
	apiLn    net.Listener
	metrics  *http.Server
	metricLn net.Listener
	served   chan error
}

// Start opens the store (which takes the data directory's lock, and
// recovers from any crash) and starts serving.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	// Mounts and containers need absolute paths; the directory can move
	// under a relative one if the working directory changes.
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	cfg.DataDir = abs
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	d := &Daemon{cfg: cfg, Metrics: metrics.New(), served: make(chan error, 2)}
	d.Store = fsstore.New(cfg.DataDir)
	d.Store.SyncFull = cfg.SyncFull
	d.Store.Owner = "computerd serve"
	var remote *executor
	if cfg.Home != "" {
		if remote, err = newExecutor(ctx, cfg, d.Store); err != nil {
			return nil, err
		}
	}
	if err := d.Store.Open(ctx); err != nil {
		return nil, err
	}
	if remote != nil {
		if err := remote.check(d.Store); err != nil {
			d.closeStore()
			return nil, err
		}
	}
	d.Metrics.WatchStore(d.Store)
	d.mounts = newMounts(cfg.DataDir, d.Store, d.Metrics, cfg.Log)
	d.mounts.cleanupStale()
	d.Store.OnCommit = func(ws int64, _ core.Revision) { d.mounts.changed(ws) }
	if !cfg.NoExec {
		if err := d.startRunner(ctx, remote); err != nil {
			d.closeStore()
			return nil, err
		}
	}
	if cfg.GCInterval > 0 {
		// After recovery, so that drafts left by a crash are delivered first.
		d.retain = newRetention(d.Store, cfg.Retention, cfg.GCInterval, d.Metrics, cfg.Log)
		d.retain.Open(ctx)
	}
	srv := &api.Server{Store: d.Store, Limits: cfg.Limits, Metrics: d.Metrics, Log: cfg.Log, Runner: d.Runner, Mounts: d.mounts}
	if remote != nil {
		srv.Home, srv.Authenticate, srv.Mounts = remote.proxy, remote.authenticate, nil
	}
	d.api = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn)}
	d.api.RegisterOnShutdown(srv.EndMCPStreams)
	if d.apiLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		d.closeStore()
		return nil, fmt.Errorf("listen: %w", err)
	}
	if cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", d.Metrics.Handler())
		d.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		if d.metricLn, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			d.apiLn.Close()
			d.closeStore()
			return nil, fmt.Errorf("metrics listen: %w", err)
		}
		go func() { d.served <- serve(d.metrics, d.metricLn) }()
	}
	go func() { d.served <- serve(d.api, d.apiLn) }()
	cfg.Log.Info("serving", "api", d.URL(), "metrics", d.MetricsURL(), "data", cfg.DataDir)
	return d, nil
}

// SandboxStateDir is where a daemon on dataDir keeps its containers'
// state (sandbox.Manager.StateDir). After a computerd killed with SIGKILL
// that is not started again, a Manager on it can Sweep what was left.
func SandboxStateDir(dataDir string) string { return filepath.Join(runDir(dataDir), "sandbox") }

// runDir holds what execs need while computerd runs: mount points, spool
// files, output logs, the containers' state.
func runDir(dataDir string) string { return filepath.Join(dataDir, "run") }

// startRunner prepares sandboxed exec and recovers from a previous crash:
// orphaned containers and mounts go, interrupted execs' writes are kept.
func (d *Daemon) startRunner(ctx context.Context, remote *executor) error {
	run := runDir(d.cfg.DataDir)
	sb := &sandbox.Manager{StateDir: SandboxStateDir(d.cfg.DataDir), Limits: d.cfg.SandboxLimits, Helper: d.cfg.SandboxHelper,
		Warm: d.cfg.SandboxWarm}
	if sb.Helper != "" {
		d.cfg.Log.Info("containers run from the sandbox helper", "helper", sb.Helper)
	} else {
		d.cfg.Log.Info("containers run from computerd itself (no computerd-sandbox helper)")
	}
	d.Runner = &runner.Runner{
		Store: d.Store, Sandbox: sb, Metrics: d.Metrics, Log: d.cfg.Log,
		Dir: run, DefaultTimeout: d.cfg.ExecTimeout,
	}
	if remote != nil {
		d.Runner.Remote = remote.runner()
	}
	if err := d.Runner.Recover(ctx); err != nil {
		return fmt.Errorf("exec recovery: %w", err)
	}
	if sb.Warm > 0 {
		if err := sb.Warmup(); err != nil {
			// Execs still run, each making its container.
			d.cfg.Log.Warn("no warm containers", "err", err)
		}
	}
	return nil
}

func serve(s *http.Server, ln net.Listener) error {
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// URL is the API's base URL.
func (d *Daemon) URL() string { return "http://" + d.apiLn.Addr().String() }

// MetricsURL is the metrics endpoint's URL ("" when disabled).
func (d *Daemon) MetricsURL() string {
	if d.metricLn == nil {
		return ""
	}
	return "http://" + d.metricLn.Addr().String() + "/metrics"
}

// Wait returns when a listener fails (or after Shutdown).
func (d *Daemon) Wait() <-chan error { return d.served }

// Shutdown stops accepting calls, lets those in flight finish until ctx
// ends (then cuts them), and closes the store.
func (d *Daemon) Shutdown(ctx context.Context) error {
	if d.Runner != nil {
		// Running commands may finish until ctx ends; then they are killed
		// and what they wrote is committed.
		d.Runner.Shutdown(ctx)
		d.Runner.Sandbox.Close()
	}
	d.mounts.closeAll(context.WithoutCancel(ctx))
	err := d.api.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		d.api.Close()
	}
	if d.metrics != nil {
		d.metrics.Close()
	}
	return errors.Join(err, d.closeStore())
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

func (d *Daemon) closeStore() error {
	d.retain.Close()
	return d.Store.Close()
}

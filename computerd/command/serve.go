package command

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"computerd/computerd/api"
	"computerd/computerd/daemon"
	"computerd/computerd/idmap"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// serveCommand runs the daemon until SIGINT or SIGTERM.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the API (and metrics) from a data directory",
		Flags: []cli.Flag{
			dataFlag,
			&cli.StringFlag{Name: "listen", Usage: "API address", Value: daemon.DefaultListen, EnvVars: []string{"COMPUTERD_LISTEN"}},
			&cli.StringFlag{Name: "metrics-listen", Usage: "Prometheus metrics address (empty: off)", Value: daemon.DefaultMetricsListen, EnvVars: []string{"COMPUTERD_METRICS_LISTEN"}},
			&cli.Int64Flag{Name: "max-workspaces", Usage: "live workspaces per tenant, conflict and interrupted copies included (0: no limit; computerd tenant set gives a tenant its own)", Value: daemon.DefaultMaxWorkspaces},
			&cli.StringFlag{Name: "quota-bytes", Usage: "bytes one tenant may store, history, forks and copies included, each distinct chunk counted once (0: no limit; computerd tenant set gives a tenant its own); suffixes K, M, G, T (powers of 1024)", Value: core.FormatSize(daemon.DefaultQuotaBytes)},
			sizeFlag("max-body", "largest JSON request body", api.DefaultMaxJSONBody),
			sizeFlag("max-upload", "largest streamed upload (file write, attach)", api.DefaultMaxUpload),
			&cli.DurationFlag{Name: "http-read-header-timeout", Usage: "longest time to read a request's header", Value: daemon.DefaultHTTPReadHeaderTimeout},
			&cli.DurationFlag{Name: "http-idle-timeout", Usage: "how long a kept-alive connection may wait for its next request", Value: daemon.DefaultHTTPIdleTimeout},
			&cli.DurationFlag{Name: "http-body-timeout", Usage: "longest wait for more of a request body (file write, attach, push), and the grace before --http-body-min-rate applies", Value: daemon.DefaultHTTPBodyTimeout},
			sizeFlag("http-body-min-rate", "slowest a request body may arrive, per second of waiting for it (a trickling upload is cut)", daemon.DefaultHTTPBodyMinRate),
			&cli.DurationFlag{Name: "http-write-timeout", Usage: "longest one write of an answer may wait for a client that does not read it (each write moves the deadline on; a quiet stream is never cut)", Value: daemon.DefaultHTTPWriteTimeout},
			&cli.DurationFlag{Name: "shutdown-grace", Usage: "how long in-flight calls and execs may finish after SIGINT/SIGTERM", Value: defaultShutdownGrace},
			&cli.StringFlag{Name: "retention", Usage: "which revisions to keep: for=AGE (e.g. 7d, 36h) and/or last=N per workspace, comma-separated, a revision going only when no rule keeps it; all: keep every revision", Value: fsstore.DefaultPolicy.String()},
			&cli.DurationFlag{Name: "gc-interval", Usage: "how often to prune by --retention and reclaim the space of unreferenced chunks (0: never)", Value: daemon.DefaultGCInterval},
			&cli.BoolFlag{Name: "no-fsync", Usage: "acknowledge writes before they are on the disk (no fsync per commit: faster). RISK: a power loss or a kernel crash then loses the last seconds of acknowledged writes (revisions, journal records, tokens) and hands their revision numbers out again for other contents; a crash of computerd alone still loses nothing"},
			// Every commit is on the disk before it is acknowledged by
			// default now: --sync-full is accepted and changes nothing.
			&cli.BoolFlag{Name: "sync-full", Hidden: true},
			&cli.BoolFlag{Name: "quiet", Usage: "log warnings and errors only"},
			&cli.StringFlag{Name: "tls-cert", Usage: "serve the API over HTTPS with this certificate (PEM; with --tls-key)", EnvVars: []string{"COMPUTERD_TLS_CERT"}},
			&cli.StringFlag{Name: "tls-key", Usage: "the private key of --tls-cert (PEM)", EnvVars: []string{"COMPUTERD_TLS_KEY"}},
			&cli.StringFlag{Name: "home", Usage: "run as an executor of the home computerd at this URL", EnvVars: []string{"COMPUTERD_HOME"}},
			&cli.StringFlag{Name: "token-file", Usage: "with --home: a file holding a token of the tenant this executor serves (default: $" + wire.TokenEnv + ")"},
			&cli.StringFlag{Name: "home-ca", Usage: "with an https --home: the certificate authorities to trust for it (PEM; default: the system's)", EnvVars: []string{"COMPUTERD_HOME_CA"}},
			&cli.DurationFlag{Name: "home-timeout", Usage: "with --home: longest a call to the home may go without progress (connecting, sending, or waiting for its answer) before it fails and is retried", Value: daemon.DefaultHomeTimeout},
			tokenValueFlag,
			&cli.StringSliceFlag{Name: "mount-root", Usage: "a directory beneath which tokens with the mount scope may mount workspaces (repeatable; none: host mounts are refused)", EnvVars: []string{"COMPUTERD_MOUNT_ROOTS"}},
			&cli.BoolFlag{Name: "no-exec", Usage: "turn sandboxed exec off"},
			&cli.DurationFlag{Name: "exec-timeout", Usage: "timeout of an exec that names none", Value: daemon.DefaultExecTimeout},
			&cli.DurationFlag{Name: "exec-max-timeout", Usage: "ceiling of the timeout an exec may ask for (above it: refused)", Value: daemon.DefaultExecMaxTimeout},
			sizeFlag("exec-max-memory", "ceiling of the memory an exec may ask for", daemon.DefaultExecMaxMemory),
			&cli.Int64Flag{Name: "exec-max-pids", Usage: "ceiling of the processes and threads an exec may ask for", Value: daemon.DefaultExecMaxPids},
			&cli.Float64Flag{Name: "exec-max-cpus", Usage: "ceiling of the CPUs an exec may ask for (the default is the host's count)", Value: daemon.DefaultExecMaxCPUs()},
			&cli.IntFlag{Name: "exec-max-per-tenant", Usage: "execs one tenant may run at once (beyond: 429 busy)", Value: daemon.DefaultExecMaxPerTenant},
			&cli.IntFlag{Name: "exec-max-total", Usage: "execs that may run at once in all (beyond: 429 busy)", Value: daemon.DefaultExecMaxTotal},
			&cli.StringFlag{Name: "exec-max-write", Usage: "bytes one exec may write to /workspace before its writes fail with ENOSPC (less when its tenant's --quota-bytes or the disk leave less); suffixes K, M, G, T", Value: core.FormatSize(daemon.DefaultExecMaxWrite)},
			&cli.IntFlag{Name: "exec-shelf", Usage: "overlays of execs that wrote nothing kept mounted for the next exec on the same revision, which then starts with warm caches (0: none)", Value: daemon.DefaultExecShelf},
			sizeFlag("exec-max-output", "output log kept per exec, both streams as stored (beyond: truncated; the command runs on)", daemon.DefaultExecMaxOutput),
			&cli.StringFlag{Name: "sandbox-helper", Usage: "the computerd-sandbox binary that runs containers (auto: the one beside computerd, if any; none: run them in computerd)", Value: "auto"},
			&cli.Uint64Flag{Name: "sandbox-id-base", Usage: fmt.Sprintf("the host uid and gid of a container's root: its user namespace maps its ids 0 to %d to this one and the %d after it. "+
				"Each computerd on the host claims its range in %s while it runs; one given a range that another holds does not start",
				idmap.DefaultSize-1, idmap.DefaultSize-1, idmap.DefaultClaimDir),
				DefaultText: fmt.Sprintf("the first range from %d on, in steps of %d, that no other computerd holds", idmap.DefaultBase, idmap.DefaultSize)},
			&cli.IntFlag{Name: "sandbox-warm", Usage: "containers kept made ahead of need, so that execs start at once (0: make each when its exec comes)", Value: daemon.DefaultSandboxWarm},
		},
		Action: serve,
	}
}

func serve(c *cli.Context) error {
	if c.IsSet("token") {
		return wire.ErrTokenOnCommandLine
	}
	if err := checkSizes(c, "max-body", "max-upload", "http-body-min-rate", "exec-max-memory", "exec-max-output"); err != nil {
		return err
	}
	if err := needRoot(c); err != nil {
		return err
	}
	daemon.TuneRuntime()
	level := slog.LevelInfo
	if c.Bool("quiet") {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	helper, err := sandboxHelper(c.String("sandbox-helper"))
	if err != nil {
		return err
	}
	shelf := c.Int("exec-shelf")
	switch {
	case shelf < 0:
		return fmt.Errorf("--exec-shelf %d: want 0 (none) or more", shelf)
	case shelf == 0:
		shelf = -1 // daemon.Config's none
	}
	if w := c.Int("sandbox-warm"); w < 0 || w > maxSandboxWarm {
		return fmt.Errorf("--sandbox-warm %d: want 0 to %d", w, maxSandboxWarm)
	}
	var ids idmap.Range // unset: the daemon takes a free range
	if c.IsSet("sandbox-id-base") {
		ids = idmap.Range{Base: uint32(c.Uint64("sandbox-id-base")), Size: idmap.DefaultSize}
		if b := c.Uint64("sandbox-id-base"); uint64(ids.Base) != b || ids.Validate() != nil {
			return fmt.Errorf("--sandbox-id-base %d: want 1 to %d", b, 1<<32-1-idmap.DefaultSize)
		}
	}
	retention, err := fsstore.ParsePolicy(c.String("retention"))
	if err != nil {
		return fmt.Errorf("--retention: %w", err)
	}
	if c.Duration("gc-interval") < 0 {
		return fmt.Errorf("--gc-interval %s: want 0 (never) or more", c.Duration("gc-interval"))
	}
	// A ceiling of 0 would read as "the default" further in: refuse it.
	for name, v := range map[string]float64{
		"exec-max-timeout": c.Duration("exec-max-timeout").Seconds(), "exec-max-memory": float64(size(c, "exec-max-memory")),
		"exec-max-pids": float64(c.Int64("exec-max-pids")), "exec-max-cpus": c.Float64("exec-max-cpus"),
		"exec-max-per-tenant": float64(c.Int("exec-max-per-tenant")), "exec-max-total": float64(c.Int("exec-max-total")),
		"exec-max-output": float64(size(c, "exec-max-output")),
	} {
		if v <= 0 {
			return fmt.Errorf("--%s: want more than 0", name)
		}
	}
	for _, name := range []string{"http-read-header-timeout", "http-idle-timeout", "http-body-timeout", "http-write-timeout"} {
		if c.Duration(name) <= 0 {
			return fmt.Errorf("--%s %s: want more than 0", name, c.Duration(name))
		}
	}
	if d := c.Duration("home-timeout"); d <= 0 {
		return fmt.Errorf("--home-timeout %s: want more than 0", d)
	}
	if r := size(c, "http-body-min-rate"); r <= 0 {
		return fmt.Errorf("--http-body-min-rate %d: want more than 0", r)
	}
	quota, err := serveQuota(c)
	if err != nil {
		return err
	}
	maxWrite, err := core.ParseSize(c.String("exec-max-write"))
	if err != nil || maxWrite == 0 {
		return fmt.Errorf("--exec-max-write %q: want a size above 0 (%v)", c.String("exec-max-write"), err)
	}
	var homeToken string
	if c.String("home") != "" {
		if homeToken, err = wire.ReadToken(c.String("token-file")); err != nil {
			return err
		}
	}
	// Nothing computerd starts needs the token: it stays in this process.
	os.Unsetenv(wire.TokenEnv)
	d, err := daemon.Start(c.Context, daemon.Config{
		Quota:            quota,
		DataDir:          c.String("data"),
		Listen:           c.String("listen"),
		MetricsListen:    c.String("metrics-listen"),
		Log:              log,
		NoFsync:          c.Bool("no-fsync"),
		Home:             c.String("home"),
		HomeToken:        homeToken,
		HomeCA:           c.String("home-ca"),
		HomeTimeout:      c.Duration("home-timeout"),
		TLSCert:          c.String("tls-cert"),
		TLSKey:           c.String("tls-key"),
		NoExec:           c.Bool("no-exec"),
		MountRoots:       c.StringSlice("mount-root"),
		ExecTimeout:      c.Duration("exec-timeout"),
		ExecMaxTimeout:   c.Duration("exec-max-timeout"),
		ExecMaxLimits:    core.Limits{Memory: size(c, "exec-max-memory"), Pids: c.Int64("exec-max-pids"), CPUs: c.Float64("exec-max-cpus")},
		ExecMaxPerTenant: c.Int("exec-max-per-tenant"),
		ExecMaxTotal:     c.Int("exec-max-total"),
		ExecMaxOutput:    size(c, "exec-max-output"),
		ExecShelf:        shelf,
		ExecMaxWrite:     maxWrite,
		SandboxHelper:    helper,
		SandboxWarm:      c.Int("sandbox-warm"),
		SandboxIDs:       ids,
		Retention:        retention,
		GCInterval:       c.Duration("gc-interval"),
		HTTP: daemon.HTTPTimeouts{
			ReadHeader:  c.Duration("http-read-header-timeout"),
			Idle:        c.Duration("http-idle-timeout"),
			Body:        c.Duration("http-body-timeout"),
			BodyMinRate: size(c, "http-body-min-rate"),
			Write:       c.Duration("http-write-timeout"),
		},
		Limits: api.Limits{
			MaxJSONBody: size(c, "max-body"),
			MaxUpload:   size(c, "max-upload"),
		},
	})
	if err != nil {
		return err
	}
	select {
	case err := <-d.Wait():
		d.Close()
		return err
	case <-c.Context.Done():
	}
	// From here a second SIGINT/SIGTERM takes the default action and ends
	// the process at once; the store is crash-safe, so that loses nothing
	// acknowledged.
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	log.Info("shutting down: finishing calls in flight", "grace", c.Duration("shutdown-grace"))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), c.Duration("shutdown-grace"))
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// tokenValueFlag is the --token that no command takes any more (see
// wire.ErrTokenOnCommandLine): given, it is refused with the way to go.
var tokenValueFlag = &cli.StringFlag{Name: "token", Hidden: true}

// serveQuota reads --quota-bytes and --max-workspaces, where 0 is no limit.
func serveQuota(c *cli.Context) (fsstore.Quota, error) {
	bytes, err := core.ParseSize(c.String("quota-bytes"))
	if err != nil {
		return fsstore.Quota{}, fmt.Errorf("--quota-bytes: %w", err)
	}
	n := c.Int64("max-workspaces")
	if n < 0 {
		return fsstore.Quota{}, fmt.Errorf("--max-workspaces %d: want 0 (no limit) or more", n)
	}
	noLimit := func(v int64) int64 {
		if v == 0 {
			return -1 // daemon.Config's "no limit"
		}
		return v
	}
	return fsstore.Quota{MaxBytes: noLimit(bytes), MaxWorkspaces: noLimit(n)}, nil
}

// defaultShutdownGrace is --shutdown-grace's default.
const defaultShutdownGrace = 30 * time.Second

// maxSandboxWarm bounds --sandbox-warm: each warm container holds a
// process, a cgroup and its namespaces while it waits.
const maxSandboxWarm = 64

// sandboxHelper resolves --sandbox-helper: "auto" is computerd-sandbox in
// computerd's own directory if it is there (in-process otherwise), "none"
// or "" in-process, anything else a binary that must exist.
func sandboxHelper(flag string) (string, error) {
	switch flag {
	case "", "none":
		return "", nil
	case "auto":
		// os.Args[0], not os.Executable: the process runs from a sealed
		// copy of its binary (sandbox.Init).
		self, err := exec.LookPath(os.Args[0])
		if err != nil {
			return "", nil
		}
		p := filepath.Join(filepath.Dir(self), "computerd-sandbox")
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return "", nil
		}
		return filepath.Abs(p)
	}
	fi, err := os.Stat(flag)
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--sandbox-helper %s: not a file (%v)", flag, err)
	}
	return filepath.Abs(flag)
}

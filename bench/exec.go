package main

// The exec suite measures package computerd/sandbox (one libcontainer
// container per command) against bare libcontainer measured in the same
// run:
//
//  1. bare_true: the reference. A container with a minimal configuration
//     created, run and destroyed with libcontainer directly, running
//     /usr/bin/true: mount, UTS, IPC, PID and network (loopback)
//     namespaces, /proc, a tmpfs /dev with the default devices, a
//     read-only bind of /usr (plus the /bin, /lib... links of a merged-usr
//     host), a cgroup with only device rules; no output pipes, no limits,
//     no masked paths, no seccomp.
//  2. run_true: sandbox.Manager.Run of `true` with the full profile
//     (docs/SANDBOX.md): p50 against bare_true's p50 (bar: ratio <= 1.5)
//     and in absolute terms (bar: < 30 ms), and p99 against bare_true's
//     p99. run_noseccomp is Run with Manager.NoSeccomp: what the seccomp
//     handshake costs (no bar). The three take turns in a rotating order,
//     execRuns runs each after execWarmup untimed ones.
//  3. first_byte: time from the Run call to the first output event of
//     `echo x`, p50 of firstByteRuns, against run_true's p50.
//  4. concurrent20: wall time of 20 concurrent Runs of `true` (best of 3),
//     against 20 times run_true's p50 (what running them one after the
//     other would take).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	"computerd/agentctl/client"
	"computerd/computerd/sandbox"
	"computerd/computerd/wire"
)

func init() {
	register(Suite{Name: "exec", Doc: "sandbox: container run latency against bare libcontainer, first byte, concurrency", Run: runExec})
}

const (
	execWarmup     = 5
	execRuns       = 50
	firstByteRuns  = 20
	concurrentRuns = 20
	concurrentReps = 3
)

var (
	barRunRatio = Bar{"ratio", "<=", 1.5} // Run p50 / bare libcontainer p50
	barRunP50   = Bar{"value", "<", 30}   // ms
)

func runExec(ctx context.Context, env *Env) error {
	if os.Geteuid() != 0 {
		return errors.New("exec suite needs root (containers)")
	}
	m := &sandbox.Manager{StateDir: filepath.Join(env.Dir, "state")}
	if _, err := m.Sweep(ctx); err != nil {
		return err
	}
	bare, err := newBareRunner(filepath.Join(env.Dir, "bare"))
	if err != nil {
		return err
	}
	runTrue := func(ctx context.Context, m *sandbox.Manager) (time.Duration, error) {
		start := time.Now()
		res, err := m.Run(ctx, sandbox.Spec{Argv: []string{"true"}}, nil)
		d := time.Since(start)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d (signal %v)", res.ExitCode, res.Signal)
		}
		return d, err
	}

	// 1 and 2: bare, Run and Run without seccomp in turn.
	nm := &sandbox.Manager{StateDir: m.StateDir, NoSeccomp: true}
	var bareLat, runLat, noSecLat []time.Duration
	err = env.phase(ctx, "run_true", func(ctx context.Context) error {
		for i := range execWarmup + execRuns {
			if err := ctx.Err(); err != nil {
				return err
			}
			// Rotate the order, so that each kind follows each other kind
			// equally often (a container's teardown leaves work behind
			// that the next start shares the CPUs with).
			var b, r, n time.Duration
			for k := range 3 {
				var err error
				switch (i + k) % 3 {
				case 0:
					if b, err = bare.run(i); err != nil {
						return fmt.Errorf("bare libcontainer: %w", err)
					}
				case 1:
					if r, err = runTrue(ctx, m); err != nil {
						return fmt.Errorf("Run: %w", err)
					}
				case 2:
					if n, err = runTrue(ctx, nm); err != nil {
						return fmt.Errorf("Run without seccomp: %w", err)
					}
				}
			}
			if i >= execWarmup {
				bareLat, runLat, noSecLat = append(bareLat, b), append(runLat, r), append(noSecLat, n)
			}
		}
		return nil
	})
	if err != nil {
		env.Emit(timedOut("exec/run_true_p50", "ms", barRunRatio, err))
		env.Emit(timedOut("exec/run_true_p50_ms", "ms", barRunP50, err))
		return err
	}
	bareP50, bareP99 := percentile(bareLat, 50), percentile(bareLat, 99)
	runP50, runP99 := percentile(runLat, 50), percentile(runLat, 99)
	env.Emit(Result{Name: "exec/bare_true_p50", Value: ms(bareP50), Unit: "ms",
		Note: fmt.Sprintf("bare libcontainer create+run+destroy of true, %d runs", len(bareLat))}.check(Bar{}))
	env.Emit(Result{Name: "exec/run_true_p50", Value: ms(runP50), Unit: "ms"}.
		withRef("bare_true_p50_ms", ms(bareP50)).check(barRunRatio))
	env.Emit(Result{Name: "exec/run_true_p50_ms", Value: ms(runP50), Unit: "ms"}.check(barRunP50))
	env.Emit(Result{Name: "exec/run_true_p99", Value: ms(runP99), Unit: "ms"}.
		withRef("bare_true_p99_ms", ms(bareP99)).check(Bar{}))
	env.Emit(Result{Name: "exec/run_noseccomp_p50", Value: ms(percentile(noSecLat, 50)), Unit: "ms",
		Note: "Run without the seccomp filter: what the filter's handshake costs"}.
		withRef("run_true_p50_ms", ms(runP50)).check(Bar{}))

	// 3: first output byte.
	var firstLat []time.Duration
	err = env.phase(ctx, "first_byte", func(ctx context.Context) error {
		for range firstByteRuns {
			start := time.Now()
			var first time.Duration
			res, err := m.Run(ctx, sandbox.Spec{Argv: []string{"echo", "x"}}, func(sandbox.Event) {
				if first == 0 {
					first = time.Since(start)
				}
			})
			if err != nil {
				return err
			}
			if res.ExitCode != 0 || first == 0 {
				return fmt.Errorf("echo: %+v, no output", res)
			}
			firstLat = append(firstLat, first)
		}
		return nil
	})
	if err != nil {
		return err
	}
	env.Emit(Result{Name: "exec/first_byte_p50", Value: ms(percentile(firstLat, 50)), Unit: "ms"}.
		withRef("run_true_p50_ms", ms(runP50)).check(Bar{}))

	// 4: concurrency.
	var best time.Duration
	err = env.phase(ctx, "concurrent20", func(ctx context.Context) error {
		for range concurrentReps {
			start := time.Now()
			errs := make([]error, concurrentRuns)
			var wg sync.WaitGroup
			for i := range concurrentRuns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = runTrue(ctx, m)
				}()
			}
			wg.Wait()
			d := time.Since(start)
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if best == 0 || d < best {
				best = d
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	env.Emit(Result{Name: "exec/concurrent20_wall", Value: ms(best), Unit: "ms",
		Note: fmt.Sprintf("%d concurrent Runs of true, best of %d; ref is %d sequential p50s", concurrentRuns, concurrentReps, concurrentRuns)}.
		withRef("run_true_p50_x20_ms", ms(runP50)*concurrentRuns).check(Bar{}))
	return execThroughAPI(ctx, env, bare)
}

// execThroughAPI measures request to exit of `true` through a daemon's
// HTTP API (journal, FUSE workspace, container, commit check, event
// stream), alternating with bare libcontainer runs for the same-run reference.
func execThroughAPI(ctx context.Context, env *Env, bare *bareRunner) error {
	d, token, err := startDaemon(ctx, filepath.Join(env.Dir, "api"), false)
	if err != nil {
		return err
	}
	defer d.Close()
	cl := client.New(d.URL(), token)
	if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
		return err
	}
	var apiLat, bareLat, echoLat, firstLat []time.Duration
	exec := func(argv ...string) (total, first time.Duration, err error) {
		start := time.Now()
		rec, err := cl.Exec(ctx, "w", wire.ExecRequest{Argv: argv}, func(ev wire.ExecEvent) error {
			if first == 0 && ev.Type == "output" {
				first = time.Since(start)
			}
			return nil
		})
		total = time.Since(start)
		if err == nil && rec.ExitCode != 0 {
			err = fmt.Errorf("%s exited %d", argv[0], rec.ExitCode)
		}
		return total, first, err
	}
	err = env.phase(ctx, "api_exec_true", func(ctx context.Context) error {
		for i := range execWarmup + execRuns {
			b, err := bare.run(10000 + i)
			if err != nil {
				return err
			}
			a, _, err := exec("true")
			if err != nil {
				return err
			}
			e, first, err := exec("echo", "x")
			if err != nil {
				return err
			}
			if i >= execWarmup {
				apiLat, bareLat = append(apiLat, a), append(bareLat, b)
				echoLat, firstLat = append(echoLat, e), append(firstLat, first)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	p50, ref := percentile(apiLat, 50), percentile(bareLat, 50)
	env.Emit(Result{Name: "exec/api_true_p50", Value: ms(p50), Unit: "ms",
		Note: fmt.Sprintf("agentctl's client: POST exec of `true` to exit event through the HTTP API, %d runs; p99 %.1f ms", len(apiLat), ms(percentile(apiLat, 99)))}.
		withRef("bare_true_p50_ms", ms(ref)).check(barRunRatio))
	env.Emit(Result{Name: "exec/api_true_p50_ms", Value: ms(p50), Unit: "ms"}.check(barRunP50))
	env.Emit(Result{Name: "exec/api_echo_p50", Value: ms(percentile(echoLat, 50)), Unit: "ms",
		Note: "the same for `echo x` (one output event before the exit), taking turns with `true` and bare"}.withRef("bare_true_p50_ms", ms(ref)).check(Bar{}))
	env.Emit(Result{Name: "exec/api_first_byte_p50", Value: ms(percentile(firstLat, 50)), Unit: "ms",
		Note: "request to the first output event of `echo x` through the API"}.withRef("bare_true_p50_ms", ms(ref)).check(Bar{}))
	return nil
}

// bareRunner runs `true` in containers with a minimal libcontainer
// configuration: the reference for sandbox.Manager.Run.
type bareRunner struct {
	stateDir, rootfs string
}

func newBareRunner(dir string) (*bareRunner, error) {
	b := &bareRunner{stateDir: filepath.Join(dir, "containers"), rootfs: filepath.Join(dir, "rootfs")}
	for _, d := range []string{"proc", "dev", "usr"} {
		if err := os.MkdirAll(filepath.Join(b.rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, l := range []string{"/bin", "/lib", "/lib64", "/sbin"} {
		if target, err := os.Readlink(l); err == nil {
			if err := os.Symlink(target, filepath.Join(b.rootfs, l)); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

func (b *bareRunner) config(i int) *configs.Config {
	rules := []*devconfig.Rule{{Type: devconfig.WildcardDevice, Major: devconfig.Wildcard, Minor: devconfig.Wildcard, Permissions: "rwm"}}
	var devs []*devconfig.Device
	for _, d := range specconv.AllowedDevices {
		if d.Path != "" {
			devs = append(devs, d)
			rules = append(rules, &d.Rule)
		}
	}
	caps := []string{"CAP_KILL", "CAP_AUDIT_WRITE"}
	return &configs.Config{
		Rootfs:  b.rootfs,
		Devices: devs,
		Namespaces: configs.Namespaces{
			{Type: configs.NEWNS}, {Type: configs.NEWUTS}, {Type: configs.NEWIPC},
			{Type: configs.NEWPID}, {Type: configs.NEWNET},
		},
		Networks:     []*configs.Network{{Type: "loopback", Address: "127.0.0.1/0", Gateway: "localhost"}},
		Capabilities: &configs.Capabilities{Bounding: caps, Effective: caps, Permitted: caps},
		Mounts: []*configs.Mount{
			{Source: "proc", Destination: "/proc", Device: "proc", Flags: unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV},
			{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755"},
			{Source: "/usr", Destination: "/usr", Device: "bind", Flags: unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY},
		},
		Cgroups: &cgroups.Cgroup{
			Path:      fmt.Sprintf("computerd-bench-bare-%d-%d", os.Getpid(), i),
			Resources: &cgroups.Resources{Devices: rules},
		},
	}
}

// run creates, runs and destroys one container running true.
func (b *bareRunner) run(i int) (time.Duration, error) {
	// The container's init dies with the thread that forked it (see
	// sandbox.Init): stay on one thread until it is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	c, err := libcontainer.Create(b.stateDir, fmt.Sprintf("bare-%d", i), b.config(i))
	if err != nil {
		return 0, err
	}
	p := &libcontainer.Process{Args: []string{"/usr/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Init: true}
	if err := c.Run(p); err != nil {
		_ = c.Destroy()
		return 0, err
	}
	st, err := p.Wait()
	if derr := c.Destroy(); err == nil {
		err = derr
	}
	if err == nil && !st.Success() {
		err = fmt.Errorf("true: %v", st)
	}
	return time.Since(start), err
}

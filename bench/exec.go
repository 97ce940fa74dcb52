package main

// The exec suite measures package computerd/sandbox (one libcontainer
// container per command) against bare libcontainer measured in the same
// run. It builds the two binaries containers start from, as `make build`
// does: computerd-sandbox (the helper computerd runs its containers with)
// and bench/barerun (the reference), each with little more than
// libcontainer linked in.
//
//  1. bare_true: the reference. A container with a minimal configuration
//     created, run and destroyed with libcontainer directly by barerun,
//     running /usr/bin/true (see bench/barerun for the configuration).
//  2. run_true: sandbox.Manager.Run of `true` with the full profile
//     (docs/SANDBOX.md), through the helper as computerd runs it: p50
//     against bare_true's p50 (bar: ratio <= 1.5) and in absolute terms
//     (bar: < 30 ms), and p99 against bare_true's p99. run_noseccomp is Run
//     with Manager.NoSeccomp: what the seccomp handshake costs (no bar).
//     The three take turns in a rotating order, execRuns runs each after
//     execWarmup untimed ones.
//  3. first_byte: time from the Run call to the first output event of
//     `echo x`, p50 of firstByteRuns, against run_true's p50.
//  4. concurrent20: wall time of 20 concurrent Runs of `true` (best of 3),
//     against 20 times run_true's p50 (what running them one after the
//     other would take).
//  5. api_true: request to exit of `true` through a daemon's HTTP API,
//     as computerd serve runs it (with warm containers), against bare
//     runs taken in turn with it (bars as for run_true); in the same
//     turns `echo x` (exit and first byte) and `true` through a daemon
//     without warm containers; then execs back to back (see
//     execThroughAPI).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"computerd/client"
	"computerd/computerd/daemon"
	"computerd/computerd/sandbox"
	"computerd/wire"
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
	helper, err := buildTool(ctx, env.Dir, "computerd-sandbox", "computerd/computerd/sandboxd")
	if err != nil {
		return err
	}
	barePath, err := buildTool(ctx, env.Dir, "barerun", "computerd/bench/barerun")
	if err != nil {
		return err
	}
	m := &sandbox.Manager{StateDir: filepath.Join(env.Dir, "state"), Helper: helper}
	defer m.Close()
	if _, err := m.Sweep(ctx); err != nil {
		return err
	}
	bare, err := startBare(barePath, filepath.Join(env.Dir, "bare"))
	if err != nil {
		return err
	}
	defer bare.close()
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
	nm := &sandbox.Manager{StateDir: m.StateDir, NoSeccomp: true, Helper: helper}
	defer nm.Close()
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
	return execThroughAPI(ctx, env, bare, helper, bareP50)
}

// execSettle is the pause before each timed run of the API phase: it lets
// the warm pool refill (and the previous container's teardown end), so
// that no run shares the CPUs with it. A run after a pause is slower on
// this machine (bare_true is about twice as slow after 50 ms of idle: the
// CPUs have to wake up), so the API runs are held to the bare runs of
// step 1, which ran back to back: a comparison that favours the
// reference. The bare runs taken after the same pause are reported too.
const execSettle = 50 * time.Millisecond

// execThroughAPI measures request to exit of `true` through a daemon's
// HTTP API (journal, FUSE workspace, container, commit check, event
// stream), as computerd serve runs by default (DefaultSandboxWarm
// containers made ahead of need), against bareP50, step 1's reference.
// In the same turns: bare libcontainer runs after the same pause, `echo x`
// through the same daemon, and `true` through a daemon that makes each
// container when its exec comes (--sandbox-warm 0). Then back_to_back:
// execs of `true` with no pause between them, which can find the pool
// empty.
func execThroughAPI(ctx context.Context, env *Env, bare *bareClient, helper string, bareP50 time.Duration) error {
	type daemonClient struct {
		d  *daemon.Daemon
		cl *client.Client
	}
	start := func(name string, warm int) (*daemonClient, error) {
		d, token, err := startDaemon(ctx, daemon.Config{DataDir: filepath.Join(env.Dir, name), SandboxHelper: helper, SandboxWarm: warm})
		if err != nil {
			return nil, err
		}
		cl := client.New(d.URL(), token)
		if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
			d.Close()
			return nil, err
		}
		return &daemonClient{d, cl}, nil
	}
	warm, err := start("api", daemon.DefaultSandboxWarm)
	if err != nil {
		return err
	}
	defer warm.d.Close()
	cold, err := start("api-cold", 0)
	if err != nil {
		return err
	}
	defer cold.d.Close()
	exec := func(dc *daemonClient, argv ...string) (total, first time.Duration, err error) {
		start := time.Now()
		rec, err := dc.cl.Exec(ctx, "w", wire.ExecRequest{Argv: argv}, func(ev wire.ExecEvent) error {
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
	var apiLat, bareLat, echoLat, firstLat, coldLat []time.Duration
	err = env.phase(ctx, "api_exec_true", func(ctx context.Context) error {
		for i := range execWarmup + execRuns {
			time.Sleep(execSettle)
			b, err := bare.run(10000 + i)
			if err != nil {
				return err
			}
			time.Sleep(execSettle)
			a, _, err := exec(warm, "true")
			if err != nil {
				return err
			}
			time.Sleep(execSettle)
			e, first, err := exec(warm, "echo", "x")
			if err != nil {
				return err
			}
			time.Sleep(execSettle)
			c, _, err := exec(cold, "true")
			if err != nil {
				return err
			}
			if i >= execWarmup {
				apiLat, bareLat, coldLat = append(apiLat, a), append(bareLat, b), append(coldLat, c)
				echoLat, firstLat = append(echoLat, e), append(firstLat, first)
			}
		}
		return nil
	})
	if err != nil {
		env.Emit(timedOut("exec/api_true_p50", "ms", barRunRatio, err))
		env.Emit(timedOut("exec/api_true_p50_ms", "ms", barRunP50, err))
		return err
	}
	var backLat []time.Duration
	err = env.phase(ctx, "api_back_to_back", func(ctx context.Context) error {
		time.Sleep(execSettle)
		for range execRuns {
			d, _, err := exec(warm, "true")
			if err != nil {
				return err
			}
			backLat = append(backLat, d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p50, ref, settled := percentile(apiLat, 50), ms(bareP50), percentile(bareLat, 50)
	env.Emit(Result{Name: "exec/api_true_p50", Value: ms(p50), Unit: "ms",
		Note: fmt.Sprintf("agentctl's client: POST exec of `true` to exit event through the HTTP API, %d warm containers (computerd serve's default), %d runs after a %v pause; p99 %.1f ms", daemon.DefaultSandboxWarm, len(apiLat), execSettle, ms(percentile(apiLat, 99)))}.
		withRef("bare_true_p50_ms", ref).check(barRunRatio))
	env.Emit(Result{Name: "exec/api_true_p50_ms", Value: ms(p50), Unit: "ms"}.check(barRunP50))
	env.Emit(Result{Name: "exec/bare_true_settled_p50", Value: ms(settled), Unit: "ms",
		Note: fmt.Sprintf("bare libcontainer runs after the same %v pause as the API runs, taken in turn with them", execSettle)}.
		withRef("bare_true_p50_ms", ref).check(Bar{}))
	env.Emit(Result{Name: "exec/api_echo_p50", Value: ms(percentile(echoLat, 50)), Unit: "ms",
		Note: "the same for `echo x` (one output event before the exit)"}.withRef("bare_true_p50_ms", ref).check(Bar{}))
	env.Emit(Result{Name: "exec/api_first_byte_p50", Value: ms(percentile(firstLat, 50)), Unit: "ms",
		Note: "request to the first output event of `echo x` through the API"}.withRef("bare_true_p50_ms", ref).check(Bar{}))
	env.Emit(Result{Name: "exec/api_true_cold_p50", Value: ms(percentile(coldLat, 50)), Unit: "ms",
		Note: "`true` through a daemon with --sandbox-warm 0 (each exec makes its container), against the bare runs after the same pause"}.
		withRef("bare_true_settled_p50_ms", ms(settled)).check(Bar{}))
	env.Emit(Result{Name: "exec/api_true_back_to_back_p50", Value: ms(percentile(backLat, 50)), Unit: "ms",
		Note: fmt.Sprintf("%d execs of `true` one right after the other (the pool may be empty); p99 %.1f ms", len(backLat), ms(percentile(backLat, 99)))}.
		withRef("bare_true_p50_ms", ref).check(Bar{}))
	return nil
}

// bareClient drives bench/barerun, the reference: bare libcontainer in a
// binary of its own, as small as computerd-sandbox (a container's init is
// the binary that starts it, and its size and package initialisation
// count; see docs/SANDBOX.md). Each run is timed inside barerun.
type bareClient struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startBare(path, dir string) (*bareClient, error) {
	cmd := exec.Command(path, dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &bareClient{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

// run runs container i and returns how long its create, run and destroy took.
func (b *bareClient) run(i int) (time.Duration, error) {
	if _, err := fmt.Fprintf(b.in, "%d\n", i); err != nil {
		return 0, fmt.Errorf("barerun: %w", err)
	}
	line, err := b.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("barerun: %w", err)
	}
	line = strings.TrimSpace(line)
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("barerun: %s", line)
	}
	return time.Duration(ns), nil
}

func (b *bareClient) close() {
	b.in.Close()
	b.cmd.Wait()
}

// buildTool builds one of the module's commands into dir, as `make build`
// would: the exec suite runs containers from the binaries computerd uses.
func buildTool(ctx context.Context, dir, name, pkg string) (string, error) {
	p := filepath.Join(dir, name)
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", p, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return p, nil
}

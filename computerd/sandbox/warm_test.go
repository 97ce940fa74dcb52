package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"computerd/computerd/mountinfo"
	"computerd/computerd/sandbox"
	"computerd/core"
)

// TestWarm runs the behaviour tests again on Managers that keep warm
// containers (MustManager gives TestWarm's subtests Warm: 2), then checks
// what only the pool does.
func TestWarm(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"OutputStreaming", TestOutputStreaming},
		{"PartialLineFlushed", TestPartialLineFlushed},
		{"ExitCodesAndSignals", TestExitCodesAndSignals},
		{"Stdin", TestStdin},
		{"TimeoutKillsTree", TestTimeoutKillsTree},
		{"CancelKills", TestCancelKills},
		{"EndOfCommandKillsBackground", TestEndOfCommandKillsBackground},
		{"NoNetwork", TestNoNetwork},
		{"ReadOnlyRootAndWorkspace", TestReadOnlyRootAndWorkspace},
		{"Isolation", TestIsolation},
		{"HostMasked", TestHostMasked},
		{"UserNamespace", TestUserNamespace},
		{"WorkspaceIDs", TestWorkspaceIDs},
		{"Etc", TestEtc},
		{"HostSocketsUnreachable", TestHostSocketsUnreachable},
		{"ConcurrentRuns", TestConcurrentRuns},
		{"InvalidSpecs", TestInvalidSpecs},
		{"MemoryLimit", TestMemoryLimit},
		{"PidsLimit", TestPidsLimit},
		{"Pool", testWarmPool},
		{"Limits", testWarmLimits},
		{"LongRuns", testWarmLongRuns},
	} {
		t.Run(tc.name, tc.test)
	}
}

// warmIDs lists the warm containers in m's state directory.
func warmIDs(m *sandbox.Manager) []string {
	ents, _ := os.ReadDir(filepath.Join(m.StateDir, "containers"))
	var ids []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "warm-") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// cgroupPids lists the processes in container id's cgroup.
func cgroupPids(t *testing.T, m *sandbox.Manager, id string) []int {
	var pids []int
	for _, dir := range cgroupsNamed(t, m.CgroupName(id)) {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// runWarm runs spec until a warm container serves it (the pool fills in
// the background), and returns that run.
func runWarm(t *testing.T, m *sandbox.Manager, spec sandbox.Spec) (sandbox.Result, *output) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, o := MustRun(t, m, spec)
		if res.Warm {
			return res, o
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run served by a warm container in 10 s (last %+v; pool: %v)", res, m.WarmError())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testWarmPool(t *testing.T) {
	m := MustManager(t)
	if err := m.Warmup(); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	res, o := runWarm(t, m, sandbox.Spec{Argv: sh("pwd; echo hi > f"), WorkspaceDir: ws, Cwd: "sub"})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != "/workspace/sub\n" {
		t.Fatalf("warm run: %+v stdout %q stderr %q", res, got, o.stream(sandbox.Stderr))
	}
	if b, err := os.ReadFile(filepath.Join(ws, "sub", "f")); err != nil || string(b) != "hi\n" {
		t.Fatalf("the warm container's write is not in the workspace: %q %v", b, err)
	}
	// The workspace was mounted in the container's namespace, not the host's.
	if points, err := mountinfo.Under(m.StateDir); err != nil || len(points) > 0 {
		t.Errorf("mounts under %s after the run: %q %v", m.StateDir, points, err)
	}
	// A Spec's workspace mount is nosuid and nodev in a warm container too.
	res, o = runWarm(t, m, sandbox.Spec{Argv: sh("grep ' /workspace ' /proc/self/mountinfo"), WorkspaceDir: ws})
	if opts := strings.Fields(o.stream(sandbox.Stdout)); res.ExitCode != 0 || strings.Count(o.stream(sandbox.Stdout), "\n") != 1 || len(opts) < 6 ||
		!strings.Contains(opts[5], "nosuid") || !strings.Contains(opts[5], "nodev") {
		t.Errorf("workspace mount in a warm container: %q", o.stream(sandbox.Stdout))
	}

	// Runs that do not fit the pool's containers make their own.
	res, _ = MustRun(t, m, sandbox.Spec{Argv: []string{"true"}, Limits: core.Limits{Tmp: 1 << 20}})
	if res.Warm {
		t.Errorf("a run with its own /tmp size ran warm: %+v", res)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	res, _ = MustRun(t, m, sandbox.Spec{Argv: []string{"true"}, Stdin: null})
	if res.Warm {
		t.Errorf("a run with a file for stdin ran warm: %+v", res)
	}

	// The pool refills to Warm containers, each waiting in its stub.
	deadline := time.Now().Add(10 * time.Second)
	for len(warmIDs(m)) != m.Warm && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ids := warmIDs(m)
	if len(ids) != m.Warm {
		t.Fatalf("warm containers %v, want %d", ids, m.Warm)
	}
	// Containers that died while they waited are not used: the next run
	// still runs (in another warm container, or one of its own).
	var stubs []int
	for _, id := range ids {
		deadline := time.Now().Add(10 * time.Second)
		for len(cgroupPids(t, m, id)) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		for _, pid := range cgroupPids(t, m, id) {
			stubs = append(stubs, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(stubs) < len(ids) {
		t.Fatalf("found %d stub processes for %d warm containers", len(stubs), len(ids))
	}
	for range 3 {
		o = &output{}
		res, err := m.Run(context.Background(), sandbox.Spec{Argv: []string{"echo", "ok"}}, o.add)
		if err != nil || res.ExitCode != 0 || o.stream(sandbox.Stdout) != "ok\n" {
			t.Fatalf("run after the warm containers died: %+v %v %q %q", res, err, o.stream(sandbox.Stdout), o.stream(sandbox.Stderr))
		}
	}
	// A command that cannot run fails as it does in a new container.
	deadline = time.Now().Add(10 * time.Second)
	for {
		res, err := m.Run(context.Background(), sandbox.Spec{Argv: []string{"no-such-command"}}, nil)
		if !errors.Is(err, sandbox.ErrStart) || !errors.Is(err, sandbox.ErrNotFound) || err.Error() != "no-such-command: command not found in the sandbox" {
			t.Fatalf("missing command: %+v %v", res, err)
		}
		if res.Warm {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm container ran the missing command in 10 s (last %+v)", res)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Close destroys the waiting containers.
	ids = warmIDs(m)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if left := warmIDs(m); len(left) != 0 {
		t.Errorf("warm containers left after Close: %v", left)
	}
	for _, id := range ids {
		if cg := cgroupsNamed(t, m.CgroupName(id)); len(cg) > 0 {
			t.Errorf("cgroups left after Close: %v", cg)
		}
	}
	if points, _ := mountinfo.Under(m.StateDir); len(points) > 0 {
		t.Errorf("mounts left after Close: %q", points)
	}
	for _, pid := range stubs {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("stub %d still alive", pid)
		}
	}
	// A closed Manager still runs, making each container.
	if res, err := m.Run(context.Background(), sandbox.Spec{Argv: []string{"true"}}, nil); err != nil || res.ExitCode != 0 || res.Warm {
		t.Errorf("run after Close: %+v %v", res, err)
	}
}

// testWarmLimits checks that a warm container has the Manager's limits:
// memory (the OOM killer), pids, and the tmpfs size of /tmp.
func testWarmLimits(t *testing.T) {
	needHost(t, "/usr/bin/python3")
	m := MustManager(t, func(m *sandbox.Manager) { m.Limits = core.Limits{Memory: 64 << 20, Pids: 32, Tmp: 1 << 20} })
	res, o := runWarm(t, m, sandbox.Spec{Argv: memoryHog})
	checkOOMKilled(t, res, o)
	res, o = runWarm(t, m, sandbox.Spec{Argv: []string{"python3", "-c", forkBomb}, Timeout: 20 * time.Second})
	checkForkBomb(t, res, o, 32)
	res, o = runWarm(t, m, sandbox.Spec{Argv: sh("head -c 2000000 /dev/zero > /tmp/big; echo $?")})
	if got := o.stream(sandbox.Stdout); got == "0\n" {
		t.Errorf("2 MB written to a 1 MB /tmp: %+v %q", res, got)
	}
}

// testWarmLongRuns checks that commands that run long do not keep their
// places in the pool empty: with both warm containers taken by long
// commands, new ones are made while those still run.
func testWarmLongRuns(t *testing.T) {
	m := MustManager(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type longRun struct {
		res sandbox.Result
		err error
	}
	done := make(chan longRun, m.Warm)
	for range m.Warm {
		waitWarm(t, m)
		up := make(chan struct{})
		go func() {
			var once sync.Once
			res, err := m.Run(ctx, sandbox.Spec{Argv: sh("echo up; sleep 60")}, func(sandbox.Event) { once.Do(func() { close(up) }) })
			done <- longRun{res, err}
		}()
		select {
		case <-up:
		case r := <-done:
			t.Fatalf("long run ended at once: %+v %v", r.res, r.err)
		}
	}
	if res, _ := MustRun(t, m, sandbox.Spec{Argv: []string{"true"}}); !res.Warm {
		t.Errorf("run beside two long ones: %+v", res)
	}
	cancel()
	for range m.Warm {
		if r := <-done; r.err != nil || !r.res.Canceled || !r.res.Warm {
			t.Errorf("long run: %+v %v, want a warm container, canceled", r.res, r.err)
		}
	}
}

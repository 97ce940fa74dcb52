package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"computerd/computerd/sandbox"
	"computerd/core"
)

// childEnv makes the test binary play a supervisor that starts a container
// and waits to be killed (see TestSweepOrphans).
const childEnv = "SANDBOX_TEST_CHILD_STATEDIR"

func TestMain(m *testing.M) {
	sandbox.Init()
	if dir := os.Getenv(childEnv); dir != "" {
		orphanChild(dir)
		return
	}
	os.Exit(m.Run())
}

// MustManager returns a Manager on a temporary state directory, set up
// further by opts, and at the end closes it and sweeps whatever a failed
// test left there. In TestWarm's subtests it keeps two warm containers,
// ready when it returns.
func MustManager(tb testing.TB, opts ...func(*sandbox.Manager)) *sandbox.Manager {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root for containers")
	}
	m := &sandbox.Manager{StateDir: tb.TempDir()}
	if strings.HasPrefix(tb.Name(), "TestWarm/") {
		m.Warm = 2
	}
	for _, o := range opts {
		o(m)
	}
	tb.Cleanup(func() {
		m.Close()
		if ids, err := m.Sweep(context.Background()); len(ids) > 0 || err != nil {
			tb.Errorf("sweep after test: %v %v", ids, err)
		}
	})
	if m.Warm > 0 && m.Helper == "" {
		waitWarm(tb, m)
	}
	return m
}

// output collects a run's events.
type output struct {
	mu     sync.Mutex
	events []sandbox.Event
	times  []time.Time
}

func (o *output) add(e sandbox.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
	o.times = append(o.times, time.Now())
}

func (o *output) stream(name string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b strings.Builder
	for _, e := range o.events {
		if e.Stream == name {
			b.Write(e.Data)
		}
	}
	return b.String()
}

// MustRun runs argv and fails the test if it could not run. On a Manager
// with warm containers it waits for one to be ready, and fails the test if
// a Spec that fits them did not run in one.
func MustRun(tb testing.TB, m *sandbox.Manager, spec sandbox.Spec) (sandbox.Result, *output) {
	tb.Helper()
	_, stdinFile := spec.Stdin.(*os.File)
	fits := m.Warm > 0 && m.Helper == "" && spec.Rootfs == "" && spec.Limits.Tmp == 0 && !stdinFile
	if fits {
		waitWarm(tb, m)
	}
	o := &output{}
	res, err := m.Run(context.Background(), spec, o.add)
	if err != nil {
		tb.Fatalf("Run %q: %v", spec.Argv, err)
	}
	if fits && !res.Warm {
		tb.Fatalf("Run %q made its own container (%s) with a warm one ready", spec.Argv, res.ID)
	}
	return res, o
}

// waitWarm starts m's warm containers if need be, and waits until one is
// ready.
func waitWarm(tb testing.TB, m *sandbox.Manager) {
	tb.Helper()
	if err := m.Warmup(); err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.WarmReady() == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("no warm container ready in 10 s: %v", m.WarmError())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sh(script string) []string { return []string{"sh", "-c", script} }

// needHost skips the test when the host (and so the default root) lacks
// a program it runs in the container.
func needHost(tb testing.TB, path string) {
	tb.Helper()
	if _, err := os.Stat(path); err != nil {
		tb.Skipf("needs %s on the host", path)
	}
}

func TestOutputStreaming(t *testing.T) {
	m := MustManager(t)
	start := time.Now()
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(`for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done; printf partial; echo oops >&2`)})
	end := time.Now()
	if res.ExitCode != 0 || res.Signal != 0 {
		t.Fatalf("result %+v", res)
	}
	if got, want := o.stream(sandbox.Stdout), "line1\nline2\nline3\nline4\nline5\npartial"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := o.stream(sandbox.Stderr), "oops\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	if res.Stdout != int64(len("line1\n")*5+len("partial")) || res.Stderr != 5 {
		t.Errorf("byte counts %d %d", res.Stdout, res.Stderr)
	}
	for i, e := range o.events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	if len(o.events) < 5 {
		t.Fatalf("%d events, want one per line at least", len(o.events))
	}
	// The first line must arrive as it is printed, well before the end.
	if first, total := o.times[0].Sub(start), end.Sub(start); total < 900*time.Millisecond || first > total-600*time.Millisecond {
		t.Errorf("first line after %v of %v: not streamed", first, total)
	}
}

func TestPartialLineFlushed(t *testing.T) {
	m := MustManager(t)
	var mu sync.Mutex
	var firstAt time.Time
	res, err := m.Run(context.Background(), sandbox.Spec{Argv: sh(`printf 'no newline'; sleep 1`)}, func(e sandbox.Event) {
		mu.Lock()
		defer mu.Unlock()
		if firstAt.IsZero() {
			firstAt = time.Now()
		}
	})
	end := time.Now()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	// The command sleeps a second after its partial line.
	if firstAt.IsZero() || end.Sub(firstAt) < 500*time.Millisecond {
		t.Errorf("partial line delivered %v before the end of a run of %v", end.Sub(firstAt), res.Duration)
	}
}

func TestExitCodesAndSignals(t *testing.T) {
	m := MustManager(t)
	tests := []struct {
		name   string
		argv   []string
		code   int
		signal syscall.Signal
	}{
		{"true", []string{"true"}, 0, 0},
		{"false", []string{"false"}, 1, 0},
		{"exit7", sh("exit 7"), 7, 0},
		{"segv", []string{"python3", "-c", "import ctypes; ctypes.string_at(0)"}, -1, syscall.SIGSEGV},
		// PID 1 of a PID namespace ignores signals it has no handler for
		// unless the kernel forces them (a fault, or a kill from outside).
		{"self-kill ignored", sh("kill -KILL $$; echo alive; exit 4"), 4, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.argv[0] == "python3" {
				needHost(t, "/usr/bin/python3")
			}
			res, _ := MustRun(t, m, sandbox.Spec{Argv: tt.argv})
			if res.ExitCode != tt.code || res.Signal != tt.signal {
				t.Errorf("exit %d signal %v, want %d %v", res.ExitCode, res.Signal, tt.code, tt.signal)
			}
		})
	}
}

func TestStdin(t *testing.T) {
	m := MustManager(t)
	res, o := MustRun(t, m, sandbox.Spec{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("hello\n")})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != "HELLO\n" {
		t.Errorf("exit %d stdout %q", res.ExitCode, got)
	}
	// No stdin: /dev/null.
	res, o = MustRun(t, m, sandbox.Spec{Argv: []string{"wc", "-c"}})
	if got := strings.TrimSpace(o.stream(sandbox.Stdout)); res.ExitCode != 0 || got != "0" {
		t.Errorf("exit %d stdout %q", res.ExitCode, got)
	}
}

// marker makes a sleep duration no other process on the host uses, so
// that the test can find the container's sleeps in the host's /proc.
func marker() string { return fmt.Sprintf("1000.%d", time.Now().UnixNano()%1_000_000_007) }

// hostProcs lists the host PIDs whose command line contains s.
func hostProcs(t *testing.T, s string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(s)) && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestTimeoutKillsTree(t *testing.T) {
	m := MustManager(t)
	mk := marker()
	var during []int
	script := fmt.Sprintf(`sleep %[1]s & sleep %[1]s & setsid sleep %[1]s & sleep 0.3; echo started; wait`, mk)
	start := time.Now()
	res, err := m.Run(context.Background(), sandbox.Spec{Argv: sh(script), Timeout: time.Second}, func(e sandbox.Event) {
		if strings.Contains(string(e.Data), "started") {
			during = hostProcs(t, mk)
		}
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Signal != syscall.SIGKILL {
		t.Errorf("result %+v, want timed out by SIGKILL", res)
	}
	if elapsed > 5*time.Second {
		t.Errorf("Run returned after %v for a 1s timeout", elapsed)
	}
	if len(during) < 3 {
		t.Fatalf("saw %d sleeps while running, want 3 (the test cannot see them)", len(during))
	}
	if left := hostProcs(t, mk); len(left) > 0 {
		t.Errorf("processes left after the timeout: %v", left)
	}
}

func TestCancelKills(t *testing.T) {
	m := MustManager(t)
	mk := marker()
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	res, err := m.Run(ctx, sandbox.Spec{Argv: sh(fmt.Sprintf(`sleep %s & echo up; wait`, mk))}, func(e sandbox.Event) {
		once.Do(func() { time.AfterFunc(100*time.Millisecond, cancel) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Canceled || res.TimedOut || res.Signal != syscall.SIGKILL {
		t.Errorf("result %+v, want canceled by SIGKILL", res)
	}
	if left := hostProcs(t, mk); len(left) > 0 {
		t.Errorf("processes left after cancel: %v", left)
	}
}

func TestEndOfCommandKillsBackground(t *testing.T) {
	m := MustManager(t)
	mk := marker()
	res, _ := MustRun(t, m, sandbox.Spec{Argv: sh(fmt.Sprintf(`setsid sleep %s >/dev/null 2>&1 & exit 0`, mk))})
	if res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if left := hostProcs(t, mk); len(left) > 0 {
		t.Errorf("background process outlived its command: %v", left)
	}
}

func hostIPs(t *testing.T) []string {
	t.Helper()
	ips := []string{"127.0.0.1"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			ips = append(ips, ipn.IP.String())
		}
	}
	return ips
}

func TestNoNetwork(t *testing.T) {
	needHost(t, "/usr/bin/python3")
	m := MustManager(t)
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted sync.WaitGroup
	accepted.Add(1)
	var conns int
	go func() {
		defer accepted.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns++
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, ip := range hostIPs(t) {
		script := fmt.Sprintf("import socket\ntry:\n  socket.create_connection((%q, %d), timeout=2)\n  print('connected')\nexcept OSError as e:\n  print('failed', e)\n", ip, port)
		res, o := MustRun(t, m, sandbox.Spec{Argv: []string{"python3", "-c", script}})
		if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || !strings.HasPrefix(got, "failed") {
			t.Errorf("connect to host %s:%d from the container: %q (exit %d)", ip, port, got, res.ExitCode)
		}
	}
	// Only the loopback interface, up.
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(`ls /sys/class/net; cat /sys/class/net/lo/operstate`)})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || strings.Fields(got)[0] != "lo" || len(strings.Fields(got)) != 2 {
		t.Errorf("interfaces: %q", got)
	}
	// Loopback inside works.
	script := "import socket\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()\nc=socket.create_connection(s.getsockname()); print('ok')\n"
	res, o = MustRun(t, m, sandbox.Spec{Argv: []string{"python3", "-c", script}})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != "ok\n" {
		t.Errorf("loopback inside: %q %q", got, o.stream(sandbox.Stderr))
	}
	ln.Close()
	accepted.Wait()
	if conns != 0 {
		t.Errorf("the host listener accepted %d connections", conns)
	}
}

func TestReadOnlyRootAndWorkspace(t *testing.T) {
	m := MustManager(t)
	ws := t.TempDir()
	script := `for p in /usr/x /etc/x /x /bin/x /proc/sys/kernel/hostname; do if touch $p 2>/dev/null; then echo "wrote $p"; fi; done
touch /tmp/ok && echo tmp-ok
mkdir sub && echo hi > sub/f && echo ws-ok
pwd`
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(script), WorkspaceDir: ws})
	if got, want := o.stream(sandbox.Stdout), "tmp-ok\nws-ok\n/workspace\n"; res.ExitCode != 0 || got != want {
		t.Errorf("stdout %q, want %q (stderr %q)", got, want, o.stream(sandbox.Stderr))
	}
	if b, err := os.ReadFile(filepath.Join(ws, "sub", "f")); err != nil || string(b) != "hi\n" {
		t.Errorf("workspace write not on the host: %q %v", b, err)
	}
	res, o = MustRun(t, m, sandbox.Spec{Argv: []string{"pwd"}, WorkspaceDir: ws, Cwd: "sub"})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != "/workspace/sub\n" {
		t.Errorf("cwd: %q", got)
	}
	// /tmp does not outlive its container.
	res, o = MustRun(t, m, sandbox.Spec{Argv: sh(`ls -A /tmp`)})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != "" {
		t.Errorf("/tmp not fresh: %q", got)
	}
}

func TestIsolation(t *testing.T) {
	m := MustManager(t)
	t.Setenv("COMPUTERD_TEST_SECRET", "hunter2")
	res, o := MustRun(t, m, sandbox.Spec{Argv: []string{"env"}, Env: []string{"FOO=bar", "LANG=C"}})
	env := strings.Split(strings.TrimSpace(o.stream(sandbox.Stdout)), "\n")
	if res.ExitCode != 0 || strings.Contains(o.stream(sandbox.Stdout), "hunter2") {
		t.Errorf("host environment visible: %q", env)
	}
	for _, want := range []string{"FOO=bar", "LANG=C", "HOME=/tmp", "TERM=dumb"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
	if slices.Contains(env, "LANG=C.UTF-8") {
		t.Errorf("env %q: LANG not replaced", env)
	}

	checks := []struct {
		name, script, want string
	}{
		{"pid1", `echo $$`, "1"},
		{"hostname", `hostname`, "sandbox"},
		{"seccomp", `grep '^Seccomp:' /proc/self/status | tr -d '\t'`, "Seccomp:2"},
		{"nnp", `grep '^NoNewPrivs:' /proc/self/status | tr -d '\t'`, "NoNewPrivs:1"},
		{"caps", `grep '^CapBnd:' /proc/self/status | tr -d '\t'`, "CapBnd:00000000a00405fb"},
		{"shadow", `test -e /etc/shadow && echo there || echo absent`, "absent"},
		{"unshare", `unshare -r true 2>/dev/null && echo escaped || echo denied`, "denied"},
		{"mount", `mount -t tmpfs none /mnt 2>/dev/null && echo mounted || echo denied`, "denied"},
		{"masked", `wc -c < /proc/interrupts`, "0"},
		{"procsys", `echo 1 > /proc/sys/kernel/ns_last_pid 2>/dev/null && echo wrote || echo denied`, "denied"},
		{"procs", `ls /proc > /tmp/procs; grep -c '^[0-9]' /tmp/procs`, "2"}, // sh and ls (a pipe's grep may or may not have started)
		{"devices", `ls /dev | tr '\n' ' '`, "fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero "},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			res, o := MustRun(t, m, sandbox.Spec{Argv: sh(c.script)})
			if got := strings.TrimRight(o.stream(sandbox.Stdout), "\n"); got != c.want {
				t.Errorf("%s: %q (exit %d, stderr %q), want %q", c.script, got, res.ExitCode, o.stream(sandbox.Stderr), c.want)
			}
		})
	}
}

// TestHostMasked: what a container reads of the kernel's command line,
// its build configuration and the boot's id is nothing of the host's,
// every masked path the host has reads empty inside, and the kernel's
// random UUIDs, which say nothing of the host, still come.
func TestHostMasked(t *testing.T) {
	m := MustManager(t)
	for _, p := range []string{"/proc/cmdline", "/proc/config.gz", "/proc/sys/kernel/random/boot_id"} {
		host, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) && p == "/proc/config.gz" {
			continue // a kernel built without it
		} else if err != nil || len(bytes.TrimSpace(host)) == 0 {
			t.Fatalf("host's %s: %q %v", p, host, err)
		}
		res, o := MustRun(t, m, sandbox.Spec{Argv: []string{"cat", p}})
		got := o.stream(sandbox.Stdout)
		if strings.Contains(got, string(bytes.TrimSpace(host))) {
			t.Errorf("%s inside is the host's (%d bytes)", p, len(got))
		}
		if res.ExitCode != 0 || got != "" {
			t.Errorf("%s inside: exit %d, %d bytes (stderr %q), want none", p, res.ExitCode, len(got), o.stream(sandbox.Stderr))
		}
	}

	var script strings.Builder
	var want []string
	for _, p := range sandbox.MaskedPaths {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			fmt.Fprintf(&script, "echo %s $(ls -A %s | wc -l)\n", p, p)
		} else {
			fmt.Fprintf(&script, "echo %s $(wc -c < %s)\n", p, p)
		}
		want = append(want, p+" 0")
	}
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(script.String())})
	if got := strings.Split(strings.TrimSpace(o.stream(sandbox.Stdout)), "\n"); res.ExitCode != 0 || !slices.Equal(got, want) {
		t.Errorf("masked paths inside (exit %d, stderr %q):\n%s\nwant\n%s", res.ExitCode, o.stream(sandbox.Stderr), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	res, o = MustRun(t, m, sandbox.Spec{Argv: sh(`cat /proc/sys/kernel/random/uuid /proc/sys/kernel/random/uuid`)})
	uuids := strings.Fields(o.stream(sandbox.Stdout))
	if res.ExitCode != 0 || len(uuids) != 2 || len(uuids[0]) != 36 || uuids[0] == uuids[1] {
		t.Errorf("random UUIDs inside: %q (exit %d)", uuids, res.ExitCode)
	}
}

// memoryHog allocates 256 MB and says so.
var memoryHog = []string{"python3", "-c", "b = b'x' * (256 << 20); print('allocated')"}

// checkOOMKilled checks that a run of memoryHog was killed for memory.
func checkOOMKilled(t *testing.T, res sandbox.Result, o *output) {
	t.Helper()
	if res.Signal != syscall.SIGKILL || res.OOMKills < 1 || strings.Contains(o.stream(sandbox.Stdout), "allocated") {
		t.Errorf("result %+v stdout %q: want OOM-killed", res, o.stream(sandbox.Stdout))
	}
}

func TestMemoryLimit(t *testing.T) {
	needHost(t, "/usr/bin/python3")
	m := MustManager(t)
	spec := sandbox.Spec{Argv: memoryHog, Limits: core.Limits{Memory: 64 << 20}}
	res, o := MustRun(t, m, spec)
	checkOOMKilled(t, res, o)
	// Within the limit the same works.
	spec.Argv = []string{"python3", "-c", "b = b'x' * (16 << 20); print('allocated')"}
	res, o = MustRun(t, m, spec)
	if res.ExitCode != 0 || o.stream(sandbox.Stdout) != "allocated\n" {
		t.Errorf("result %+v stdout %q", res, o.stream(sandbox.Stdout))
	}
}

// forkBomb forks sleeping children until fork fails, then prints how
// many it made and the errno.
const forkBomb = `import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print(n, e.errno)
`

// checkForkBomb checks a run of forkBomb under a pids limit.
func checkForkBomb(t *testing.T, res sandbox.Result, o *output, limit int) {
	t.Helper()
	f := strings.Fields(o.stream(sandbox.Stdout))
	if res.ExitCode != 0 || len(f) != 2 || f[1] != strconv.Itoa(int(syscall.EAGAIN)) {
		t.Fatalf("result %+v stdout %q stderr %q", res, o.stream(sandbox.Stdout), o.stream(sandbox.Stderr))
	}
	if n, _ := strconv.Atoi(f[0]); n >= limit || n < limit/2 {
		t.Errorf("forked %d children under a limit of %d", n, limit)
	}
	if res.Duration > 10*time.Second {
		t.Errorf("fork bomb ran %v: its children outlived it", res.Duration)
	}
}

func TestPidsLimit(t *testing.T) {
	needHost(t, "/usr/bin/python3")
	m := MustManager(t)
	res, o := MustRun(t, m, sandbox.Spec{Argv: []string{"python3", "-c", forkBomb}, Limits: core.Limits{Pids: 32}, Timeout: 20 * time.Second})
	checkForkBomb(t, res, o, 32)
}

func TestGitAndGoBuild(t *testing.T) {
	needHost(t, "/usr/bin/git")
	m := MustManager(t)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n\nfunc main() { println(\"hello from go\") }\n"), 0o644)
	git := `git init -q && git add . && git -c user.name=t -c user.email=t@example.com commit -qm first && git log --format=%s`
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(git), WorkspaceDir: ws})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != "first\n" {
		t.Fatalf("git: exit %d %q %q", res.ExitCode, got, o.stream(sandbox.Stderr))
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "HEAD")); err != nil {
		t.Error(err)
	}

	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Skip("no Go toolchain at /usr/local/go to bind")
	}
	build := `go build -o hello . && ./hello`
	res, o = MustRun(t, m, sandbox.Spec{
		Argv:         sh(build),
		WorkspaceDir: ws,
		Env:          []string{"GOCACHE=/tmp/gocache", "GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod"},
		Limits:       core.Limits{CPUs: 2},
		Timeout:      3 * time.Minute, // a cold build cache: the runtime and its deps compile first
	})
	if got := o.stream(sandbox.Stderr); res.ExitCode != 0 || got != "hello from go\n" {
		t.Fatalf("go build: %+v stdout %q stderr %q", res, o.stream(sandbox.Stdout), got)
	}
	t.Logf("go build of a tiny module with a cold cache: %v", res.Duration)
}

// TestNodeAndPython: python3, node and npm run in a container, in its
// /workspace, with its own /etc.
func TestNodeAndPython(t *testing.T) {
	needHost(t, "/usr/bin/python3")
	needHost(t, "/usr/bin/npm")
	m := MustManager(t)
	script := `python3 -c 'import json, sqlite3, ssl, subprocess; print(subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip())'
node -e 'console.log("node", 6 * 7)'
npm init -y >/dev/null && npm pkg set scripts.hi="echo npm ran" && npm run -s hi`
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(script), WorkspaceDir: t.TempDir(), Timeout: time.Minute})
	if got, want := o.stream(sandbox.Stdout), "root\nnode 42\nnpm ran\n"; res.ExitCode != 0 || got != want {
		t.Errorf("stdout %q (exit %d, stderr %q), want %q", got, res.ExitCode, o.stream(sandbox.Stderr), want)
	}
}

func TestConcurrentRuns(t *testing.T) {
	m := MustManager(t)
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &output{}
			res, err := m.Run(context.Background(), sandbox.Spec{Argv: sh(fmt.Sprintf("sleep 0.2; echo %d", i))}, o.add)
			switch {
			case err != nil:
				errs[i] = err
			case res.ExitCode != 0 || o.stream(sandbox.Stdout) != fmt.Sprintf("%d\n", i):
				errs[i] = fmt.Errorf("run %d: %+v %q", i, res, o.stream(sandbox.Stdout))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
}

func TestInvalidSpecs(t *testing.T) {
	m := MustManager(t)
	tests := []struct {
		name string
		spec sandbox.Spec
		want error
	}{
		{"no argv", sandbox.Spec{}, sandbox.ErrInvalidSpec},
		{"bad id", sandbox.Spec{ID: "a/b", Argv: []string{"true"}}, sandbox.ErrInvalidSpec},
		{"relative workspace", sandbox.Spec{Argv: []string{"true"}, WorkspaceDir: "rel/dir"}, sandbox.ErrInvalidSpec},
		{"cwd escapes", sandbox.Spec{Cwd: "../etc", Argv: []string{"true"}}, sandbox.ErrInvalidSpec},
		{"cwd absolute outside", sandbox.Spec{Cwd: "/etc", Argv: []string{"true"}}, sandbox.ErrInvalidSpec},
		{"bad env", sandbox.Spec{Env: []string{"NOEQUALS"}, Argv: []string{"true"}}, sandbox.ErrInvalidSpec},
		{"nul argv", sandbox.Spec{Argv: []string{"echo", "a\x00b"}}, sandbox.ErrInvalidSpec},
		{"no workspace", sandbox.Spec{WorkspaceDir: "/nonexistent", Argv: []string{"true"}}, sandbox.ErrInvalidSpec},
		{"not found", sandbox.Spec{Argv: []string{"no-such-command"}}, sandbox.ErrStart},
		{"missing cwd", sandbox.Spec{Cwd: "nope", WorkspaceDir: t.TempDir(), Argv: []string{"true"}}, sandbox.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Run(context.Background(), tt.spec, nil)
			if !errors.Is(err, tt.want) {
				t.Errorf("err %v, want %v", err, tt.want)
			}
		})
	}
	if m.Warm > 0 {
		return // a warm container keeps its own name: a Spec's ID cannot clash
	}
	// A duplicate ID while the first runs.
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		var once sync.Once
		_, err := m.Run(context.Background(), sandbox.Spec{ID: "dup", Argv: sh("echo up; sleep 0.5")}, func(sandbox.Event) { once.Do(func() { close(started) }) })
		done <- err
	}()
	<-started
	if _, err := m.Run(context.Background(), sandbox.Spec{ID: "dup", Argv: []string{"true"}}, nil); !errors.Is(err, sandbox.ErrStart) {
		t.Errorf("duplicate id: %v", err)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// orphanChild runs in a child test process: it starts a container that
// sleeps, says "ready" on stdout, and waits to be killed.
func orphanChild(stateDir string) {
	m := &sandbox.Manager{StateDir: stateDir}
	mk := os.Getenv(childEnv + "_MARKER")
	_, err := m.Run(context.Background(), sandbox.Spec{ID: "orphan", Argv: sh(fmt.Sprintf("sleep %s & echo ready; wait", mk))}, func(e sandbox.Event) {
		fmt.Println("ready")
	})
	fmt.Fprintln(os.Stderr, "child: Run returned:", err)
	os.Exit(3)
}

func TestSweepOrphans(t *testing.T) {
	m := MustManager(t)
	mk := marker()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+m.StateDir, childEnv+"_MARKER="+mk)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	if len(hostProcs(t, mk)) == 0 {
		t.Fatal("the child's container is not running")
	}
	cmd.Process.Kill()
	cmd.Wait()
	go io.Copy(io.Discard, stdout)

	// The container dies with its supervisor (the init's parent-death
	// signal kills its PID namespace); Sweep only has state to remove.
	deadline := time.Now().Add(5 * time.Second)
	for len(hostProcs(t, mk)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := hostProcs(t, mk); len(left) > 0 {
		t.Errorf("container processes outlived their supervisor: %v", left)
	}

	ids, err := m.Sweep(context.Background())
	if err != nil || !slices.Equal(ids, []string{"orphan"}) {
		t.Fatalf("Sweep: %v %v, want [orphan]", ids, err)
	}
	if left := hostProcs(t, mk); len(left) > 0 {
		t.Errorf("orphaned processes left after Sweep: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(m.StateDir, "containers")); len(ents) != 0 {
		t.Errorf("state left after Sweep: %v", ents)
	}
	if cg := cgroupsNamed(t, m.CgroupName("orphan")); len(cg) > 0 {
		t.Errorf("cgroups left after Sweep: %v", cg)
	}
	// A second sweep finds nothing, and the Manager runs again.
	if ids, err := m.Sweep(context.Background()); len(ids) != 0 || err != nil {
		t.Errorf("second Sweep: %v %v", ids, err)
	}
	if res, _ := MustRun(t, m, sandbox.Spec{ID: "orphan", Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("run after sweep: %+v", res)
	}
}

// cgroupsNamed lists the cgroup directories named name (see
// Manager.CgroupName), under this process's own cgroups or at the root.
func cgroupsNamed(t *testing.T, name string) []string {
	t.Helper()
	var found []string
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	found = append(found, matches...)
	matches, _ = filepath.Glob("/sys/fs/cgroup/" + name)
	found = append(found, matches...)
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", parts[2], name))
		found = append(found, m...)
	}
	return found
}

// TestSweepPartialCgroup sweeps what a supervisor killed while
// libcontainer made a container leaves: a state directory without state,
// and the container's cgroup in one hierarchy only.
func TestSweepPartialCgroup(t *testing.T) {
	m := MustManager(t)
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var dir string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case parts[0] == "0" && parts[1] == "" && cgroups.IsCgroup2UnifiedMode():
			dir = filepath.Join("/sys/fs/cgroup", parts[2], m.CgroupName("partial"))
		case slices.Contains(strings.Split(parts[1], ","), "cpuset"):
			dir = filepath.Join("/sys/fs/cgroup/cpuset", parts[2], m.CgroupName("partial"))
		}
	}
	if dir == "" {
		t.Skip("no cpuset hierarchy or unified cgroup found")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	if err := os.MkdirAll(filepath.Join(m.StateDir, "containers", "partial"), 0o700); err != nil {
		t.Fatal(err)
	}
	ids, err := m.Sweep(context.Background())
	if err != nil || !slices.Equal(ids, []string{"partial"}) {
		t.Fatalf("Sweep: %v %v, want [partial]", ids, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the partial cgroup %s is still there: %v", dir, err)
	}
}

// TestSweepLive sweeps a container whose processes are alive (as after a
// supervisor death that the parent-death signal did not cover).
func TestSweepLive(t *testing.T) {
	m := MustManager(t)
	mk := marker()
	started := make(chan struct{})
	done := make(chan sandbox.Result)
	go func() {
		var once sync.Once
		res, err := m.Run(context.Background(), sandbox.Spec{ID: "live", Argv: sh(fmt.Sprintf("sleep %s & echo up; wait", mk))}, func(sandbox.Event) { once.Do(func() { close(started) }) })
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-started
	if len(cgroupsNamed(t, m.CgroupName("live"))) == 0 {
		t.Error("cannot see the running container's cgroups: the check below proves nothing")
	}
	other := &sandbox.Manager{StateDir: m.StateDir}
	ids, err := other.Sweep(context.Background())
	if err != nil || !slices.Equal(ids, []string{"live"}) {
		t.Errorf("Sweep: %v %v, want [live]", ids, err)
	}
	select {
	case res := <-done:
		if res.Signal != syscall.SIGKILL {
			t.Errorf("swept run: %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its container was swept")
	}
	if left := hostProcs(t, mk); len(left) > 0 {
		t.Errorf("processes left after Sweep: %v", left)
	}
	if cg := cgroupsNamed(t, m.CgroupName("live")); len(cg) > 0 {
		t.Errorf("cgroups left after Sweep: %v", cg)
	}
}

func TestCustomRootfs(t *testing.T) {
	m := MustManager(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build a static binary for the root")
	}
	src, root := t.TempDir(), t.TempDir()
	// The container's root mounts its root from inside its user
	// namespace: every directory above must be searchable by others.
	// Nor can it make the mount points in a root that host root owns.
	if err := os.Chmod(filepath.Dir(root), 0o711); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "workspace"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	prog := `package main

import (
	"fmt"
	"os"
)

func main() {
	ents, _ := os.ReadDir("/")
	for _, e := range ents {
		fmt.Print(e.Name(), " ")
	}
	fmt.Println()
	if err := os.WriteFile("/x", nil, 0o644); err == nil {
		fmt.Println("root is writable")
	}
	if err := os.WriteFile("/tmp/x", nil, 0o644); err != nil {
		fmt.Println("tmp:", err)
	}
}
`
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module rootprobe\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644)
	build := exec.Command(goBin, "build", "-o", filepath.Join(root, "probe"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	res, o := MustRun(t, m, sandbox.Spec{Rootfs: root, Argv: []string{"/probe"}})
	// Only the probe and the mount points the container needs: no host
	// directories are bound into a custom root.
	if got, want := o.stream(sandbox.Stdout), "dev probe proc sys tmp workspace \n"; res.ExitCode != 0 || got != want {
		t.Errorf("stdout %q (exit %d, stderr %q), want %q", got, res.ExitCode, o.stream(sandbox.Stderr), want)
	}
}

// TestSealedBinary checks that Init re-executed the test binary from a
// sealed memfd copy (so libcontainer reuses it for every container instead
// of copying the binary per start) and left no trace in the environment.
func TestSealedBinary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root seals")
	}
	link, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, "/memfd:") {
		t.Fatalf("/proc/self/exe is %s, want a sealed memfd", link)
	}
	f, err := os.OpenFile("/proc/self/exe", os.O_RDWR, 0)
	if err == nil {
		f.Close()
		t.Fatal("the sealed binary opened for writing")
	}
	if v, ok := os.LookupEnv("COMPUTERD_SANDBOX_SEALED"); ok {
		t.Fatalf("COMPUTERD_SANDBOX_SEALED=%q left in the environment", v)
	}
}

package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	agentcmd "computerd/agentctl/command"
	"computerd/client"
	daemoncmd "computerd/computerd/command"
	"computerd/computerd/daemon"
	"computerd/computerd/sandbox"
	"computerd/core"
	"computerd/wire"
)

// TestMain lets the test binary play a computerd process: with
// COMPUTERD_TEST_SERVE=DIR it serves DIR on a random port and exits; with
// COMPUTERD_TEST_RUN=ARGS (split by \x1f) it runs computerd with ARGS. With
// AGENTCTL_TEST=1 it is agentctl, run with its arguments.
func TestMain(m *testing.M) {
	if os.Getenv("AGENTCTL_TEST") == "1" {
		// Play agentctl, as a process a test can kill (and --detach can
		// start again), before the sandbox's init could re-execute it.
		os.Exit(agentcmd.Main(context.Background(), append([]string{"agentctl"}, os.Args[1:]...),
			agentcmd.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	sandbox.Init() // the test binary is also the containers' init
	if run := os.Getenv("COMPUTERD_TEST_RUN"); run != "" {
		if err := daemoncmd.Run(context.Background(), strings.Split(run, "\x1f"), os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "computerd:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if dir := os.Getenv("COMPUTERD_TEST_SERVE"); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		args := []string{"computerd", "serve", "--data", dir, "--listen", "127.0.0.1:0", "--metrics-listen", ""}
		if extra := os.Getenv("COMPUTERD_TEST_ARGS"); extra != "" {
			args = append(args, strings.Split(extra, "\x1f")...)
		}
		err := daemoncmd.Run(ctx, args, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "computerd:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Geteuid() == 0 {
		// Containers run from computerd-sandbox, as under `make build`.
		dir, err := os.MkdirTemp("", "computerd-sandbox-")
		if err == nil {
			p := filepath.Join(dir, "computerd-sandbox")
			if out, err := exec.Command("go", "build", "-o", p, "computerd/computerd/sandboxd").CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "go build computerd-sandbox: %v\n%s", err, out)
				os.Exit(1)
			}
			sandboxHelper = p
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// sandboxHelper is the computerd-sandbox binary the daemons of these tests
// run their containers with ("" when not root).
var sandboxHelper string

// child is a computerd process serving dir.
type child struct {
	cmd     *exec.Cmd
	url     string
	metrics string // "" unless started with --metrics-listen
	said    *lastLines
}

// lastLines keeps the last lines a child wrote to its stderr.
type lastLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lastLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lines = append(l.lines, line); len(l.lines) > 200 {
		l.lines = l.lines[1:]
	}
}

// String is the lines, the last n of them at most.
func (l *lastLines) last(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(len(l.lines)-n, 0):], "\n")
}

var (
	servingRE = regexp.MustCompile(`api=(https?://\S+)`)
	metricsRE = regexp.MustCompile(`metrics=(http://\S+)`)
)

// startChild starts a computerd process on dir (with extra serve flags,
// which override the defaults) and waits until it serves.
func startChild(t *testing.T, dir string, extra ...string) *child {
	t.Helper()
	return startChildEnv(t, dir, nil, extra...)
}

// startChildEnv is startChild with env added to the process's environment.
func startChildEnv(t *testing.T, dir string, env []string, extra ...string) *child {
	t.Helper()
	if sandboxHelper != "" {
		extra = append([]string{"--sandbox-helper", sandboxHelper}, extra...)
	}
	env = append(env, "COMPUTERD_TEST_SERVE="+dir, "COMPUTERD_TEST_ARGS="+strings.Join(extra, "\x1f"))
	return startProcess(t, dir, env)
}

// startProcess starts this test binary with env added to its environment
// (COMPUTERD_TEST_SERVE or COMPUTERD_TEST_RUN making it a computerd serving
// dir) and waits until it serves; the test's cleanup ends it.
func startProcess(t *testing.T, dir string, env []string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		// A computerd killed with SIGKILL leaves the state and cgroups of
		// its containers (its warm ones at least) to its next start's
		// sweep: when there is none, the test sweeps.
		m := &sandbox.Manager{StateDir: daemon.SandboxStateDir(dir)}
		if _, err := m.Sweep(context.Background()); err != nil {
			t.Errorf("sweep after computerd %s: %v", dir, err)
		}
		if err := daemon.CleanupMounts(dir); err != nil {
			t.Errorf("mounts after computerd %s: %v", dir, err)
		}
	})
	urls := make(chan *child, 1)
	said := &lastLines{} // what it said: for a start that fails, and tests that ask
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			said.add(sc.Text())
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				c := &child{cmd: cmd, url: m[1], said: said}
				if mm := metricsRE.FindStringSubmatch(sc.Text()); mm != nil {
					c.metrics = mm[1]
				}
				select {
				case urls <- c:
				default:
				}
			}
		}
	}()
	select {
	case c := <-urls:
		return c
	case <-time.After(20 * time.Second):
		t.Fatalf("computerd child did not start serving; it said:\n%s", said.last(20))
		return nil
	}
}

// writeStream writes files through the API until it fails, recording each
// acknowledged write's content.
func writeStream(cl *client.Client, ws string, acked map[string]string, mu *sync.Mutex, round int) {
	for i := 0; ; i++ {
		p := fmt.Sprintf("r%d/f%05d", round, i)
		content := strings.Repeat(fmt.Sprintf("%s ", p), 1+i%50)
		if _, err := cl.Write(context.Background(), ws, p, strings.NewReader(content), client.WriteOptions{}); err != nil {
			return
		}
		mu.Lock()
		acked[p] = content
		mu.Unlock()
	}
}

// checkAcked reads every acknowledged write back from a fresh process.
func checkAcked(t *testing.T, cl *client.Client, ws string, acked map[string]string) {
	t.Helper()
	for p, want := range acked {
		r, err := cl.Read(context.Background(), ws, p, client.ReadOptions{})
		if err != nil {
			t.Fatalf("acknowledged write %s lost: %v", p, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(got) != want {
			t.Fatalf("acknowledged write %s reads %q (%v), want %q", p, got, err, want)
		}
	}
}

// TestKill9 kills a computerd process with SIGKILL during a stream of
// writes, restarts it, and checks that every acknowledged write is there.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	token := tokenFor(t, dir, "alice")
	acked := map[string]string{}
	var mu sync.Mutex
	for round := range 4 {
		c := startChild(t, dir)
		cl := client.New(c.url, token)
		if round == 0 {
			if _, err := cl.CreateWorkspace(context.Background(), "w"); err != nil {
				t.Fatal(err)
			}
		}
		checkAcked(t, cl, "w", acked)
		done := make(chan struct{})
		go func() { writeStream(cl, "w", acked, &mu, round); close(done) }()
		time.Sleep(time.Duration(300+200*round) * time.Millisecond)
		c.cmd.Process.Signal(syscall.SIGKILL)
		c.cmd.Wait()
		<-done
	}
	c := startChild(t, dir)
	checkAcked(t, client.New(c.url, token), "w", acked)
	if len(acked) < 20 {
		t.Fatalf("only %d writes acknowledged: the test did not exercise much", len(acked))
	}
	t.Logf("%d acknowledged writes survived 4 kills", len(acked))
}

// TestGracefulShutdown stops a computerd process with SIGTERM during writes:
// it exits cleanly, and every acknowledged write is there after a restart.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	token := tokenFor(t, dir, "alice")
	c := startChild(t, dir)
	cl := client.New(c.url, token)
	if _, err := cl.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() { writeStream(cl, "w", acked, &mu, 0); close(done) }()
	time.Sleep(300 * time.Millisecond)
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("computerd after SIGTERM: %v, want a clean exit", err)
	}
	<-done
	c2 := startChild(t, dir)
	checkAcked(t, client.New(c2.url, token), "w", acked)
	if len(acked) == 0 {
		t.Fatal("no write was acknowledged")
	}
}

// tokenFor creates a token in dir through `computerd token create`, with
// scopes; --init makes the store when computerd has not run there yet.
func tokenFor(t *testing.T, dir, tenant string, scopes ...string) string {
	t.Helper()
	var out strings.Builder
	args := []string{"computerd", "token", "create", "--init", "--data", dir}
	for _, sc := range scopes {
		args = append(args, "--scope", sc)
	}
	if err := daemoncmd.Run(context.Background(), append(args, tenant), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out.String())
}

// SIGTERM waits for work in flight; a second SIGTERM ends the process at
// once; the next start recovers (the running exec is interrupted, nothing
// acknowledged is lost).
func TestSecondSignalAborts(t *testing.T) {
	needExec(t)
	dir := t.TempDir()
	token := tokenFor(t, dir, "alice")
	c := startChild(t, dir)
	cl := client.New(c.url, token)
	if _, err := cl.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Write(context.Background(), "w", "kept.txt", strings.NewReader("acknowledged\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo up; sleep 1012"}}, func(ev wire.ExecEvent) error {
		if strings.Contains(ev.Data, "up") {
			close(started)
		}
		return nil
	})
	<-started
	exited := make(chan error, 1)
	c.cmd.Process.Signal(syscall.SIGTERM)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("computerd exited (%v) on the first SIGTERM while an exec was running", err)
	case <-time.After(time.Second):
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err == nil {
			t.Fatal("the second SIGTERM ended computerd with status 0; want the signal's default action")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second SIGTERM did not end computerd")
	}
	c2 := startChild(t, dir)
	cl2 := client.New(c2.url, token)
	if got, _ := readAll(cl2, "w", "kept.txt"); got != "acknowledged\n" {
		t.Fatalf("kept.txt after the abort: %q", got)
	}
	list, err := cl2.Execs(context.Background(), "w", 0)
	if err != nil || len(list) != 1 || list[0].State != core.ExecInterrupted {
		t.Fatalf("exec after the abort: %+v %v", list, err)
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 1012").Output(); len(out) > 0 {
		t.Fatalf("the container outlived the aborted computerd: %s", out)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	agentcmd "computerd/agentctl/command"
	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/wire"
)

// needExec skips when this machine cannot run sandboxes (not root, no FUSE).
func needExec(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("exec needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("exec needs /dev/fuse")
	}
}

// execResult runs agentctl exec and returns stdout, stderr and the exit status.
func (e *env) exec(args ...string) (string, string, int) {
	e.t.Helper()
	out, errs, err := e.run(nil, append([]string{"exec"}, args...)...)
	var ee *agentcmd.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatalf("agentctl exec %v: %v (%s)", args, err, errs)
	}
	return out, errs, agentcmd.ExitStatus(err)
}

func TestExecBasics(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "in.txt", "input\n")
	e.write("w", "gone.txt", "x")
	head := e.head("w")

	// Output, exit status, one revision with exactly the command's changes.
	out, _, code := e.exec("w", "--", "sh", "-c", "cat in.txt; echo made > out.txt; rm gone.txt; echo oops >&2; exit 3")
	if out != "input\n" || code != 3 {
		t.Fatalf("exec: %q, status %d", out, code)
	}
	if e.head("w") != head+1 {
		t.Fatalf("head %d after one exec from %d", e.head("w"), head)
	}
	if sandboxHelper != "" && !processRunning(sandboxHelper) {
		t.Fatalf("no %s process: the exec did not run through the helper", sandboxHelper)
	}
	tree := e.tree("w")
	if tree["out.txt"] != "made\n" || tree["gone.txt"] != "" || tree["in.txt"] != "input\n" {
		t.Fatalf("tree after exec: %v", tree)
	}
	var revs []core.Revision
	json.Unmarshal([]byte(e.ok("log", "w", "--json", "-n", "1")), &revs)
	if revs[0].Source != core.SourceExec || revs[0].ExecID == "" || revs[0].Changes < 2 {
		t.Fatalf("exec revision: %+v", revs[0])
	}
	// A command that changes nothing makes no revision.
	if _, _, code := e.exec("w", "--shell", "ls -la >/dev/null"); code != 0 || e.head("w") != head+1 {
		t.Fatalf("read-only exec: status %d, head %d", code, e.head("w"))
	}
	// A child's death by signal shows in the shell's status.
	if _, _, code := e.exec("w", "--shell", "sh -c 'kill -9 $$'"); code != 137 {
		t.Fatalf("killed command: status %d, want 137", code)
	}
	// cwd, env, stdin; the host's environment does not leak in.
	os.Setenv("COMPUTERD_TEST_SECRET", "hunter2")
	defer os.Unsetenv("COMPUTERD_TEST_SECRET")
	e.ok("mkdir", "w", "sub")
	out, _, code = e.runExecStdin("hello stdin", "w", "--cwd", "sub", "-e", "GREETING=hi", "-i", "--", "sh", "-c", "pwd; echo $GREETING; cat; env")
	if code != 0 || !strings.HasPrefix(out, "/workspace/sub\nhi\nhello stdin") || strings.Contains(out, "hunter2") {
		t.Fatalf("cwd/env/stdin: status %d\n%s", code, out)
	}
	// Read-only system, no network.
	if _, _, code := e.exec("w", "--shell", "touch /usr/computerd-test"); code == 0 {
		t.Fatal("/usr is writable in the sandbox")
	}
	// No network: neither the internet nor a listener on the host's own
	// address (exit 7 means the connection failed; anything else is wrong).
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	target := "1.1.1.1:53"
	if ip := hostIP(); ip != "" {
		target = net.JoinHostPort(ip, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	}
	host, port, _ := net.SplitHostPort(target)
	script := fmt.Sprintf("import socket, sys\ntry:\n    socket.create_connection((%q, %s), timeout=3)\nexcept OSError:\n    sys.exit(7)\n", host, port)
	if _, _, code := e.exec("w", "--", "python3", "-c", script); code != 7 {
		t.Fatalf("network probe to %s: status %d, want 7 (connection refused inside the sandbox)", target, code)
	}
	// The journal lists them all.
	var list []core.Exec
	if err := json.Unmarshal([]byte(e.ok("execs", "w", "--json")), &list); err != nil || len(list) != 6 {
		t.Fatalf("execs: %d %v", len(list), err)
	}
	if list[len(list)-1].ExitCode != 3 || list[len(list)-1].Rev != head+1 || list[len(list)-1].State != core.ExecExited {
		t.Fatalf("first exec's record: %+v", list[len(list)-1])
	}
	e.fails("w", "usage: agentctl exec", "exec", "w", "--shell", "")
	// A command that is not there fails like a shell's: 127, state failed.
	if _, errs, code := e.exec("w", "--", "no-such-command"); code != 127 || !strings.Contains(errs, "no-such-command") {
		t.Fatalf("missing command: status %d, stderr %q", code, errs)
	}
	e.fails("w", "invalid path", "exec", "w", "--cwd", "../..", "--", "true")
}

// agentctl kill ends a running exec; it reports the signal and 128+9.
func TestExecKill(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	done := make(chan core.Exec)
	wrote := make(chan struct{}, 1)
	go func() {
		rec, _ := cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo hi > f.txt; echo wrote; sleep 1009"}}, func(ev wire.ExecEvent) error {
			if strings.Contains(string(ev.Bytes()), "wrote") {
				wrote <- struct{}{}
			}
			return nil
		})
		done <- rec
	}()
	var id string
	for range 100 {
		if list, _ := cl.Execs(context.Background(), "w", 1); len(list) == 1 {
			id = list[0].ID
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-wrote: // the write happened: the kill comes during the sleep
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not write in 20 s")
	}
	e.ok("kill", "w", id)
	select {
	case rec := <-done:
		if rec.State != core.ExecKilled || rec.Signal != "SIGKILL" || rec.ExitCode != 137 || rec.Rev == 0 {
			t.Fatalf("killed exec: %+v", rec)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("kill did not end the exec")
	}
	if e.tree("w")["f.txt"] != "hi\n" {
		t.Fatal("a killed exec's writes were not committed")
	}
	e.fails("w", "not running", "kill", "w", id)
}

// hostIP returns a non-loopback IPv4 address of this host, or "".
func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

func (e *env) runExecStdin(stdin string, args ...string) (string, string, int) {
	e.t.Helper()
	out, errs, err := e.run(strings.NewReader(stdin), append([]string{"exec"}, args...)...)
	var ee *agentcmd.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatalf("agentctl exec %v: %v (%s)", args, err, errs)
	}
	return out, errs, agentcmd.ExitStatus(err)
}

// The first line of a slow command arrives long before the command ends.
func TestExecStreams(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	begin := time.Now()
	var first time.Duration
	var lines []string
	rec, err := cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sh", "-c", "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done"}},
		func(ev wire.ExecEvent) error {
			if ev.Type == "output" {
				if first == 0 {
					first = time.Since(begin)
				}
				lines = append(lines, ev.Data)
			}
			return nil
		})
	total := time.Since(begin)
	if err != nil || rec.ExitCode != 0 {
		t.Fatal(rec, err)
	}
	if strings.Join(lines, "") != "line1\nline2\nline3\nline4\nline5\n" {
		t.Fatalf("lines: %q", lines)
	}
	if total < 800*time.Millisecond || first > total-600*time.Millisecond {
		t.Fatalf("first line after %v of %v: not streamed", first, total)
	}
	t.Logf("first line after %v, end after %v", first, total)
}

// A timeout kills every process of the command, and the caller gets an answer.
func TestExecTimeoutKillsTree(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	begin := time.Now()
	_, errs, code := e.exec("w", "--timeout", "1s", "--shell", "sleep 1007 & sleep 1007 & (setsid sleep 1007 &) ; echo started; wait")
	if code != 137 || time.Since(begin) > 15*time.Second || !strings.Contains(errs, "timed out") {
		t.Fatalf("timeout: status %d after %v (%s)", code, time.Since(begin), errs)
	}
	time.Sleep(200 * time.Millisecond)
	if out, _ := exec.Command("pgrep", "-f", "sleep 1007").Output(); len(out) > 0 {
		t.Fatalf("processes survived the timeout: %s", out)
	}
	var list []core.Exec
	json.Unmarshal([]byte(e.ok("execs", "w", "--json")), &list)
	if list[0].State != core.ExecTimeout || !list[0].TimedOut {
		t.Fatalf("journal: %+v", list[0])
	}
}

// A retry with the same key returns the recorded result and runs nothing.
func TestExecIdempotencyKey(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	script := "n=$(cat /proc/sys/kernel/random/uuid); echo $n > run-$n.txt; echo $n"
	out1, _, code := e.exec("w", "--key", "k1", "--shell", script)
	head := e.head("w")
	out2, _, code2 := e.exec("w", "--key", "k1", "--shell", script)
	if code != 0 || code2 != 0 || out1 != out2 || out1 == "" {
		t.Fatalf("retry with the same key: %q (%d) then %q (%d)", out1, code, out2, code2)
	}
	if e.head("w") != head {
		t.Fatal("a retried exec committed again")
	}
	out3, _, _ := e.exec("w", "--key", "k2", "--shell", script)
	if out3 == out1 {
		t.Fatal("a new key did not run the command")
	}
	// A retry while the first is still running attaches to it.
	cl := client.New(e.d.URL(), e.token)
	var wg sync.WaitGroup
	recs := make([]core.Exec, 2)
	outs := make([]string, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b strings.Builder
			recs[i], _ = cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.5; " + script}, Key: "slow"},
				func(ev wire.ExecEvent) error { b.WriteString(ev.Data); return nil })
			outs[i] = b.String()
		}()
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if recs[0].ID == "" || recs[0].ID != recs[1].ID || outs[0] != outs[1] {
		t.Fatalf("concurrent retries: %s %q / %s %q", recs[0].ID, outs[0], recs[1].ID, outs[1])
	}
}

// An exec whose paths changed meanwhile through the API reports the
// conflict, and both versions stay retrievable.
func TestExecConflict(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "f.txt", "base\n")
	cl := client.New(e.d.URL(), e.token)
	done := make(chan core.Exec)
	go func() {
		rec, _ := cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo exec > f.txt"}}, nil)
		done <- rec
	}()
	time.Sleep(300 * time.Millisecond)
	e.write("w", "f.txt", "api\n")
	rec := <-done
	if len(rec.Conflict) != 1 || rec.Conflict[0] != "f.txt" || rec.KeptAs == "" || rec.Rev != 0 {
		t.Fatalf("conflicting exec: %+v", rec)
	}
	if got := e.tree("w")["f.txt"]; got != "api\n" {
		t.Fatalf("home's f.txt = %q", got)
	}
	if got := e.ok("read", rec.KeptAs, "f.txt"); got != "exec\n" {
		t.Fatalf("kept version %s: %q", rec.KeptAs, got)
	}
}

// Several execs at once, on one workspace and on two.
func TestExecConcurrent(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "a")
	e.ok("ws", "create", "b")
	cl := client.New(e.d.URL(), e.token)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		ws := []string{"a", "b"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := cl.Exec(context.Background(), ws, wire.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d > f%d.txt; sleep 0.3", i, i)}}, nil)
			if err == nil && (rec.ExitCode != 0 || rec.Rev == 0) {
				err = fmt.Errorf("exec %d: %+v", i, rec)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if a, b := e.tree("a"), e.tree("b"); len(a) != 4 || len(b) != 4 || a["f0.txt"] != "0\n" || b["f7.txt"] != "7\n" {
		t.Fatalf("trees: %v %v", a, b)
	}
}

// git and go build work in /workspace.
func TestExecRealTools(t *testing.T) {
	needExec(t)
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Skip("no Go at /usr/local/go")
	}
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "go.mod", "module hello\n\ngo 1.22\n")
	e.write("w", "main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from the sandbox\") }\n")
	out, errs, code := e.exec("w", "--timeout", "5m", "-e", "PATH=/usr/local/go/bin:/usr/bin:/bin", "-e", "GOCACHE=/tmp/gocache", "-e", "HOME=/tmp",
		"--shell", "git init -q && git add -A && git -c user.email=a@b -c user.name=a commit -qm init && go build -o hello . && ./hello && git status --short")
	if code != 0 || !strings.Contains(out, "hello from the sandbox") {
		t.Fatalf("git + go build: status %d\n%s\n%s", code, out, errs)
	}
	tree := e.tree("w")
	if _, ok := tree["hello"]; !ok || tree[".git/HEAD"] == "" {
		t.Fatal("the build's outputs were not committed")
	}
}

// kill -9 of computerd during a command: the next start kills the
// container, marks the exec interrupted and keeps what it had written.
func TestExecCrashRecovery(t *testing.T) {
	needExec(t)
	dir := t.TempDir()
	token := tokenFor(t, dir, "alice")
	c := startChild(t, dir)
	cl := client.New(c.url, token)
	if _, err := cl.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	argv := []string{"sh", "-c", "echo partial > p.txt; sync p.txt; echo written; sleep 1008"}
	go cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: argv, Key: "k1"},
		func(ev wire.ExecEvent) error {
			if strings.Contains(ev.Data, "written") {
				close(started)
			}
			return nil
		})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not start")
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
	c2 := startChild(t, dir)
	cl2 := client.New(c2.url, token)
	if out, _ := exec.Command("pgrep", "-f", "sleep 1008").Output(); len(out) > 0 {
		t.Fatalf("the container survived the restart: %s", out)
	}
	list, err := cl2.Execs(context.Background(), "w", 0)
	if err != nil || len(list) != 1 || list[0].State != core.ExecInterrupted {
		t.Fatalf("journal after restart: %+v %v", list, err)
	}
	r, err := cl2.Read(context.Background(), "w", "p.txt", client.ReadOptions{})
	if err != nil {
		t.Fatalf("the interrupted exec's write was lost: %v", err)
	}
	r.Close()
	revs, _ := cl2.Log(context.Background(), "w", 1)
	if revs[0].Source != core.SourceInterrupted || revs[0].ExecID != list[0].ID {
		t.Fatalf("interrupted revision: %+v", revs[0])
	}
	// The retry with its key gets the record, and agentctl exec does not
	// report it as a success: the command's status is unknown.
	var stdout, stderr strings.Builder
	err = agentcmd.Run(context.Background(), append([]string{"agentctl", "--server", c2.url, "--token-file", tokenFile(t, token), "exec", "w", "--key", "k1", "--"}, argv...),
		agentcmd.IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
	if code := agentcmd.ExitStatus(err); code != agentcmd.ExitUnfinished || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("agentctl exec retried after the crash: status %d, stderr %q; want %d and a note", code, stderr.String(), agentcmd.ExitUnfinished)
	}
}

// A client that goes away does not end the command: it runs to its end and
// its result and writes are recorded.
func TestExecClientDisconnects(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := cl.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo finished > f.txt"}}, nil)
	if err == nil {
		t.Fatal("the client's deadline did not cut the stream")
	}
	eventually(t, "the exec finishes without its client", func() bool {
		list, _ := cl.Execs(context.Background(), "w", 0)
		return len(list) == 1 && list[0].State == core.ExecExited && list[0].Rev > 0
	})
	if got := e.tree("w")["f.txt"]; got != "finished\n" {
		t.Fatalf("f.txt = %q", got)
	}
	// Its events can be read again afterwards.
	list, _ := cl.Execs(context.Background(), "w", 0)
	if out := e.ok("exec-log", "w", list[0].ID); out != "" {
		t.Fatalf("exec-log printed %q for a silent command", out)
	}
}

// processRunning reports whether a process runs the binary at path.
func processRunning(path string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), path+"\x00") {
			return true
		}
	}
	return false
}

// TestExecMetrics checks the exec metrics: count by outcome, start
// latency and duration, execs running now, and the kind of container
// (warm ones come from the pool a daemon keeps by default).
func TestExecMetrics(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	url := e.d.MetricsURL()
	const n = 5
	for range n {
		if _, _, code := e.exec("w", "--", "true"); code != 0 {
			t.Fatalf("true: status %d", code)
		}
		time.Sleep(100 * time.Millisecond) // the pool refills
	}
	if _, _, code := e.exec("w", "--", "false"); code != 1 {
		t.Fatalf("false: status %d", code)
	}
	if _, _, code := e.exec("w", "--", "no-such-command"); code != 127 {
		t.Fatalf("missing command: status %d", code)
	}
	warm := metric(t, url, `computerd_exec_containers_total{kind="warm"}`)
	made := metric(t, url, `computerd_exec_containers_total{kind="new"}`)
	for name, want := range map[string]float64{
		`computerd_execs_total{outcome="exited"}`: n + 1,
		`computerd_execs_total{outcome="failed"}`: 1,
		`computerd_exec_start_seconds_count`:      n + 1,
		`computerd_exec_duration_seconds_count`:   n + 2,
		`computerd_execs_running`:                 0,
	} {
		if got := metric(t, url, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// The commands that ran: all but the first (the pool may still have been
	// filling) in warm containers.
	if warm+made != n+1 || warm < n {
		t.Errorf("containers: %v warm, %v new, want %d in all and at least %d warm", warm, made, n+1, n)
	}

	// An exec in flight counts as running.
	cl := client.New(e.d.URL(), e.token)
	done := make(chan error, 1)
	go func() {
		_, err := cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sleep", "1"}}, nil)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for metric(t, url, "computerd_execs_running") != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := metric(t, url, "computerd_execs_running"); got != 1 {
		t.Errorf("computerd_execs_running = %v during an exec, want 1", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestExecShelf: an exec on an unchanged head gets the overlay of the
// previous exec if that one left no trace in it
// (computerd_exec_workspaces_total{kind="shelved"}), and every exec sees
// exactly its revision, whichever overlay it got.
func TestExecShelf(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "a.txt", "one\n")
	url := e.d.MetricsURL()
	// An exec answers before its overlay is shelved (or taken down):
	// wait for the shelf to hold what it should before the next one.
	shelved := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for metric(t, url, "computerd_exec_workspaces_shelved") != want {
			if time.Now().After(deadline) {
				t.Fatalf("computerd_exec_workspaces_shelved = %v, want %v", metric(t, url, "computerd_exec_workspaces_shelved"), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cat := func(want string, shelf float64) {
		t.Helper()
		if out, errs, code := e.exec("w", "--", "cat", "a.txt"); out != want || code != 0 {
			t.Fatalf("cat a.txt: %q (%s), status %d, want %q", out, errs, code, want)
		}
		shelved(shelf)
	}
	cat("one\n", 1) // new, then shelved
	cat("one\n", 1) // shelved, and shelved again
	head := e.head("w")
	// A file made and removed commits nothing but leaves its trace: that
	// overlay is not shelved, and the next exec does not see the file.
	if _, errs, code := e.exec("w", "--", "sh", "-c", "touch t && rm t && mkdir -p /workspace/d && rmdir /workspace/d"); code != 0 {
		t.Fatalf("touch and rm: status %d (%s)", code, errs)
	}
	shelved(0)
	if e.head("w") != head {
		t.Fatalf("head %d after an exec that changed nothing, want %d", e.head("w"), head)
	}
	cat("one\n", 1) // new
	e.write("w", "a.txt", "two\n")
	shelved(0)      // the new head drops the overlay of the old one
	cat("two\n", 1) // new: the head moved
	if _, errs, code := e.exec("w", "--", "sh", "-c", "echo three > a.txt"); code != 0 {
		t.Fatalf("write: status %d (%s)", code, errs)
	}
	shelved(0)
	cat("three\n", 1) // new: the head moved
	for name, want := range map[string]float64{
		`computerd_exec_workspaces_total{kind="shelved"}`: 3,
		`computerd_exec_workspaces_total{kind="new"}`:     4,
	} {
		if got := metric(t, url, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

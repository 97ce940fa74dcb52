package integration

import (
	"context"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"computerd/client"
	"computerd/core"
	"computerd/wire"
)

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// metric reads one unlabelled or fully labelled sample from a /metrics page.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(scrape(t, url))
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// homeAndExecutor starts a home and an executor process (separate data dirs).
func homeAndExecutor(t *testing.T, homeAddr string) (home, ex *child, homeDir, token string) {
	t.Helper()
	homeDir = t.TempDir()
	token = tokenFor(t, homeDir, "alice")
	home = startChild(t, homeDir, "--listen", homeAddr)
	ex = startChild(t, t.TempDir(), "--home", home.url, "--token-file", tokenFile(t, token), "--metrics-listen", "127.0.0.1:0")
	return home, ex, homeDir, token
}

func TestExecutor(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	home, ex, _, token := homeAndExecutor(t, "127.0.0.1:0")
	hc, xc := client.New(home.url, token), client.New(ex.url, token)

	// File tools through the executor reach the home.
	if _, err := xc.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := xc.Write(ctx, "w", "in.txt", strings.NewReader("from the home\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Stat(ctx, "w", "in.txt", 0); err != nil {
		t.Fatalf("a write through the executor is not at the home: %v", err)
	}
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	if _, err := hc.Write(ctx, "w", "big.bin", strings.NewReader(big), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// An exec through the executor sees the home's head and lands at the home.
	var out strings.Builder
	rec, err := xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "cat in.txt; wc -c < big.bin; echo made > out.txt"}},
		func(ev wire.ExecEvent) error { out.WriteString(ev.Data); return nil })
	if err != nil || rec.ExitCode != 0 || out.String() != "from the home\n1048576\n" || rec.Rev == 0 {
		t.Fatalf("exec through the executor: %+v %v %q", rec, err, out.String())
	}
	revs, _ := hc.Log(ctx, "w", 1)
	if revs[0].Rev != rec.Rev || revs[0].Source != core.SourceExec || revs[0].ExecID != rec.ID {
		t.Fatalf("home's revision for the exec: %+v (exec %+v)", revs[0], rec)
	}
	if got, _ := readAll(hc, "w", "out.txt"); got != "made\n" {
		t.Fatalf("home's out.txt: %q", got)
	}
	// A second exec pulls only what changed since.
	pulled := metric(t, ex.metrics, `computerd_sync_bytes_total{direction="pull"}`)
	hc.Write(ctx, "w", "in.txt", strings.NewReader("changed\n"), client.WriteOptions{})
	if _, err := xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"cat", "in.txt"}}, nil); err != nil {
		t.Fatal(err)
	}
	if moved := metric(t, ex.metrics, `computerd_sync_bytes_total{direction="pull"}`) - pulled; moved > 2*8+1024 || moved < 8 {
		t.Fatalf("second pull moved %v bytes after an 8-byte change", moved)
	}
	// A conflict between an API write at the home and an exec at the
	// executor: the home keeps the exec's changes in a copy itself.
	base := mustHead(t, hc, "w")
	done := make(chan core.Exec)
	go func() {
		rec, _ := xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo exec > in.txt; echo new > new.txt"}}, nil)
		done <- rec
	}()
	time.Sleep(500 * time.Millisecond)
	hc.Write(ctx, "w", "in.txt", strings.NewReader("api\n"), client.WriteOptions{})
	rec = <-done
	if len(rec.Conflict) != 1 || rec.Conflict[0] != "in.txt" || rec.KeptAs != "w.conflict-"+rec.ID || rec.State != core.ExecExited {
		t.Fatalf("conflicting exec: %+v", rec)
	}
	if got, _ := readAll(hc, "w", "in.txt"); got != "api\n" {
		t.Fatalf("home's in.txt after the conflict: %q", got)
	}
	if _, err := hc.Stat(ctx, "w", "new.txt", 0); err == nil {
		t.Fatal("a conflicting exec's new file reached the home's workspace")
	}
	// The copy is the workspace at the exec's base plus exactly its changes.
	copyWS, err := hc.Workspace(ctx, rec.KeptAs)
	if err != nil || copyWS.BaseRev != base || copyWS.Head != 2 {
		t.Fatalf("the exec's copy at the home: %+v %v (exec based on home@%d)", copyWS, err, base)
	}
	for p, want := range map[string]string{"in.txt": "exec\n", "new.txt": "new\n", "out.txt": "made\n"} {
		if got, err := readAll(hc, rec.KeptAs, p); err != nil || got != want {
			t.Fatalf("the exec's version at the home (%s/%s): %q %v, want %q", rec.KeptAs, p, got, err, want)
		}
	}
	if revs, _ := hc.Log(ctx, rec.KeptAs, 1); revs[0].ExecID != rec.ID || revs[0].Source != core.SourceExec {
		t.Fatalf("the copy's revision: %+v", revs[0])
	}
	list, err := xc.Execs(ctx, "w", 0)
	if err != nil || len(list) != 3 {
		t.Fatalf("execs at the executor: %d %v", len(list), err)
	}
	// Another tenant's token is refused by the executor.
	bob := tokenFor(t, t.TempDir(), "bob")
	if _, err := client.New(ex.url, bob).Exec(ctx, "w", wire.ExecRequest{Argv: []string{"true"}}, nil); err == nil {
		t.Fatal("the executor ran a command for an unknown token")
	}
}

func readAll(c *client.Client, ws, p string) (string, error) {
	r, err := c.Read(context.Background(), ws, p, client.ReadOptions{})
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

// The home is down when a command ends: the executor keeps the changes,
// shows the exec as pending, and pushes when the home is back.
func TestExecutorHomeDown(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	addr := freeAddr(t)
	home, ex, homeDir, token := homeAndExecutor(t, addr)
	xc := client.New(ex.url, token)
	if _, err := xc.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	done := make(chan core.Exec)
	go func() {
		rec, _ := xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo offline > f.txt"}}, nil)
		done <- rec
	}()
	time.Sleep(300 * time.Millisecond)
	home.cmd.Process.Signal(syscall.SIGKILL)
	home.cmd.Wait()
	rec := <-done
	if rec.State != core.ExecPending || rec.PendingState != core.ExecExited {
		t.Fatalf("exec while the home is down: %+v", rec)
	}
	list, _ := xc.Execs(ctx, "w", 0)
	if len(list) != 1 || list[0].State != core.ExecPending {
		t.Fatalf("execs while the home is down: %+v", list)
	}
	home2 := startChild(t, homeDir, "--listen", addr)
	hc := client.New(home2.url, token)
	eventually30(t, "the pending change reaches the home", func() bool {
		got, err := readAll(hc, "w", "f.txt")
		return err == nil && got == "offline\n"
	})
	eventually30(t, "the exec is settled", func() bool {
		list, _ := xc.Execs(ctx, "w", 0)
		return len(list) == 1 && list[0].State == core.ExecExited && list[0].Rev > 0
	})
}

// eventually30 polls cond for up to 30 s.
func eventually30(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 30s", what)
}

// An executor killed mid-command leaves the home unchanged; when it comes
// back the exec is interrupted and its writes reach the home as such.
func TestExecutorKilledMidCommand(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	home, _, _, token := homeAndExecutor(t, "127.0.0.1:0")
	exDir := t.TempDir()
	ex := startChild(t, exDir, "--home", home.url, "--token-file", tokenFile(t, token))
	hc, xc := client.New(home.url, token), client.New(ex.url, token)
	if _, err := hc.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo partial > p.txt; echo written; sleep 1010"}},
		func(ev wire.ExecEvent) error {
			if strings.Contains(ev.Data, "written") {
				close(started)
			}
			return nil
		})
	<-started
	head := mustHead(t, hc, "w")
	ex.cmd.Process.Signal(syscall.SIGKILL)
	ex.cmd.Wait()
	if mustHead(t, hc, "w") != head {
		t.Fatal("the home changed when the executor died")
	}
	ex2 := startChild(t, exDir, "--home", home.url, "--token-file", tokenFile(t, token))
	// The restart leaves it pending; the pending-push loop delivers it.
	var list []core.Exec
	eventually30(t, "the interrupted exec settles", func() bool {
		list, _ = client.New(ex2.url, token).Execs(ctx, "w", 0)
		return len(list) == 1 && list[0].State != core.ExecPending
	})
	if list[0].State != core.ExecInterrupted || list[0].Rev == 0 {
		t.Fatalf("exec after the executor's restart: %+v", list)
	}
	if got, _ := readAll(hc, "w", "p.txt"); got != "partial\n" {
		t.Fatalf("the interrupted exec's write at the home: %q", got)
	}
	revs, _ := hc.Log(ctx, "w", 1)
	if revs[0].Source != core.SourceInterrupted {
		t.Fatalf("revision of the interrupted exec: %+v", revs[0])
	}
}

func mustHead(t *testing.T, c *client.Client, ws string) int64 {
	t.Helper()
	w, err := c.Workspace(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	return w.Head
}

// cutProxy forwards TCP to target, but cuts the connection carrying the
// first push as soon as the home starts answering it: the home has applied
// the push, the executor never hears so.
type cutProxy struct {
	ln     net.Listener
	target string
	cuts   atomic.Int32
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	var pushing atomic.Bool
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if strings.Contains(string(buf[:n]), "/push HTTP/1.1") {
					pushing.Store(true)
				}
				s.Write(buf[:n])
			}
			if err != nil {
				s.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 && pushing.Load() && p.cuts.Load() == 0 {
			p.cuts.Add(1)
			return // drop the answer to the first push
		}
		if n > 0 {
			c.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// A push whose answer is lost is retried and applied exactly once.
func TestExecutorPushRetriedOnce(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	hc, xc, proxy := startBehindCutProxy(t)
	head := mustHead(t, hc, "w")
	rec, err := xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo once >> f.txt"}}, nil)
	if err != nil || rec.State != core.ExecPending {
		t.Fatalf("exec whose push answer was cut: %+v %v", rec, err)
	}
	if proxy.cuts.Load() != 1 {
		t.Fatalf("proxy cut %d answers", proxy.cuts.Load())
	}
	var last []core.Exec
	eventually30(t, "the retried push settles", func() bool {
		last, _ = xc.Execs(ctx, "w", 0)
		return len(last) == 1 && last[0].State == core.ExecExited && last[0].Rev > 0
	})
	if got := mustHead(t, hc, "w"); got != head+1 {
		t.Fatalf("home head %d after one exec from %d: the push applied %d times", got, head, got-head)
	}
	if got, _ := readAll(hc, "w", "f.txt"); got != "once\n" {
		t.Fatalf("f.txt = %q", got)
	}
}

// A conflicting push whose answer is lost: the home kept the copy; the
// retry finds that copy, and the exec settles with it (one copy, not two).
func TestExecutorConflictRetriedOnce(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	hc, xc, proxy := startBehindCutProxy(t)
	done := make(chan core.Exec)
	go func() {
		rec, _ := xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "sleep 1; echo exec > f.txt"}}, nil)
		done <- rec
	}()
	time.Sleep(500 * time.Millisecond)
	if _, err := hc.Write(ctx, "w", "f.txt", strings.NewReader("api\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	head := mustHead(t, hc, "w")
	if rec := <-done; rec.State != core.ExecPending || proxy.cuts.Load() != 1 {
		t.Fatalf("exec whose conflicting push answer was cut: %+v (%d cuts)", rec, proxy.cuts.Load())
	}
	var last []core.Exec
	eventually30(t, "the retried push settles", func() bool {
		last, _ = xc.Execs(ctx, "w", 0)
		return len(last) == 1 && last[0].State == core.ExecExited
	})
	rec := last[0]
	if len(rec.Conflict) != 1 || rec.Conflict[0] != "f.txt" || rec.KeptAs != "w.conflict-"+rec.ID || rec.Rev != 0 {
		t.Fatalf("settled conflicting exec: %+v", rec)
	}
	if got, _ := readAll(hc, rec.KeptAs, "f.txt"); got != "exec\n" {
		t.Fatalf("the exec's version at the home: %q", got)
	}
	if got, _ := readAll(hc, "w", "f.txt"); got != "api\n" || mustHead(t, hc, "w") != head {
		t.Fatalf("home's f.txt after the conflict: %q", got)
	}
	list, err := hc.Workspaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var copies []string
	for _, w := range list {
		if strings.HasPrefix(w.Name, "w.conflict-") {
			copies = append(copies, w.Name)
		}
	}
	if len(copies) != 1 {
		t.Fatalf("conflict copies at the home: %v", copies)
	}
}

// startBehindCutProxy starts a home with workspace w and an executor that
// reaches it through a proxy which can cut answers; it returns clients of
// both, as alice, and the proxy.
func startBehindCutProxy(t *testing.T) (home, executor *client.Client, proxy *cutProxy) {
	t.Helper()
	homeDir := t.TempDir()
	token := tokenFor(t, homeDir, "alice")
	h := startChild(t, homeDir)
	proxy = newCutProxy(t, strings.TrimPrefix(h.url, "http://"))
	ex := startChild(t, t.TempDir(), "--home", "http://"+proxy.ln.Addr().String(), "--token-file", tokenFile(t, token))
	home, executor = client.New(h.url, token), client.New(ex.url, token)
	if _, err := home.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	return home, executor, proxy
}

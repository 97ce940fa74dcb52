package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	agentcmd "computerd/agentctl/command"
	"computerd/client"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// linked is a home and an executor that reaches it through a faultLink.
type linked struct {
	t                                *testing.T
	homeAddr, exAddr, homeDir, exDir string
	token                            string
	homeArgs, exArgs                 []string
	home, ex                         *child
	link                             *faultLink
	hc, xc                           *client.Client
}

// linkTimeout is the executor's --home-timeout in these tests.
const linkTimeout = 2 * time.Second

// startLinked starts a home (with homeArgs) holding workspace w and an
// executor reaching it through a fault link.
func startLinked(t *testing.T, homeArgs ...string) *linked {
	t.Helper()
	needExec(t)
	k := &linked{t: t, homeAddr: freeAddr(t), exAddr: freeAddr(t), homeDir: t.TempDir(), exDir: t.TempDir(), homeArgs: homeArgs}
	k.token = tokenFor(t, k.homeDir, "alice")
	k.startHome()
	k.link = newFaultLink(t, k.homeAddr)
	k.exArgs = []string{"--listen", k.exAddr, "--home", k.link.url(), "--token-file", tokenFile(t, k.token), "--home-timeout", linkTimeout.String(), "--metrics-listen", "127.0.0.1:0"}
	k.startExecutor()
	if _, err := k.hc.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *linked) startHome() {
	k.t.Helper()
	k.home = startChild(k.t, k.homeDir, append([]string{"--listen", k.homeAddr, "--metrics-listen", "127.0.0.1:0"}, k.homeArgs...)...)
	k.hc = client.New(k.home.url, k.token)
}

func (k *linked) startExecutor() {
	k.t.Helper()
	k.ex = startChild(k.t, k.exDir, k.exArgs...)
	k.xc = client.New(k.ex.url, k.token)
}

// kill ends c with SIGKILL.
func kill(c *child) {
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
}

// stop ends c with SIGTERM, as an operator does.
func stop(t *testing.T, c *child) {
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("computerd after SIGTERM: %v", err)
	}
}

// pushes matches the request line of a push.
const pushes = `POST /v1/sync/\S+/push `

// within polls cond every 100 ms for up to d.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within %s", what, d)
}

// settled waits until exec id of ws is no longer pending at the
// executor and returns its record.
func (k *linked) settled(ws, id string, d time.Duration) core.Exec {
	k.t.Helper()
	var rec core.Exec
	within(k.t, d, "exec "+id+" settles", func() bool {
		var err error
		rec, err = k.xc.ExecRecord(context.Background(), ws, id)
		return err == nil && rec.State != core.ExecPending
	})
	return rec
}

// landedOnce checks that exec rec's writes are at the home exactly once:
// one revision of ws holds them (the record's), and file p (unless "")
// reads want.
func (k *linked) landedOnce(ws string, rec core.Exec, p, want string) {
	k.t.Helper()
	ctx := context.Background()
	if rec.State != core.ExecExited || rec.Rev == 0 || rec.KeptAs != "" || strings.Contains(rec.Error, "waiting") {
		k.t.Fatalf("exec %s settled as %+v, want exited with its revision", rec.ID, rec)
	}
	revs, err := k.hc.Log(ctx, ws, 0)
	if err != nil {
		k.t.Fatal(err)
	}
	n := 0
	for _, r := range revs {
		if r.ExecID == rec.ID {
			n++
			if r.Rev != rec.Rev {
				k.t.Fatalf("exec %s's revision at the home is %d, its record says %d", rec.ID, r.Rev, rec.Rev)
			}
		}
	}
	if n != 1 {
		k.t.Fatalf("exec %s has %d revisions at the home, want exactly 1", rec.ID, n)
	}
	if p == "" {
		return
	}
	if got, err := readAll(k.hc, ws, p); err != nil || got != want {
		k.t.Fatalf("home's %s after exec %s: %q %v, want %q", p, rec.ID, got, err, want)
	}
}

// Every transport fault of a push (a reset or a close in its header or
// body, a body stalled past the home's body timeout, an answer cut at
// any byte or held past the executor's home timeout) leaves the exec
// pending, never settled without its writes; the pending-push loop then
// delivers them exactly once. A push that trickles but moves is not cut.
func TestExecutorPushFaults(t *testing.T) {
	k := startLinked(t, "--http-body-timeout", "2s")
	ctx := context.Background()
	for i, tc := range []struct {
		name    string
		fault   fault
		pending bool // the exec's own push fails: it answers pending
	}{
		{"reset in its header", fault{Kind: resetRequest, At: 40}, true},
		{"FIN to the home in its header, the answer passed back", fault{Kind: finRequest, At: 40}, true},
		{"FIN to the home 100 KB into its body, the answer passed back", fault{Kind: finRequest, At: 100 << 10}, true},
		{"closed 100 KB into its body", fault{Kind: closeRequest, At: 100 << 10}, true},
		{"reset 100 KB into its body", fault{Kind: resetRequest, At: 100 << 10}, true},
		{"stalled past the home's body timeout", fault{Kind: stallRequest, At: 100 << 10, Stall: 5 * time.Second}, true},
		{"answer cut before its first byte", fault{Kind: cutAnswer, At: 0}, true},
		{"answer cut in its header", fault{Kind: cutAnswer, At: 20}, true},
		{"answer cut in its body", fault{Kind: cutAnswer, At: 150}, true},
		{"answer held past the home timeout", fault{Kind: holdAnswer, Stall: 5 * linkTimeout}, true},
		{"trickled at 200 KB/s", fault{Kind: trickle, Rate: 200 << 10}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k.t = t
			head := mustHead(t, k.hc, "w")
			before := k.link.hit(tc.fault.Kind)
			f := tc.fault
			f.Match = pushes
			k.link.add(f)
			start := time.Now()
			script := fmt.Sprintf("head -c 300000 /dev/urandom > /workspace/big%d; echo v%d > /workspace/f%d", i, i, i)
			rec, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", script}}, nil)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if k.link.hit(tc.fault.Kind) != before+1 {
				t.Fatalf("the fault did not happen (%d before, %d after)", before, k.link.hit(tc.fault.Kind))
			}
			if tc.pending && (rec.State != core.ExecPending || rec.PendingState != core.ExecExited || rec.Rev != 0) {
				t.Fatalf("exec whose push met a fault answered %+v, want pending", rec)
			}
			if !tc.pending && (rec.State != core.ExecExited || rec.Rev == 0) {
				t.Fatalf("exec whose push trickled answered %+v, want exited with its revision\nHOME\n%s\nEXECUTOR\n%s", rec, k.home.said.last(30), k.ex.said.last(30))
			}
			if took > 3*linkTimeout+5*time.Second {
				t.Fatalf("the exec answered after %s: a push is bounded by the home timeout (%s)", took, linkTimeout)
			}
			rec = k.settled("w", rec.ID, 30*time.Second)
			k.landedOnce("w", rec, fmt.Sprintf("f%d", i), fmt.Sprintf("v%d\n", i))
			if got := mustHead(t, k.hc, "w"); got != head+1 {
				t.Fatalf("home head %d after one exec from %d", got, head)
			}
			t.Logf("answered %s in %s, settled", rec.ID, took.Round(time.Millisecond))
		})
	}
}

// The home answers a push whose body is cut or stalls as a timeout (408),
// never as a malformed stream (400): the executor tries it again.
func TestHomeAnswersCutPushAsTimeout(t *testing.T) {
	homeDir := t.TempDir()
	token := tokenFor(t, homeDir, "alice")
	home := startChild(t, homeDir, "--http-body-timeout", "1s", "--no-exec", "--metrics-listen", "127.0.0.1:0")
	hc := client.New(home.url, token)
	if _, err := hc.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	// A push stream cut in the middle of its chunk.
	var stream bytes.Buffer
	enc := syncproto.NewEncoder(&stream)
	data := bytes.Repeat([]byte("0123456789abcdef"), 8<<10)
	hash := core.Hash(sha256.Sum256(data))
	enc.Header(syncproto.PushHeader{PushID: "cut-1", Base: 1})
	enc.Chunk(hash, data)
	enc.Changeset(&core.Changeset{From: 1, Ops: []core.Op{{Kind: core.OpCreate, Path: "f", Mode: 0o644,
		Content: &core.Content{Size: int64(len(data)), Chunks: []core.ChunkRef{{Hash: hash, Len: len(data)}}}}}})
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	part := stream.Bytes()[:stream.Len()/2]
	for _, tc := range []struct {
		name string
		end  func(c *net.TCPConn)
	}{
		{"stalled past the body timeout", func(c *net.TCPConn) {}},
		{"closed mid-body", func(c *net.TCPConn) { c.CloseWrite() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(home.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /v1/sync/w/push HTTP/1.1\r\nHost: home\r\nAuthorization: Bearer %s\r\n%s: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n",
				token, syncproto.HeaderVersion, syncproto.Version, len(part))
			c.Write(part)
			c.Write([]byte("\r\n"))
			tc.end(c.(*net.TCPConn))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"timeout"`) {
				t.Fatalf("answer to a push %s: %s %s, want 408 timeout", tc.name, resp.Status, body)
			}
		})
	}
	if got := metric(t, home.metrics, `computerd_sync_pushes_total{outcome="cut"}`); got != 2 {
		t.Fatalf("pushes counted as cut: %v, want 2", got)
	}
	if mustHead(t, hc, "w") != 1 {
		t.Fatal("a cut push changed the workspace")
	}
}

// A push whose base the home has pruned (an executor away longer than
// the home's retention) is kept whole as a conflict copy, not dropped;
// and a mirror whose revision was pruned pulls the whole tree.
func TestExecutorPushAfterBasePruned(t *testing.T) {
	k := startLinked(t, "--retention", "last=1", "--gc-interval", "200ms")
	ctx := context.Background()
	if _, err := k.hc.Write(ctx, "w", "a", strings.NewReader("base\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	k.link.add(fault{Match: pushes, Kind: resetRequest, At: 0, Times: 1 << 30})
	rec, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo mine > a; echo mine > b"}}, nil)
	if err != nil || rec.State != core.ExecPending {
		t.Fatalf("exec whose pushes are reset: %+v %v", rec, err)
	}
	// The home moves on and prunes the exec's base.
	for _, p := range []string{"x1", "x2"} {
		if _, err := k.hc.Write(ctx, "w", p, strings.NewReader(p), client.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	head := mustHead(t, k.hc, "w")
	within(t, 10*time.Second, "the home prunes the exec's base", func() bool {
		revs, err := k.hc.Log(ctx, "w", 0)
		return err == nil && len(revs) == 1 && revs[0].Rev == head
	})
	k.link.clear()
	rec = k.settled("w", rec.ID, 30*time.Second)
	if rec.State != core.ExecExited || rec.Rev != 0 || rec.KeptAs != "w.conflict-"+rec.ID || !strings.Contains(rec.Error, "gone at the home") {
		t.Fatalf("exec whose base was pruned settled as %+v, want kept as a copy", rec)
	}
	for p, want := range map[string]string{"a": "mine\n", "b": "mine\n"} {
		if got, err := readAll(k.hc, rec.KeptAs, p); err != nil || got != want {
			t.Fatalf("the copy's %s: %q %v, want %q", p, got, err, want)
		}
	}
	if mustHead(t, k.hc, "w") != head {
		t.Fatal("a push whose base was pruned changed the workspace")
	}
	if _, err := k.hc.Stat(ctx, "w", "b", 0); err == nil {
		t.Fatal("a push whose base was pruned reached the workspace")
	}
	// The mirror's revision is pruned too: the next exec pulls the tree.
	var out strings.Builder
	rec, err = k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "cat a x2"}}, func(ev wire.ExecEvent) error { out.WriteString(ev.Data); return nil })
	if err != nil || rec.State != core.ExecExited || out.String() != "base\nx2" {
		t.Fatalf("exec after its mirror's revision was pruned: %+v %v %q", rec, err, out.String())
	}
}

// A workspace deleted at the home and made again under its name is
// another workspace: the executor's mirror pulls it whole, and a push
// based on the old one is kept as a copy of the new one, never applied
// to it. A push whose workspace is gone altogether settles saying so.
func TestExecutorNamesake(t *testing.T) {
	k := startLinked(t)
	ctx := context.Background()
	rec, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo old > a"}}, nil)
	if err != nil || rec.Rev == 0 {
		t.Fatalf("first exec: %+v %v", rec, err)
	}
	k.link.add(fault{Match: pushes, Kind: resetRequest, At: 0, Times: 1 << 30})
	rec, err = k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo mine > b"}}, nil)
	if err != nil || rec.State != core.ExecPending {
		t.Fatalf("exec whose pushes are reset: %+v %v", rec, err)
	}
	if err := k.hc.DeleteWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.hc.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.hc.Write(ctx, "w", "g", strings.NewReader("new\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	head := mustHead(t, k.hc, "w")
	k.link.clear()
	rec = k.settled("w", rec.ID, 30*time.Second)
	if rec.Rev != 0 || rec.KeptAs != "w.conflict-"+rec.ID {
		t.Fatalf("exec based on the deleted w settled as %+v, want kept as a copy", rec)
	}
	if mustHead(t, k.hc, "w") != head {
		t.Fatal("a push based on the deleted w changed the new one")
	}
	if got, err := readAll(k.hc, rec.KeptAs, "b"); err != nil || got != "mine\n" {
		t.Fatalf("the copy's b: %q %v", got, err)
	}
	// The mirror takes the new w whole: no diff of the new w's revisions
	// applied to the old tree.
	var out strings.Builder
	rec, err = k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "ls; cat g"}}, func(ev wire.ExecEvent) error { out.WriteString(ev.Data); return nil })
	if err != nil || rec.State != core.ExecExited || out.String() != "g\nnew\n" {
		t.Fatalf("exec on the new w: %+v %v, output %q, want only the new w's g", rec, err, out.String())
	}
	// Deleted and not made again: the exec settles saying so.
	k.link.add(fault{Match: pushes, Kind: resetRequest, At: 0, Times: 1 << 30})
	rec, err = k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo lost > c"}}, nil)
	if err != nil || rec.State != core.ExecPending {
		t.Fatalf("exec whose pushes are reset: %+v %v", rec, err)
	}
	if err := k.hc.DeleteWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	k.link.clear()
	rec = k.settled("w", rec.ID, 30*time.Second)
	if rec.State != core.ExecExited || rec.Rev != 0 || !strings.Contains(rec.Error, "deleted at the home") {
		t.Fatalf("exec whose workspace was deleted settled as %+v", rec)
	}
}

// Execs that run at once on one workspace through an executor each pull
// and run: pulls of one mirror wait for each other.
func TestExecutorConcurrentExecs(t *testing.T) {
	k := startLinked(t)
	ctx := context.Background()
	const clients, each = 4, 10
	errs := make(chan error, clients*each)
	recs := make(chan core.Exec, clients*each)
	for c := range clients {
		go func() {
			for i := range each {
				// The home moves between pulls: each pull has work to do.
				if _, err := k.hc.Write(ctx, "w", fmt.Sprintf("home-%d-%d", c, i), strings.NewReader("x"), client.WriteOptions{}); err != nil {
					errs <- err
					continue
				}
				rec, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d > exec-%d-%d", i, c, i)}}, nil)
				if err != nil {
					errs <- err
					continue
				}
				recs <- rec
			}
		}()
	}
	var failed []string
	ran := 0
	for range clients * each {
		select {
		case err := <-errs:
			failed = append(failed, err.Error())
		case rec := <-recs:
			ran++
			if rec.State != core.ExecExited || rec.Rev == 0 {
				failed = append(failed, fmt.Sprintf("%s: %s %q", rec.ID, rec.State, rec.Error))
			}
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d execs failed: %v", len(failed), clients*each, failed)
	}
}

// An executor starts while its home is away, and delivers what waits once
// the home is back; agentctl execs --undelivered lists what waits.
func TestExecutorStartsWhileHomeAway(t *testing.T) {
	k := startLinked(t)
	ctx := context.Background()
	k.link.add(fault{Match: pushes, Kind: resetRequest, At: 0, Times: 1 << 30})
	rec, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo away > f"}}, nil)
	if err != nil || rec.State != core.ExecPending {
		t.Fatalf("exec whose pushes are reset: %+v %v", rec, err)
	}
	var out, errb bytes.Buffer
	args := []string{"agentctl", "--server", k.ex.url, "--token-file", tokenFile(t, k.token), "execs", "w", "--undelivered"}
	if err := agentRun(args, &out, &errb); err != nil || !strings.Contains(out.String(), rec.ID) || !strings.Contains(out.String(), "exited") {
		t.Fatalf("agentctl execs --undelivered: %v %s %s", err, out.String(), errb.String())
	}
	stop(t, k.ex)
	k.link.setDown(true)
	start := time.Now()
	k.startExecutor() // fails the test if it does not start
	t.Logf("the executor started in %s with its home away", time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // a push or two fail meanwhile
	k.link.clear()
	k.link.setDown(false)
	rec = k.settled("w", rec.ID, 60*time.Second)
	k.landedOnce("w", rec, "f", "away\n")
	out.Reset()
	args[2] = k.ex.url
	if err := agentRun(args, &out, &errb); err != nil || strings.Contains(out.String(), rec.ID) {
		t.Fatalf("agentctl execs --undelivered once delivered: %v %s", err, out.String())
	}
}

// A draft an older executor left behind with a settled record (its push
// refused by a transport fault it took for the home's verdict) is
// delivered at the next start; a draft whose writes did reach the home
// is collected.
func TestExecutorDeliversLeftDrafts(t *testing.T) {
	k := startLinked(t)
	ctx := context.Background()
	done, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo landed > d"}}, nil)
	if err != nil || done.Rev == 0 {
		t.Fatalf("exec: %+v %v", done, err)
	}
	quiet, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"true"}}, nil)
	if err != nil || quiet.State != core.ExecExited || quiet.Rev != 0 {
		t.Fatalf("exec that writes nothing: %+v %v", quiet, err)
	}
	k.link.add(fault{Match: pushes, Kind: resetRequest, At: 0, Times: 1 << 30})
	rec, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo left > f"}}, nil)
	if err != nil || rec.State != core.ExecPending {
		t.Fatalf("exec whose pushes are reset: %+v %v", rec, err)
	}
	stop(t, k.ex)
	// What an older executor recorded: exited, an error, no revision;
	// and a draft left for an exec that was delivered.
	st := fsstore.New(k.exDir)
	if err := st.Open(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := st.ExecByID(ctx, rec.ID)
	if err != nil || old.Draft == 0 {
		t.Fatalf("record: %+v %v", old, err)
	}
	old.State, old.PendingState, old.Error = core.ExecExited, "", "commit: home: POST /v1/sync/w/push: 400 Bad Request"
	if err := st.UpdateExec(ctx, old); err != nil {
		t.Fatal(err)
	}
	mirror, err := st.Workspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{done.ID, quiet.ID} {
		// A draft of an exec delivered, and one of an exec that wrote
		// nothing (as a shelved overlay keeps).
		if _, err := st.CreateDraft(ctx, mirror.ID, mirror.Head, "exec-"+id); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	k.link.clear()
	k.startExecutor()
	rec = k.settled("w", rec.ID, 30*time.Second)
	k.landedOnce("w", rec, "f", "left\n")
	if strings.Contains(rec.Error, "400 Bad Request") {
		t.Fatalf("the delivered exec's record still says what was given up: %q", rec.Error)
	}
	if q, err := k.xc.ExecRecord(ctx, "w", quiet.ID); err != nil || q.State != core.ExecExited || q.Error != "" {
		t.Fatalf("the exec that wrote nothing after the restart: %+v %v", q, err)
	}
	stop(t, k.ex)
	st = fsstore.New(k.exDir)
	if err := st.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if drafts, err := st.Drafts(ctx); err != nil || len(drafts) != 0 {
		t.Fatalf("drafts left: %+v %v", drafts, err)
	}
}

// Every call to the home has a deadline: an exec whose pull the home
// holds fails within the home timeout, as unavailable; and one slow push
// holds back no other pending push.
func TestExecutorHomeDeadlines(t *testing.T) {
	k := startLinked(t)
	ctx := context.Background()
	k.link.add(fault{Match: `POST /v1/sync/\S+/pull `, Kind: holdAnswer, Stall: time.Minute})
	start := time.Now()
	_, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"true"}}, nil)
	if took := time.Since(start); err == nil || !errors.Is(err, wire.ErrUnavailable) || took > linkTimeout+3*time.Second {
		t.Fatalf("exec whose pull the home holds: %v after %s, want unavailable within %s", err, took, linkTimeout)
	}
	if _, err := k.hc.CreateWorkspace(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	k.link.add(fault{Match: pushes, Kind: resetRequest, At: 0, Times: 1 << 30})
	slow, err := k.xc.Exec(ctx, "slow", wire.ExecRequest{Argv: []string{"sh", "-c", "head -c 2000000 /dev/urandom > big"}}, nil)
	if err != nil || slow.State != core.ExecPending {
		t.Fatalf("slow exec: %+v %v", slow, err)
	}
	quick, err := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo quick > q"}}, nil)
	if err != nil || quick.State != core.ExecPending {
		t.Fatalf("quick exec: %+v %v", quick, err)
	}
	// The home holds the answer to a push of the slow one (for a
	// minute, were it not for the deadline); the quick one lands meanwhile.
	holds := k.link.hit(holdAnswer)
	k.link.clear()
	k.link.add(fault{Match: `POST /v1/sync/slow/push `, Kind: holdAnswer, Stall: time.Minute, Times: 1 << 30},
		fault{Match: `POST /v1/sync/w/push `, Kind: resetRequest, Times: 1 << 30})
	within(t, 30*time.Second, "a push of the slow exec is held", func() bool { return k.link.hit(holdAnswer) > holds })
	held := time.Now()
	k.link.clear()
	rec := k.settled("w", quick.ID, 15*time.Second)
	k.landedOnce("w", rec, "q", "quick\n")
	t.Logf("the quick push landed %s after a push of the slow one was held", time.Since(held).Round(time.Millisecond))
	rec = k.settled("slow", slow.ID, 60*time.Second)
	k.landedOnce("slow", rec, "", "")
}

// agentRun runs agentctl in this process.
func agentRun(args []string, stdout, stderr io.Writer) error {
	return agentcmd.Run(context.Background(), args, agentcmd.IO{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr})
}

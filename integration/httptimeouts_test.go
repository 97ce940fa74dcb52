package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"computerd/client"
	daemoncmd "computerd/computerd/command"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/wire"
)

// short are the HTTP timeouts of these tests' daemons: seconds, not minutes.
var short = daemon.HTTPTimeouts{
	ReadHeader: time.Second, Idle: 2 * time.Second, Body: 2 * time.Second,
	BodyMinRate: 2 << 10, Write: time.Second,
}

// dialAPI opens a raw connection to addr (host:port of a daemon's URL).
func dialAPI(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

// closedWithin waits up to limit for the server to close c and reports
// how long that took, or an error if it did not.
func closedWithin(c net.Conn, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return took, fmt.Errorf("still open after %s", limit)
	}
	return took, nil
}

// putHead is the header of a PUT of n bytes to path in w.
func putHead(token, path string, n int) string {
	return fmt.Sprintf("PUT /v1/workspaces/w/files/%s HTTP/1.1\r\nHost: computerd\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", path, token, n)
}

// Idle and trickling connections are closed by their deadlines, on the API
// and the metrics listener, while a normal client is answered promptly.
func TestHTTPSlowClientsDoNotStarve(t *testing.T) {
	e := startWith(t, daemon.Config{NoExec: true, HTTP: short})
	e.ok("ws", "create", "w")
	api, metrics := hostOf(t, e.d.URL()), hostOf(t, e.d.MetricsURL())
	get := fmt.Sprintf("GET /v1/workspaces HTTP/1.1\r\nHost: computerd\r\nAuthorization: Bearer %s\r\n\r\n", e.token)

	type result struct {
		kind string
		took time.Duration
		err  error
	}
	results := make(chan result, 300)
	var wg sync.WaitGroup
	// Kept alive after one answer, then silent.
	idle := func(addr, req string) {
		c := dialAPI(t, addr)
		wg.Go(func() {
			br := bufio.NewReader(c)
			if _, err := io.WriteString(c, req); err != nil {
				results <- result{"idle", 0, err}
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				results <- result{"idle", 0, err}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			took, err := closedWithin(c, short.Idle+5*time.Second)
			results <- result{"idle", took, err}
		})
	}
	for range 200 {
		idle(api, get)
	}
	for range 10 {
		idle(metrics, "GET /metrics HTTP/1.1\r\nHost: computerd\r\n\r\n")
	}
	// A request body at a byte a second, or a header at five.
	trickle := func(kind, head string, tail string, every time.Duration) {
		c := dialAPI(t, api)
		wg.Go(func() {
			if _, err := io.WriteString(c, head); err != nil {
				results <- result{kind, 0, err}
				return
			}
			stop := make(chan struct{})
			wg.Go(func() {
				for i := 0; i < len(tail); i++ {
					select {
					case <-stop:
						return
					case <-time.After(every):
					}
					if _, err := io.WriteString(c, tail[i:i+1]); err != nil {
						return
					}
				}
			})
			took, err := closedWithin(c, 10*time.Second)
			close(stop)
			results <- result{kind, took, err}
		})
	}
	for i := range 50 {
		trickle("body", putHead(e.token, fmt.Sprint("slow/", i), 100), strings.Repeat("x", 100), time.Second)
	}
	for range 20 {
		trickle("header", "GET /v1/workspaces HTTP/1.1\r\n", "X-Slow: "+strings.Repeat("y", 100), 200*time.Millisecond)
	}

	// Meanwhile, a normal client writes and reads.
	cl := client.New(e.d.URL(), e.token)
	var lat []time.Duration
	ctx := context.Background()
	deadline := time.Now().Add(short.Idle + 2*time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		start := time.Now()
		p := fmt.Sprint("fast/", i%20)
		if _, err := cl.Write(ctx, "w", p, strings.NewReader("hello"), client.WriteOptions{}); err != nil {
			t.Fatalf("normal write: %v", err)
		}
		lat = append(lat, time.Since(start))
		start = time.Now()
		if _, err := cl.Stat(ctx, "w", p, core.Head); err != nil {
			t.Fatalf("normal stat: %v", err)
		}
		lat = append(lat, time.Since(start))
	}
	wg.Wait()
	close(results)

	limits := map[string]time.Duration{
		"idle":   short.Idle + 2*time.Second,
		"body":   short.Body + 2*time.Second,
		"header": short.ReadHeader + 2*time.Second,
	}
	worst := map[string]time.Duration{}
	for r := range results {
		if r.err != nil {
			t.Errorf("%s connection: %v", r.kind, r.err)
			continue
		}
		worst[r.kind] = max(worst[r.kind], r.took)
		if r.took > limits[r.kind] {
			t.Errorf("%s connection closed after %s, want within %s", r.kind, r.took, limits[r.kind])
		}
	}
	slices.Sort(lat)
	p99 := lat[len(lat)*99/100]
	t.Logf("%d normal requests: p50 %s, p99 %s, max %s; slowest close: %v", len(lat), lat[len(lat)/2], p99, lat[len(lat)-1], worst)
	if p99 > 500*time.Millisecond {
		t.Errorf("normal requests' p99 %s beside slow clients, want under 500ms", p99)
	}
	for p := range e.tree("w") {
		if strings.HasPrefix(p, "slow") {
			t.Errorf("a trickled upload was committed: %s", p)
		}
	}
}

// A body's deadline moves while it arrives at the minimum rate or faster,
// for longer than the body timeout; a body that stops is cut, answered
// 408 timeout, and nothing is committed.
func TestHTTPBodyDeadlineMoves(t *testing.T) {
	e := startWith(t, daemon.Config{NoExec: true, HTTP: short})
	e.ok("ws", "create", "w")
	piece := bytes.Repeat([]byte("z"), 1<<10) // half a second of credit at 2 KiB/s
	tests := []struct {
		name   string
		pieces int           // sent of 8
		every  time.Duration // between pieces
		ok     bool
	}{
		{"steady for twice the body timeout", 8, 500 * time.Millisecond, true},
		{"stops half way", 4, 100 * time.Millisecond, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fmt.Sprint("up", i)
			c := dialAPI(t, hostOf(t, e.d.URL()))
			start := time.Now()
			if _, err := io.WriteString(c, putHead(e.token, p, 8*len(piece))); err != nil {
				t.Fatal(err)
			}
			for range tt.pieces {
				time.Sleep(tt.every)
				if _, err := c.Write(piece); err != nil {
					t.Fatalf("after %s: %v", time.Since(start), err)
				}
			}
			c.SetReadDeadline(time.Now().Add(short.Body + 3*time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			took := time.Since(start)
			if tt.ok {
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("upload over %s: %v %v", took, resp, err)
				}
				if got := e.tree("w")[p]; len(got) != 8*len(piece) {
					t.Fatalf("stored %d bytes, want %d", len(got), 8*len(piece))
				}
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("a stopped upload still open after %s", took)
			}
			if _, ok := e.tree("w")[p]; ok {
				t.Fatal("a cut upload was committed")
			}
			// The client is still there to read it: the cut is a
			// timeout, not the server's failure.
			if err != nil {
				t.Fatalf("cut after %s with no answer: %v", took, err)
			}
			if got, want := resp.StatusCode, http.StatusRequestTimeout; got != want {
				t.Fatalf("cut after %s: status %d, want %d", took, got, want)
			}
			if we := refusal(t, resp); we.Code != wire.CodeTimeout {
				t.Fatalf("cut after %s: code %q (%s), want %q", took, we.Code, we.Message, wire.CodeTimeout)
			}
			t.Logf("cut after %s: %s", took, resp.Status)
		})
	}
}

// A client that stops reading a download is cut once one write has waited
// the write timeout; the server does not hold its answer forever.
func TestHTTPWriteDeadlineCutsStalledReader(t *testing.T) {
	e := startWith(t, daemon.Config{NoExec: true, HTTP: short})
	e.ok("ws", "create", "w")
	const size = 64 << 20 // far more than the sockets buffer
	cl := client.New(e.d.URL(), e.token)
	if _, err := cl.Write(context.Background(), "w", "big", io.LimitReader(zeros{}, size), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	c, err := d.Dial("tcp", hostOf(t, e.d.URL()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/workspaces/w/export HTTP/1.1\r\nHost: computerd\r\nAuthorization: Bearer %s\r\n\r\n", e.token)
	time.Sleep(short.Write + 2*time.Second)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("stalled download still open: read %d bytes", n)
	}
	if n >= size {
		t.Fatalf("the stalled download was not cut: read all %d bytes (%v)", n, err)
	}
	t.Logf("cut after %d of %d bytes (%v)", n, size, err)
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Quiet streams outlive every timeout: an exec that prints nothing for
// longer than the write, body and idle timeouts (through agentctl and
// MCP), and a run follow waiting.
func TestHTTPQuietStreamsLive(t *testing.T) {
	needExec(t)
	e := startWith(t, daemon.Config{HTTP: short})
	e.ok("ws", "create", "w")
	quiet := max(short.Write, short.Body, short.Idle) + time.Second

	cl := client.New(e.d.URL(), e.token)
	run, err := cl.CreateRun(context.Background(), "w", wire.CreateRun{Task: "wait", Driver: "d", Provider: "openai", Model: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := make(chan core.Step, 10)
	followed := make(chan error, 1)
	go func() {
		followed <- cl.FollowRun(ctx, run.ID, 0, true, func(st core.Step) error { seen <- st; return nil })
	}()

	// An MCP exec call, its answer an SSE stream, as quiet.
	quietCmd := fmt.Sprintf("sleep %d; echo done", int(quiet.Seconds()))
	cs, _ := mcpClient(t, e.httpTransport(e.token, "w"))
	mcpDone := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": quietCmd}})
		switch {
		case err != nil:
			mcpDone <- err
		case res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "done"):
			mcpDone <- fmt.Errorf("result %+v", res.Content[0])
		default:
			mcpDone <- nil
		}
	}()

	// The exec's own stream, read raw: no client reattaches to a cut one.
	start := time.Now()
	body := fmt.Sprintf(`{"argv":["sh","-c",%q]}`, quietCmd)
	req, _ := http.NewRequestWithContext(ctx, "POST", e.d.URL()+"/v1/workspaces/w/exec", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		events = append(events, sc.Text())
	}
	if len(events) < 2 || !strings.Contains(events[0], `"data":"done\n"`) || !strings.Contains(events[len(events)-1], `"type":"exit"`) {
		t.Fatalf("quiet exec's stream after %s (%v): %q, want its output and exit", time.Since(start), sc.Err(), events)
	}
	if _, err := cl.BeginStep(ctx, "d", core.Step{Run: run.ID, Seq: 1, Kind: core.StepModel}); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-seen:
		if st.Seq != 1 {
			t.Fatalf("follower saw %+v", st)
		}
	case err := <-followed:
		t.Fatalf("follow ended after %s of quiet: %v", time.Since(start), err)
	case <-ctx.Done():
		t.Fatal("follower never saw the step")
	}
	if err := <-mcpDone; err != nil {
		t.Fatalf("quiet MCP exec after %s: %v", time.Since(start), err)
	}
}

// computerd serve's --http-* flags reach its servers, and refuse nonsense.
func TestHTTPServeFlags(t *testing.T) {
	for _, tc := range []struct{ flags []string }{
		{[]string{"--http-idle-timeout", "0s"}},
		{[]string{"--http-body-timeout", "-1s"}},
		{[]string{"--http-body-min-rate", "0"}},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"computerd", "serve", "--data", dir, "--listen", "127.0.0.1:0", "--metrics-listen", ""}, tc.flags...)
		err := daemoncmd.Run(context.Background(), args, io.Discard, io.Discard)
		if want := tc.flags[0] + " " + tc.flags[1] + ": want more than 0"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve %v: %v, want an error with %q", tc.flags, err, want)
		}
	}

	dir := t.TempDir()
	ch := startChild(t, dir, "--no-exec", "--metrics-listen", "127.0.0.1:0", "--http-idle-timeout", "1s", "--http-read-header-timeout", "1s")
	token := tokenFor(t, dir, "alice")
	for _, addr := range []string{hostOf(t, ch.url), hostOf(t, ch.metrics)} {
		c := dialAPI(t, addr)
		fmt.Fprintf(c, "GET /v1/workspaces HTTP/1.1\r\nHost: computerd\r\nAuthorization: Bearer %s\r\n\r\n", token)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		took, err := closedWithin(c, 5*time.Second)
		if err != nil || took > 3*time.Second {
			t.Errorf("%s: idle connection closed after %s (%v), want about 1s", addr, took, err)
		}
		// A header that never ends.
		c = dialAPI(t, addr)
		io.WriteString(c, "GET /metrics HTTP/1.1\r\n")
		if took, err := closedWithin(c, 5*time.Second); err != nil || took > 3*time.Second {
			t.Errorf("%s: unfinished header closed after %s (%v), want about 1s", addr, took, err)
		}
	}
}

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"computerd/client"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/wire"
)

// postExec sends an exec request as token and returns the response, its
// body still open (an exec's events stream until it ends).
func (e *env) postExec(token, ws string, req wire.ExecRequest) *http.Response {
	e.t.Helper()
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequest("POST", e.d.URL()+"/v1/workspaces/"+ws+"/exec", strings.NewReader(string(b)))
	hr.Header.Set("Authorization", "Bearer "+token)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// refusal reads a failed answer's body.
func refusal(t *testing.T, resp *http.Response) wire.Error {
	t.Helper()
	var we wire.Error
	if err := json.NewDecoder(resp.Body).Decode(&we); err != nil {
		t.Fatalf("decode error body (status %d): %v", resp.StatusCode, err)
	}
	return we
}

// events reads an exec's event stream to its end.
func events(t *testing.T, r io.Reader) []wire.ExecEvent {
	t.Helper()
	var evs []wire.ExecEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev wire.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

func (e *env) journal(token, ws string) []core.Exec {
	e.t.Helper()
	list, err := client.New(e.d.URL(), token).Execs(context.Background(), ws, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

// A request above a server-side ceiling is refused as invalid, by a
// message naming the ceiling and its value, and leaves no journal record;
// one at the ceilings runs.
func TestExecCeilings(t *testing.T) {
	needExec(t)
	e := startWith(t, daemon.Config{
		ExecMaxLimits:  core.Limits{Memory: 256 << 20, Pids: 64, CPUs: 1},
		ExecMaxTimeout: time.Minute,
	})
	e.ok("ws", "create", "w")
	argv := []string{"true"}
	tests := []struct {
		name string
		req  wire.ExecRequest
		want string
	}{
		{"memory", wire.ExecRequest{Argv: argv, Memory: 256<<20 + 1}, "exec-max-memory=268435456"},
		{"pids", wire.ExecRequest{Argv: argv, Pids: 65}, "exec-max-pids=64"},
		{"cpus", wire.ExecRequest{Argv: argv, CPUs: 1.5}, "exec-max-cpus=1"},
		{"timeout", wire.ExecRequest{Argv: argv, Timeout: "61s"}, "exec-max-timeout=1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.postExec(e.token, "w", tt.req)
			if got, want := resp.StatusCode, http.StatusBadRequest; got != want {
				t.Fatalf("status %d, want %d", got, want)
			}
			we := refusal(t, resp)
			if we.Code != wire.CodeInvalid || !strings.Contains(we.Message, tt.want) {
				t.Fatalf("got %s %q, want %s naming %q", we.Code, we.Message, wire.CodeInvalid, tt.want)
			}
		})
	}
	if list := e.journal(e.token, "w"); len(list) != 0 {
		t.Fatalf("refused execs were journaled: %+v", list)
	}
	if got, want := metric(t, e.d.MetricsURL(), `computerd_execs_refused_total{reason="ceiling"}`), float64(len(tests)); got != want {
		t.Errorf("refused for a ceiling: %v, want %v", got, want)
	}
	resp := e.postExec(e.token, "w", wire.ExecRequest{Argv: argv, Memory: 256 << 20, Pids: 64, CPUs: 1, Timeout: "1m"})
	evs := events(t, resp.Body)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 || evs[len(evs)-1].Exec == nil || evs[len(evs)-1].Exec.State != core.ExecExited {
		t.Fatalf("exec at the ceilings: status %d, events %+v", resp.StatusCode, evs)
	}
}

// One more exec than a tenant may run at once is refused as busy, with
// Retry-After, and not journaled; a retry of a running keyed exec still
// attaches to it, and another tenant still runs.
func TestExecBusy(t *testing.T) {
	needExec(t)
	const perTenant = 2
	e := startWith(t, daemon.Config{ExecMaxPerTenant: perTenant, ExecMaxTotal: perTenant + 1})
	e.ok("ws", "create", "w")
	bob := e.newToken("bob")
	if _, errs, err := e.runAs(bob, nil, "ws", "create", "b"); err != nil {
		t.Fatal(err, errs)
	}
	// The answer's headers come with its first event: send the execs
	// that fill the tenant's slots at once, and wait for the journal to
	// show them running.
	firsts := make(chan *http.Response, perTenant)
	for i := range perTenant {
		go func() {
			b, _ := json.Marshal(wire.ExecRequest{Argv: []string{"sleep", "2"}, Key: fmt.Sprintf("k%d", i)})
			hr, _ := http.NewRequest("POST", e.d.URL()+"/v1/workspaces/w/exec", strings.NewReader(string(b)))
			hr.Header.Set("Authorization", "Bearer "+e.token)
			resp, err := http.DefaultClient.Do(hr)
			if err != nil {
				resp = &http.Response{StatusCode: 0, Body: io.NopCloser(strings.NewReader(err.Error()))}
			}
			firsts <- resp
		}()
	}
	ids := map[string]string{}
	for deadline := time.Now().Add(10 * time.Second); len(ids) < perTenant; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first execs are not running: %+v", ids)
		}
		for _, x := range e.journal(e.token, "w") {
			if x.State == core.ExecRunning {
				ids[x.Key] = x.ID
			}
		}
	}
	t.Cleanup(func() {
		for range perTenant {
			resp := <-firsts
			if resp.StatusCode != http.StatusOK {
				t.Errorf("a first exec: status %d", resp.StatusCode)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})

	resp := e.postExec(e.token, "w", wire.ExecRequest{Argv: []string{"true"}, Key: "extra"})
	if got, want := resp.StatusCode, http.StatusTooManyRequests; got != want {
		t.Fatalf("exec over the tenant's limit: status %d, want %d", got, want)
	}
	if got := resp.Header.Get("Retry-After"); got == "" {
		t.Errorf("busy answer without Retry-After")
	}
	if got := metric(t, e.d.MetricsURL(), `computerd_execs_refused_total{reason="busy"}`); got != 1 {
		t.Errorf("refused as busy: %v, want 1", got)
	}
	if we := refusal(t, resp); we.Code != wire.CodeBusy || !strings.Contains(we.Message, fmt.Sprintf("exec-max-per-tenant=%d", perTenant)) {
		t.Errorf("got %s %q, want busy naming exec-max-per-tenant", we.Code, we.Message)
	}

	// The retry attaches to the exec it started: same id, its own result.
	retry := e.postExec(e.token, "w", wire.ExecRequest{Argv: []string{"sleep", "2"}, Key: "k0"})
	if retry.StatusCode != http.StatusOK || retry.Header.Get("Computerd-Exec-Id") != ids["k0"] {
		t.Fatalf("retry of k0: status %d, exec %q, want %q", retry.StatusCode, retry.Header.Get("Computerd-Exec-Id"), ids["k0"])
	}

	// Bob is not held up by alice (the total has room for one more).
	bresp := e.postExec(bob, "b", wire.ExecRequest{Argv: []string{"echo", "bob"}})
	bevs := events(t, bresp.Body)
	if bresp.StatusCode != http.StatusOK || len(bevs) < 2 || bevs[0].Data != "bob\n" {
		t.Fatalf("bob's exec: status %d, events %+v", bresp.StatusCode, bevs)
	}

	list := e.journal(e.token, "w")
	if len(list) != perTenant {
		t.Fatalf("journal holds %d execs, want %d (the refused one is not journaled): %+v", len(list), perTenant, list)
	}
	if evs := events(t, retry.Body); evs[len(evs)-1].Exec == nil || evs[len(evs)-1].Exec.State != core.ExecExited {
		t.Fatalf("retry's stream: %+v", evs)
	}
	// Once they end there is room again: a client that retries after
	// Retry-After gets in.
	for deadline := time.Now().Add(10 * time.Second); ; {
		again := e.postExec(e.token, "w", wire.ExecRequest{Argv: []string{"true"}})
		if again.StatusCode == http.StatusOK {
			events(t, again.Body)
			break
		}
		if again.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("exec after the others ended: status %d", again.StatusCode)
		}
		time.Sleep(time.Duration(wire.BusyRetryAfter) * time.Second)
	}
}

// Output beyond the cap is not kept: the log stops at the cap with a
// truncated event, the command runs on to its end, the journal says so,
// and the output directory stays within the cap.
func TestExecOutputCap(t *testing.T) {
	needExec(t)
	const max = 1 << 20
	const written = 100_000_000
	e := startWith(t, daemon.Config{ExecMaxOutput: max})
	e.ok("ws", "create", "w")
	resp := e.postExec(e.token, "w", wire.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("yes | head -c %d; echo ran on > after", written)}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	evs := events(t, resp.Body)
	check := func(t *testing.T, evs []wire.ExecEvent) {
		t.Helper()
		var kept int
		var marker bool
		for _, ev := range evs {
			switch ev.Type {
			case "output":
				if marker {
					t.Fatalf("output after the truncated event")
				}
				kept += len(ev.Bytes())
			case "truncated":
				marker = strings.Contains(ev.Data, "truncated")
			}
		}
		if kept > max || kept < max/2 {
			t.Errorf("kept %d bytes of output, want at most %d and most of it", kept, max)
		}
		if !marker {
			t.Errorf("no truncated event")
		}
		last := evs[len(evs)-1]
		if last.Exec == nil || !last.Exec.OutputTruncated || last.Exec.StdoutBytes != written || last.Exec.ExitCode != 0 {
			t.Errorf("exit event: %+v", last.Exec)
		}
	}
	check(t, evs)
	id := evs[len(evs)-1].Exec.ID

	// The journal has it, a replay shows the same, and the command ran on.
	cl := client.New(e.d.URL(), e.token)
	rec, err := cl.ExecRecord(context.Background(), "w", id)
	if err != nil || !rec.OutputTruncated {
		t.Fatalf("journal record: %+v %v", rec, err)
	}
	var replay []wire.ExecEvent
	if _, err := cl.FollowExec(context.Background(), "w", id, func(ev wire.ExecEvent) error { replay = append(replay, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	check(t, replay)
	if got := e.tree("w")["after"]; got != "ran on\n" {
		t.Errorf("after = %q: the command did not run on past the cap", got)
	}

	var disk int64
	filepath.Walk(filepath.Join(e.dir, "run", "output"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			disk += fi.Size()
		}
		return nil
	})
	if disk > max+64<<10 {
		t.Errorf("output directory holds %d bytes, cap %d", disk, max)
	}
	if got := metric(t, e.d.MetricsURL(), "computerd_execs_output_truncated_total"); got != 1 {
		t.Errorf("truncated execs: %v, want 1", got)
	}
	t.Logf("wrote %d bytes, stored %d", written, disk)
}

// The bound on all execs holds across tenants: with one slot, taken by
// alice, bob is refused as busy, naming the bound.
func TestExecBusyTotal(t *testing.T) {
	needExec(t)
	e := startWith(t, daemon.Config{ExecMaxTotal: 1})
	e.ok("ws", "create", "w")
	bob := e.newToken("bob")
	if _, errs, err := e.runAs(bob, nil, "ws", "create", "b"); err != nil {
		t.Fatal(err, errs)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		client.New(e.d.URL(), e.token).Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sleep", "2"}}, nil)
	}()
	t.Cleanup(func() { <-done })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if list := e.journal(e.token, "w"); len(list) == 1 && list[0].State == core.ExecRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's exec is not running")
		}
	}
	resp := e.postExec(bob, "b", wire.ExecRequest{Argv: []string{"true"}})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("bob's exec: status %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if we := refusal(t, resp); we.Code != wire.CodeBusy || !strings.Contains(we.Message, "exec-max-total=1") {
		t.Errorf("got %s %q, want busy naming exec-max-total=1", we.Code, we.Message)
	}
	if list := e.journal(bob, "b"); len(list) != 0 {
		t.Errorf("bob's refused exec was journaled: %+v", list)
	}
}

// The client rides out a busy answer: an exec while the tenant's one slot
// is taken waits Retry-After, asks again and runs once the slot frees,
// after the first in the journal; one whose context ends while it waits
// gets the busy error and is never journaled.
func TestExecRetriesBusy(t *testing.T) {
	needExec(t)
	e := startWith(t, daemon.Config{ExecMaxPerTenant: 1})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	type result struct {
		rec core.Exec
		err error
	}
	first := make(chan result, 1)
	go func() {
		rec, err := cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sh", "-c", "sleep 2; echo first >> log"}}, nil)
		first <- result{rec, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if list := e.journal(e.token, "w"); len(list) == 1 && list[0].State == core.ExecRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first exec is not running")
		}
	}

	// Gives up while the first still runs.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := cl.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo impatient >> log"}}, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeBusy || !errors.Is(err, wire.ErrBusy) {
		t.Fatalf("exec whose context ended while busy: %v, want a busy error", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the cancelled exec returned after %s, want when its context ended", took)
	}

	// Waits, and runs after the first.
	second, err := cl.Exec(context.Background(), "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo second >> log"}}, nil)
	if err != nil {
		t.Fatalf("exec after a busy answer: %v", err)
	}
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	if second.Started.Before(r.rec.Ended) {
		t.Errorf("second started %s, before the first ended %s", second.Started, r.rec.Ended)
	}
	list := e.journal(e.token, "w")
	if len(list) != 2 || list[0].ID != second.ID || list[1].ID != r.rec.ID {
		t.Fatalf("journal %+v, want the first and the second, newest first, and not the cancelled one", list)
	}
	if got, want := e.tree("w")["log"], "first\nsecond\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
	if got := metric(t, e.d.MetricsURL(), `computerd_execs_refused_total{reason="busy"}`); got < 2 {
		t.Errorf("refused as busy: %v, want at least 2 (one per exec that waited)", got)
	}
}

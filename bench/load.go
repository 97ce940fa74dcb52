package main

// The load suite: computerd under a mixed load from many tenants, as one
// machine would serve it, then killed with SIGKILL mid-load and started
// again. A real daemon runs as a child process (the computerd binary,
// built here), on loopback; 8 tenants with 20 workspaces each drive it
// with reads, writes, edits, greps and execs for -load-duration. It
// reports throughput, p50 and p99 per kind of call, the daemon's peak
// RSS and the errors (a 429 busy answer to an exec is the server's
// intended backpressure and is counted apart). Then a second round is cut
// by SIGKILL; after a restart every acknowledged write must read back
// and fsck must find nothing.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"computerd/client"
	"computerd/computerd/daemon"
	"computerd/computerd/sandbox"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

func init() {
	register(Suite{Name: "load", Doc: "8 tenants x 20 workspaces of mixed calls against a computerd process; kill -9 mid-load and restart", Run: runLoad})
}

// Shape of the load.
const (
	loadExecMaxWrite  = "256M" // what each exec of the load may write (--exec-max-write)
	loadTenants       = 8
	loadWorkspaces    = 20 // per tenant
	loadWorkers       = 2  // per tenant, each owning half its workspaces
	loadSeedFiles     = 20 // per workspace
	loadKillAfter     = 5 * time.Second
	loadRSSBarMiB     = 256
	loadMaxWriteBytes = 16 << 10
)

// loadKinds are the kinds of call, and how often each is made (out of 100).
var loadKinds = []struct {
	name   string
	weight int
}{
	{"read", 40}, {"write", 20}, {"edit", 15}, {"grep", 15}, {"exec", 10},
}

// loadStats gathers what the workers measured.
type loadStats struct {
	mu      sync.Mutex
	lat     map[string][]time.Duration
	errs    map[string]int
	busy    int
	example error
	// acked holds the content of every path whose last write or edit
	// was acknowledged: tenant/ws/path -> content. inflight holds what a
	// write or edit not yet answered would make it: a call cut by the kill
	// may have committed or not.
	acked, inflight map[string]string
}

func (s *loadStats) record(kind string, d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var we *wire.Error
	switch {
	case err == nil:
		s.lat[kind] = append(s.lat[kind], d)
	case errors.As(err, &we) && we.Code == wire.CodeBusy:
		s.busy++
	default:
		s.errs[kind]++
		if s.example == nil {
			s.example = fmt.Errorf("%s: %w", kind, err)
		}
	}
}

func (s *loadStats) send(key, content string) {
	s.mu.Lock()
	s.inflight[key] = content
	s.mu.Unlock()
}

func (s *loadStats) ack(key, content string) {
	s.mu.Lock()
	s.acked[key] = content
	delete(s.inflight, key)
	s.mu.Unlock()
}

// loadTenant is a tenant's client and its workspaces.
type loadTenant struct {
	name string
	cl   *client.Client
	ws   []string
}

// loadWorker drives its share of a tenant's workspaces until ctx ends. It
// alone writes to them, so the last acknowledged content of each path is
// what the store must hold.
type loadWorker struct {
	t     *loadTenant
	ws    []string
	id    int
	rng   *rand.Rand
	edits map[string]int // workspace -> the counter its edit file holds
	stats *loadStats
	round int
}

func (w *loadWorker) editPath() string { return fmt.Sprintf("e/worker%d.txt", w.id) }

func editText(n int) string { return fmt.Sprintf("counter = %d\n", n) }

func (w *loadWorker) run(ctx context.Context) {
	total := 0
	for _, k := range loadKinds {
		total += k.weight
	}
	for n := 0; ctx.Err() == nil; n++ {
		ws := w.ws[w.rng.IntN(len(w.ws))]
		pick := w.rng.IntN(total)
		kind := loadKinds[0].name
		for _, k := range loadKinds {
			if pick < k.weight {
				kind = k.name
				break
			}
			pick -= k.weight
		}
		start := time.Now()
		err := w.call(ctx, kind, ws, n)
		if ctx.Err() != nil {
			return // cut by the end of the round: neither counted nor acknowledged
		}
		w.stats.record(kind, time.Since(start), err)
	}
}

func (w *loadWorker) call(ctx context.Context, kind, ws string, n int) error {
	cl := w.t.cl
	key := w.t.name + "/" + ws + "/"
	switch kind {
	case "read":
		r, err := cl.Read(ctx, ws, fmt.Sprintf("src/f%02d.go", w.rng.IntN(loadSeedFiles)), client.ReadOptions{})
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, r)
		r.Close()
		return err
	case "write":
		p := fmt.Sprintf("w/r%d/worker%d/f%03d", w.round, w.id, n%200)
		content := strings.Repeat(fmt.Sprintf("%s %d\n", p, n), 1+w.rng.IntN(loadMaxWriteBytes/32))
		w.stats.send(key+p, content)
		if _, err := cl.Write(ctx, ws, p, strings.NewReader(content), client.WriteOptions{}); err != nil {
			return err
		}
		w.stats.ack(key+p, content)
		return nil
	case "edit":
		cur, ok := w.edits[ws]
		p := w.editPath()
		if !ok {
			w.stats.send(key+p, editText(0))
			if _, err := cl.Write(ctx, ws, p, strings.NewReader(editText(0)), client.WriteOptions{}); err != nil {
				return err
			}
			w.edits[ws] = 0
			w.stats.ack(key+p, editText(0))
			return nil
		}
		w.stats.send(key+p, editText(cur+1))
		if _, err := cl.Edit(ctx, ws, wire.Edit{Path: p, Old: editText(cur), New: editText(cur + 1)}); err != nil {
			return err
		}
		w.edits[ws] = cur + 1
		w.stats.ack(key+p, editText(cur+1))
		return nil
	case "grep":
		return cl.Grep(ctx, ws, client.GrepOptions{Pattern: `func F\d+`, Path: "src"}, func(wire.Match) error { return nil })
	case "exec":
		res, err := cl.Exec(ctx, ws, wire.ExecRequest{Argv: []string{"sh", "-c", "wc -l src/*.go | tail -1"}, Timeout: "60s"}, func(wire.ExecEvent) error { return nil })
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exec exited %d", res.ExitCode)
		}
		return err
	}
	return fmt.Errorf("unknown kind %q", kind)
}

// seedFile is the text of a seeded source file.
func seedFile(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package seed\n\n")
	for j := range 40 {
		fmt.Fprintf(&b, "func F%d_%d() int { return %d }\n", i, j, i*j)
	}
	return b.String()
}

// loadRound runs every worker for d (or until ctx ends) and waits for them.
func loadRound(ctx context.Context, tenants []*loadTenant, stats *loadStats, round int, d time.Duration, edits []map[string]int) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for ti, t := range tenants {
		for k := range loadWorkers {
			var mine []string
			for i, ws := range t.ws {
				if i%loadWorkers == k {
					mine = append(mine, ws)
				}
			}
			w := &loadWorker{t: t, ws: mine, id: k, rng: rand.New(rand.NewPCG(uint64(ti), uint64(k*1000+round))),
				edits: edits[ti*loadWorkers+k], stats: stats, round: round}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run(ctx)
			}()
		}
	}
	wg.Wait()
}

func runLoad(ctx context.Context, env *Env) error {
	if os.Geteuid() != 0 {
		return errors.New("load suite needs root (execs run in containers)")
	}
	setup, err := setupDaemon(ctx, env, "data", true)
	if err != nil {
		return err
	}
	// Every exec's writes go to a volume of its own, whose space is taken
	// when it is made (docs/SANDBOX.md): at the default of 4 GiB, the 16
	// execs this load runs at once would need 64 GiB free and be refused
	// (507 no_space) on a smaller disk. Its commands write a few bytes.
	setup.args = []string{"--exec-max-write", loadExecMaxWrite}
	data := setup.data
	d, err := setup.start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if d != nil {
			d.stop(true)
		}
		// What a computerd killed with SIGKILL leaves: its mounts and containers.
		daemon.CleanupMounts(data)
		(&sandbox.Manager{StateDir: daemon.SandboxStateDir(data)}).Sweep(context.WithoutCancel(ctx))
	}()
	// Tenants, their workspaces, and seed files.
	var tenants []*loadTenant
	for i := range loadTenants {
		name := fmt.Sprintf("tenant%d", i)
		token, err := d.token(ctx, name)
		if err != nil {
			return err
		}
		t := &loadTenant{name: name, cl: client.New(d.url, token)}
		t.cl.ExecBusyRetries = -1 // a busy answer is counted, not waited out
		for j := range loadWorkspaces {
			ws := fmt.Sprintf("ws%02d", j)
			if _, err := t.cl.CreateWorkspace(ctx, ws); err != nil {
				return err
			}
			var ops []core.Op
			for f := range loadSeedFiles {
				ops = append(ops, core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("src/f%02d.go", f), Data: []byte(seedFile(f))})
			}
			if _, err := t.cl.Ops(ctx, ws, wire.Ops{Ops: append([]core.Op{{Kind: core.OpMkdir, Path: "src"}}, ops...)}); err != nil {
				return fmt.Errorf("seed %s/%s: %w", name, ws, err)
			}
			t.ws = append(t.ws, ws)
		}
		tenants = append(tenants, t)
	}
	env.Logf("load: %d tenants x %d workspaces seeded; running %v", loadTenants, loadWorkspaces, env.LoadDuration)

	stats := &loadStats{lat: map[string][]time.Duration{}, errs: map[string]int{}, acked: map[string]string{}, inflight: map[string]string{}}
	edits := make([]map[string]int, loadTenants*loadWorkers)
	for i := range edits {
		edits[i] = map[string]int{}
	}
	start := time.Now()
	loadRound(ctx, tenants, stats, 0, env.LoadDuration, edits)
	took := time.Since(start)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rss, err := d.peakRSSMiB()
	if err != nil {
		return err
	}
	calls, errs := 0, 0
	for _, k := range loadKinds {
		lat := stats.lat[k.name]
		calls += len(lat)
		errs += stats.errs[k.name]
		if len(lat) == 0 {
			continue
		}
		env.Emit(Result{Name: "load/" + k.name + "_p50", Value: ms(percentile(lat, 50)), Unit: "ms",
			Note: fmt.Sprintf("%d calls", len(lat))}.check(Bar{}))
		env.Emit(Result{Name: "load/" + k.name + "_p99", Value: ms(percentile(lat, 99)), Unit: "ms"}.check(Bar{}))
	}
	env.Emit(Result{Name: "load/throughput", Value: float64(calls) / took.Seconds(), Unit: "calls/s",
		Note: fmt.Sprintf("%d calls in %v from %d clients (%d tenants x %d), %d workspaces", calls, took.Round(time.Millisecond),
			loadTenants*loadWorkers, loadTenants, loadWorkers, loadTenants*loadWorkspaces)}.check(Bar{}))
	note := "429 busy answers to execs are counted apart (load/busy)"
	if stats.example != nil {
		note = "first: " + stats.example.Error()
	}
	env.Emit(Result{Name: "load/errors", Value: float64(errs), Unit: "calls", Note: note}.check(Bar{"value", "<=", 0}))
	env.Emit(Result{Name: "load/busy", Value: float64(stats.busy), Unit: "calls", Note: "execs answered 429 (the per-tenant or total exec ceiling)"}.check(Bar{}))
	env.Emit(Result{Name: "load/rss_peak", Value: rss, Unit: "MiB", Note: "VmHWM of the computerd process over the round"}.check(Bar{"value", "<=", loadRSSBarMiB}))

	// A second round, cut by SIGKILL of computerd; then a restart.
	cut, stopRound := context.WithCancel(ctx)
	round := make(chan struct{})
	go func() {
		defer close(round)
		loadRound(cut, tenants, stats, 1, time.Hour, edits)
	}()
	time.Sleep(loadKillAfter)
	d.stop(true)
	stopRound() // calls cut by the kill are neither counted nor acknowledged
	<-round
	d, err = setup.start(ctx)
	if err != nil {
		return fmt.Errorf("restart after SIGKILL: %w", err)
	}
	lost := 0
	var firstLost string
	byTenant := map[string]*loadTenant{}
	for _, t := range tenants {
		t.cl = client.New(d.url, t.cl.Token)
		byTenant[t.name] = t
	}
	for key, want := range stats.acked {
		tenant, rest, _ := strings.Cut(key, "/")
		ws, p, _ := strings.Cut(rest, "/")
		r, err := byTenant[tenant].cl.Read(ctx, ws, p, client.ReadOptions{})
		var got []byte
		if err == nil {
			got, err = io.ReadAll(r)
			r.Close()
		}
		if inflight, ok := stats.inflight[key]; err == nil && ok && string(got) == inflight {
			continue // the call the kill cut had committed
		}
		if err != nil || string(got) != want {
			lost++
			if firstLost == "" {
				firstLost = fmt.Sprintf("%s: %d bytes (%v), want %d", key, len(got), err, len(want))
			}
		}
	}
	note = fmt.Sprintf("%d acknowledged writes and edits read back after SIGKILL mid-load and a restart", len(stats.acked))
	if firstLost != "" {
		note = "first: " + firstLost
	}
	env.Emit(Result{Name: "load/acked_lost", Value: float64(lost), Unit: "writes", Note: note}.check(Bar{"value", "<=", 0}))
	if err := d.stop(false); err != nil {
		return fmt.Errorf("stop after the check: %w", err)
	}
	d = nil
	st := fsstore.New(data)
	if err := st.Open(ctx); err != nil {
		return err
	}
	rep, err := st.Check(ctx, fsstore.CheckOptions{})
	st.Close()
	if err != nil {
		return err
	}
	note = fmt.Sprintf("%d workspaces, %d entries", rep.Workspaces, rep.Entries)
	if len(rep.Problems) > 0 {
		sort.Strings(rep.Problems)
		note = "first: " + rep.Problems[0]
	}
	env.Emit(Result{Name: "load/fsck_problems", Value: float64(len(rep.Problems)), Unit: "problems", Note: note}.check(Bar{"value", "<=", 0}))
	return nil
}

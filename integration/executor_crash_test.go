package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"computerd/client"
	"computerd/core"
	"computerd/wire"
)

// An executor killed (SIGKILL) while it pushes an exec's writes home:
// the next start delivers them exactly once, and the exec's record keeps
// how its command ended (exited, not interrupted: the command was over).
func TestExecutorKilledMidPush(t *testing.T) {
	k := startLinked(t)
	ctx := context.Background()
	k.link.add(fault{Match: pushes, Kind: trickle, Rate: 256 << 10})
	var rec core.Exec
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		rec, _ = k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "head -c 8000000 /dev/urandom > big; echo done > f"}},
			func(ev wire.ExecEvent) error { return nil })
	}()
	within(t, 30*time.Second, "the push is under way", func() bool { return k.link.hit(trickle) > 0 })
	time.Sleep(500 * time.Millisecond)
	kill(k.ex)
	<-answered
	k.link.clear()
	k.startExecutor()
	list, err := k.xc.Execs(ctx, "w", 0)
	if err != nil || len(list) != 1 {
		t.Fatalf("execs after the restart: %+v %v", list, err)
	}
	rec = k.settled("w", list[0].ID, 60*time.Second)
	k.landedOnce("w", rec, "f", "done\n")
}

// A home killed (SIGKILL) while an exec's push reaches it: the executor
// keeps the writes pending and delivers them, once, when the home is back.
func TestHomeKilledMidPush(t *testing.T) {
	k := startLinked(t)
	ctx := context.Background()
	k.link.add(fault{Match: pushes, Kind: trickle, Rate: 256 << 10})
	answered := make(chan core.Exec, 1)
	go func() {
		rec, _ := k.xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "head -c 8000000 /dev/urandom > big; echo done > f"}}, nil)
		answered <- rec
	}()
	within(t, 30*time.Second, "the push is under way", func() bool { return k.link.hit(trickle) > 0 })
	time.Sleep(500 * time.Millisecond)
	kill(k.home)
	rec := <-answered
	if rec.State != core.ExecPending || rec.PendingState != core.ExecExited {
		t.Fatalf("exec whose home died mid-push: %+v", rec)
	}
	k.link.clear()
	k.startHome()
	rec = k.settled("w", rec.ID, 60*time.Second)
	k.landedOnce("w", rec, "f", "done\n")
}

// TestExecutorSoak runs 60 execs through an executor whose link to the
// home breaks a third of the sync requests at random (resets, closes,
// stalls, trickles, cut or held answers) while home and executor are
// each killed with SIGKILL at random moments and started again. Every
// exec is asked for with an idempotency key, and asked again until it
// answers. In the end: each key has one record, settled; the writes of
// each exec that ran to its end are at the home in exactly one revision,
// the one its record names; no revision at the home belongs to no exec.
// COMPUTERD_SOAK_SEED repeats a run.
func TestExecutorSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak: minutes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COMPUTERD_SOAK_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (COMPUTERD_SOAK_SEED)", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	k := startLinked(t, "--http-body-timeout", "2s")
	k.link.mu.Lock()
	k.link.random = &randomFaults{match: regexp.MustCompile(`/v1/sync/`), p: 0.3, rnd: rand.New(rand.NewPCG(seed, 2)), stall: 3 * time.Second}
	k.link.mu.Unlock()
	ctx := context.Background()

	const execs, workers = 60, 2
	type answer struct {
		key  string
		rec  core.Exec
		err  error
		asks int
	}
	answers := make(chan answer, execs)
	next := make(chan int, execs)
	for i := range execs {
		next <- i
	}
	close(next)
	xc := client.New("http://"+k.exAddr, k.token) // the executor listens there across restarts
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				a := answer{key: fmt.Sprintf("soak-%d", i)}
				script := fmt.Sprintf("head -c %d /dev/urandom > d%d; echo %d > f%d", 1000+i*7000, i, i, i)
				for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
					a.asks++
					a.rec, a.err = xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", script}, Key: a.key}, nil)
					if a.err == nil && a.rec.State != core.ExecRunning {
						break
					}
				}
				answers <- a
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	kills := map[string]int{}
	for running := true; running; {
		select {
		case <-done:
			running = false
			continue
		case <-time.After(time.Duration(1000+rnd.IntN(2500)) * time.Millisecond):
		}
		if rnd.IntN(2) == 0 {
			kill(k.home)
			time.Sleep(time.Duration(rnd.IntN(1500)) * time.Millisecond)
			k.startHome()
			kills["home"]++
		} else {
			kill(k.ex)
			time.Sleep(time.Duration(rnd.IntN(1500)) * time.Millisecond)
			k.startExecutor()
			kills["executor"]++
		}
	}
	close(answers)
	t.Logf("kills: %v; link faults: %v", kills, k.link.hitsNow())
	k.link.clear()

	// Every exec answered, and settles.
	got := map[string]answer{}
	for a := range answers {
		if a.err != nil {
			t.Errorf("exec %s never answered in %d asks: %v", a.key, a.asks, a.err)
		}
		got[a.key] = a
	}
	var recs []core.Exec
	within(t, 3*time.Minute, "every exec settles", func() bool {
		var err error
		recs, err = k.xc.Execs(ctx, "w", 0)
		if err != nil {
			return false
		}
		for _, r := range recs {
			if r.State == core.ExecPending || r.State == core.ExecRunning {
				return false
			}
		}
		return true
	})
	revs, err := k.hc.Log(ctx, "w", 0)
	if err != nil {
		t.Fatal(err)
	}
	byExec := map[string][]core.Revision{}
	for _, r := range revs {
		if r.ExecID != "" {
			byExec[r.ExecID] = append(byExec[r.ExecID], r)
		}
	}
	byKey := map[string][]core.Exec{}
	ids := map[string]bool{}
	for _, r := range recs {
		byKey[r.Key] = append(byKey[r.Key], r)
		ids[r.ID] = true
	}
	states := map[core.ExecState]int{}
	for i := range execs {
		key := fmt.Sprintf("soak-%d", i)
		rs := byKey[key]
		if len(rs) != 1 {
			t.Errorf("%s: %d records, want 1", key, len(rs))
			continue
		}
		r := rs[0]
		states[r.State]++
		landed := byExec[r.ID]
		switch {
		case len(landed) > 1:
			t.Errorf("%s (%s): %d revisions at the home, want at most 1", key, r.ID, len(landed))
		case r.KeptAs != "":
			t.Errorf("%s (%s): kept as %s, with no conflict possible", key, r.ID, r.KeptAs)
		case len(landed) == 1 && landed[0].Rev != r.Rev:
			t.Errorf("%s (%s): its revision at the home is %d, its record says %d", key, r.ID, landed[0].Rev, r.Rev)
		case len(landed) == 0 && r.Rev != 0:
			t.Errorf("%s (%s): its record names revision %d, which the home does not have", key, r.ID, r.Rev)
		case r.State == core.ExecExited && (r.ExitCode != 0 || len(landed) != 1):
			t.Errorf("%s (%s): exited (%d), its writes in %d revisions at the home, want 1: %+v", key, r.ID, r.ExitCode, len(landed), r)
		case r.State != core.ExecExited && r.State != core.ExecInterrupted:
			t.Errorf("%s (%s): settled as %s: %+v", key, r.ID, r.State, r)
		}
		if r.State == core.ExecExited {
			if content, err := readAll(k.hc, "w", fmt.Sprintf("f%d", i)); err != nil || content != fmt.Sprintf("%d\n", i) {
				t.Errorf("%s (%s): f%d at the home: %q %v", key, r.ID, i, content, err)
			}
		}
		// What the client was told agrees with the end.
		a := got[key]
		if a.err == nil && a.rec.ID != r.ID {
			t.Errorf("%s: answered as exec %s, recorded as %s", key, a.rec.ID, r.ID)
		}
		if a.err == nil && a.rec.State != core.ExecPending && (a.rec.State != r.State || a.rec.Rev != r.Rev) {
			t.Errorf("%s: answered %s rev %d, recorded %s rev %d", key, a.rec.State, a.rec.Rev, r.State, r.Rev)
		}
		if a.err == nil && a.rec.State == core.ExecPending && a.rec.PendingState != r.State {
			t.Errorf("%s: answered pending %s, settled %s", key, a.rec.PendingState, r.State)
		}
	}
	for id := range byExec {
		if !ids[id] {
			t.Errorf("revision of exec %s at the home, which the executor has no record of", id)
		}
	}
	t.Logf("%d execs: %v; %d revisions at the home", execs, states, len(revs))
}

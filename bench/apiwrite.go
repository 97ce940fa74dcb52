package main

// The api suite's small writes: what an acknowledged write costs now that
// it is on the disk before its answer. The same writes go to two daemons
// started in this run, taking turns so that the machine's drift hits both
// alike: the default one, and one with daemon.Config.NoFsync (the
// opt-out, which answers once a commit is in the WAL). The ratio is what
// the flush costs on this disk; no bar, since that depends on the disk.
// (Against the code before commits were flushed, whose default wrote as
// NoFsync does but parsed its lookups' SQL at every write, bench/RESULTS.md
// holds the figures.)
//
//  1. write_p50: one client writes a new 100-byte file per request
//     (client.Write: an upload and a commit), apiWriteRounds turns of
//     apiWriteBatch writes on each daemon after apiWriteWarmup untimed
//     ones; p50 and p99.
//  2. write_8clients: apiWriteClients clients write at once, each
//     apiWriteEach new files; writes per second, the best of
//     apiWriteRounds turns per daemon. Here the flush costs most: each
//     commit fsyncs inside the single writer, so commits of concurrent
//     writers each pay theirs in turn.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"computerd/client"
	"computerd/computerd/daemon"
)

const (
	apiWriteRounds  = 5
	apiWriteBatch   = 100
	apiWriteWarmup  = 20
	apiWriteClients = 8
	apiWriteEach    = 40
	apiWriteSize    = 100
)

// writeTarget is one daemon the suite writes to.
type writeTarget struct {
	d    *daemon.Daemon
	c    *client.Client
	next int // the next file's number
	lat  []time.Duration
	rate []float64 // writes/s of each concurrent turn
}

// apiWrites runs the api suite's write metrics.
func apiWrites(ctx context.Context, env *Env) error {
	open := func(name string, noFsync bool) (*writeTarget, error) {
		d, token, err := startDaemon(ctx, daemon.Config{DataDir: filepath.Join(env.Dir, name), NoExec: true, NoFsync: noFsync})
		if err != nil {
			return nil, err
		}
		t := &writeTarget{d: d, c: client.New(d.URL(), token)}
		if _, err := t.c.CreateWorkspace(ctx, "w"); err != nil {
			d.Close()
			return nil, err
		}
		return t, nil
	}
	flushed, err := open("apiwrite-flushed", false)
	if err != nil {
		return err
	}
	defer flushed.d.Close()
	unflushed, err := open("apiwrite-nofsync", true)
	if err != nil {
		return err
	}
	defer unflushed.d.Close()
	data := strings.Repeat("w", apiWriteSize)
	write := func(ctx context.Context, c *client.Client, name string) error {
		_, err := c.Write(ctx, "w", name, strings.NewReader(data), client.WriteOptions{})
		return err
	}
	sequential := func(ctx context.Context, t *writeTarget, n int, keep bool) error {
		for range n {
			t.next++
			start := time.Now()
			if err := write(ctx, t.c, fmt.Sprintf("s%05d", t.next)); err != nil {
				return err
			}
			if keep {
				t.lat = append(t.lat, time.Since(start))
			}
		}
		return nil
	}
	concurrent := func(ctx context.Context, t *writeTarget, round int) error {
		var g errgroup.Group
		start := time.Now()
		for k := range apiWriteClients {
			g.Go(func() error {
				for i := range apiWriteEach {
					if err := write(ctx, t.c, fmt.Sprintf("c%d-%d-%d", round, k, i)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		t.rate = append(t.rate, float64(apiWriteClients*apiWriteEach)/time.Since(start).Seconds())
		return nil
	}
	err = env.phase(ctx, "api_writes", func(ctx context.Context) error {
		for _, t := range []*writeTarget{flushed, unflushed} {
			if err := sequential(ctx, t, apiWriteWarmup, false); err != nil {
				return err
			}
		}
		// All the one-client turns first: a burst of concurrent writes
		// leaves checkpoints to run, whose I/O would slow the next turn's
		// fsyncs.
		for range apiWriteRounds {
			for _, t := range []*writeTarget{flushed, unflushed} {
				if err := sequential(ctx, t, apiWriteBatch, true); err != nil {
					return err
				}
			}
		}
		for round := range apiWriteRounds {
			for _, t := range []*writeTarget{flushed, unflushed} {
				if err := concurrent(ctx, t, round); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	env.Emit(Result{Name: "api/write_p50", Value: ms(percentile(flushed.lat, 50)), Unit: "ms",
		Note: fmt.Sprintf("%d writes of a new %d-byte file, one client, each on the disk before its answer; ref: the same writes to a --no-fsync daemon, taking turns", len(flushed.lat), apiWriteSize)}.
		withRef("nofsync_write_p50_ms", ms(percentile(unflushed.lat, 50))).check(Bar{}))
	env.Emit(Result{Name: "api/write_p99", Value: ms(percentile(flushed.lat, 99)), Unit: "ms"}.
		withRef("nofsync_write_p99_ms", ms(percentile(unflushed.lat, 99))).check(Bar{}))
	env.Emit(Result{Name: "api/write_8clients_per_s", Value: best(flushed.rate), Unit: "writes/s",
		Note: fmt.Sprintf("%d clients writing %d new files each at once, best of %d turns: %s; ref %s", apiWriteClients, apiWriteEach, apiWriteRounds, rates(flushed.rate), rates(unflushed.rate))}.
		withRef("nofsync_8clients_per_s", best(unflushed.rate)).check(Bar{}))
	return nil
}

func best(xs []float64) float64 {
	var b float64
	for _, x := range xs {
		b = max(b, x)
	}
	return b
}

func rates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

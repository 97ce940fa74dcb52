package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
)

// TestServeRetention: a daemon with a retention policy prunes on its own,
// every GC interval, and reports what it pruned and reclaimed.
func TestServeRetention(t *testing.T) {
	ctx := context.Background()
	d, err := daemon.Start(ctx, daemon.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NoExec: true,
		Retention: fsstore.Policy{KeepLast: 2}, GCInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	w, err := d.Store.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		var b core.Batch
		b.WriteFile("f", []byte(strings.Repeat(fmt.Sprintf("version %d. ", i), 100)), 0o644)
		if _, err := d.Store.Commit(ctx, w.ID, &b, fsstore.CommitInfo{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, err := d.Store.Log(ctx, w.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		m := gathered(t, d)
		if len(log) == 2 && m["computerd_gc_revisions_pruned_total"] >= 5 && m["computerd_gc_bytes_reclaimed_total"] > 0 && m["computerd_gc_runs_total"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d revisions, metrics %v; want 2 revisions kept, 5 pruned, bytes reclaimed", len(log), m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sn, err := d.Store.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	f, err := sn.Open(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	if _, err := f.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("version 5. ", 100); got.String() != want {
		t.Errorf("head after retention: %q..., want version 5", got.String()[:20])
	}
}

// gathered sums each metric family of d's registry over its labels.
func gathered(t *testing.T, d *daemon.Daemon) map[string]float64 {
	t.Helper()
	fams, err := d.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[f.GetName()] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[f.GetName()] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

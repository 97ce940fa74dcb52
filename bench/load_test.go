package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestLoadShort runs the load suite for 5 s: a computerd process under
// mixed calls of 8 tenants, then SIGKILL mid-load, restart, every
// acknowledged write read back and fsck clean. Its bars (no errors, RSS
// under 256 MiB, nothing lost, no problem) must hold.
func TestLoadShort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: execs run in containers")
	}
	if testing.Short() {
		t.Skip("builds computerd and drives it for a while")
	}
	var results []Result
	env := &Env{Dir: t.TempDir(), LoadDuration: 5 * time.Second, Timeout: 5 * time.Minute,
		emit: func(r Result) { results = append(results, r) }}
	if err := runLoad(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Logf("%s = %v %s %s", r.Name, r.Value, r.Unit, r.Note)
		if !r.Pass {
			t.Errorf("%s = %v %s: over its bar %s %s (%s)", r.Name, r.Value, r.Unit, r.TargetOn, r.Target, r.Note)
		}
	}
	if len(results) < 10 {
		t.Fatalf("%d results, want every kind of call measured", len(results))
	}
}

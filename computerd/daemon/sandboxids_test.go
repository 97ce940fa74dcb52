package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"computerd/computerd/daemon"
	"computerd/computerd/idmap"
)

// startIDs starts a daemon with execs on a fresh data directory, its
// host ids claimed in claims; zero ids take a free range.
func startIDs(t *testing.T, claims string, ids idmap.Range) (*daemon.Daemon, string, error) {
	t.Helper()
	dir := t.TempDir()
	d, err := daemon.Start(context.Background(), daemon.Config{
		DataDir: dir, Listen: "127.0.0.1:0", SandboxIDs: ids, SandboxIDClaims: claims,
		ExecMaxWrite: 16 << 20, // the volume the runner keeps ready
	})
	if err == nil {
		t.Cleanup(func() { d.Close() })
	}
	return d, dir, err
}

// TestSandboxIDsClaimed: a daemon given host ids that another live daemon
// holds does not start, and says which daemon holds them and which range
// is free; a daemon given none takes a free range; ids given up at
// shutdown can be claimed at once.
func TestSandboxIDsClaimed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("execs need root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("execs need /dev/fuse")
	}
	claims := t.TempDir()
	a, aDir, err := startIDs(t, claims, idmap.Default)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.SandboxIDs(); got != idmap.Default {
		t.Fatalf("first daemon's ids %v, want %v", got, idmap.Default)
	}

	overlapping := idmap.Range{Base: idmap.DefaultBase - 1000, Size: idmap.DefaultSize}
	_, _, err = startIDs(t, claims, overlapping)
	next := idmap.Range{Base: idmap.DefaultBase + idmap.DefaultSize, Size: idmap.DefaultSize}
	if !errors.Is(err, idmap.ErrClaimed) {
		t.Fatalf("second daemon on %v: %v", overlapping, err)
	}
	for _, want := range []string{aDir, idmap.Default.String(), fmt.Sprintf("--sandbox-id-base %d", next.Base)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}

	c, _, err := startIDs(t, claims, idmap.Range{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SandboxIDs(); got != next {
		t.Errorf("daemon without ids took %v, want %v", got, next)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, _, err := startIDs(t, claims, overlapping)
	if err != nil {
		t.Fatalf("after the first daemon stopped: %v", err)
	}
	if got := b.SandboxIDs(); got != overlapping {
		t.Errorf("ids %v, want %v", got, overlapping)
	}
}

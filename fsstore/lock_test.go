package fsstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// TestLockRefusesSecondStore: while one Store holds a data directory, a
// second one (in the same process: flock belongs to the open file) is
// refused with core.ErrLocked naming the holder; a shared one opens and
// writes tokens but nothing GC could lose; after Close the lock is free.
func TestLockRefusesSecondStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first := fsstore.New(dir)
	first.Owner = "test holder"
	if err := first.Open(ctx); err != nil {
		t.Fatal(err)
	}
	second := fsstore.New(dir)
	err := second.Open(ctx)
	if !errors.Is(err, core.ErrLocked) || !strings.Contains(err.Error(), "test holder") {
		t.Fatalf("second open: %v, want core.ErrLocked naming the holder", err)
	}

	shared := fsstore.New(dir)
	shared.Shared = true
	if err := shared.Open(ctx); err != nil {
		t.Fatalf("shared open beside the holder: %v", err)
	}
	if _, _, err := shared.CreateToken(ctx, "alice"); err != nil {
		t.Errorf("shared store: create token: %v", err)
	}
	if _, err := shared.Workspaces(ctx, ""); err != nil {
		t.Errorf("shared store: list workspaces: %v", err)
	}
	if _, err := shared.GC(ctx); err == nil {
		t.Error("shared store ran GC, want a refusal")
	}
	if _, err := shared.Put(ctx, strings.NewReader("some bytes")); err == nil {
		t.Error("shared store stored chunks, want a refusal")
	}
	if _, err := shared.CreateWorkspace(ctx, "alice", "w"); err == nil {
		t.Error("shared store created a workspace, want a refusal")
	}
	if err := shared.Close(); err != nil {
		t.Fatal(err)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := fsstore.New(dir)
	if err := again.Open(ctx); err != nil {
		t.Fatalf("open after the holder closed: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

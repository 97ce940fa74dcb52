package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"computerd/computerd/fusefs"
)

func TestSmoke(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	if err := os.MkdirAll(filepath.Join(dir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a/b/f.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "a/b/f.txt"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q %v", got, err)
	}
	rev, changed, err := m.Commit(context.Background())
	if err != nil || !changed {
		t.Fatalf("commit %v %v %v", rev, changed, err)
	}
	sn, err := st.Snapshot(context.Background(), w.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := sn.ReadFile(context.Background(), "a/b/f.txt")
	if err != nil || string(data) != "hello" {
		t.Fatalf("store has %q %v", data, err)
	}
	ents, _ := os.ReadDir(dir)
	t.Log(ents)
}

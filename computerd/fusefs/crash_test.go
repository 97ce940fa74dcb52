package fusefs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"computerd/computerd/fusefs"
	"computerd/fsstore"
)

// TestMain lets the test binary serve a mount as a child process that the
// crash tests kill, or map a file of a mount the test serves (mapper).
func TestMain(m *testing.M) {
	if os.Getenv("FUSEFS_CHILD") != "" {
		serveChild()
		return
	}
	if os.Getenv("FUSEFS_MAPPER") != "" {
		runMapper()
		return
	}
	os.Exit(m.Run())
}

func serveChild() {
	var ws int64
	fmt.Sscan(os.Getenv("FUSEFS_CHILD_WS"), &ws)
	st := fsstore.New(os.Getenv("FUSEFS_CHILD_STORE"))
	if err := st.Open(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	_, err := fusefs.Open(os.Getenv("FUSEFS_CHILD_MNT"), fusefs.Options{Store: st, Workspace: ws, QuietPeriod: -1})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

// crashChild starts a child serving workspace ws of the store in dir at
// mnt, and returns a function that kill -9s it.
func crashChild(t *testing.T, dir string, ws int64, mnt string) func() {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FUSEFS_CHILD=1", "FUSEFS_CHILD_STORE="+dir, fmt.Sprintf("FUSEFS_CHILD_WS=%d", ws), "FUSEFS_CHILD_MNT="+mnt)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	t.Cleanup(func() {
		kill()
		fusefs.CleanupStale(mnt)
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		kill()
		t.Fatalf("child: %q %v", line, err)
	}
	return kill
}

func newStoreDir(t *testing.T) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	st := fsstore.New(dir)
	if err := st.Open(bg); err != nil {
		t.Fatal(err)
	}
	w, err := st.CreateWorkspace(bg, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	return dir, w.ID
}

func reopen(t *testing.T, dir string) *fsstore.Store {
	t.Helper()
	st := fsstore.New(dir)
	if err := st.Open(bg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func writeSync(t *testing.T, p string, data []byte) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestKill9KeepsFsynced kills the process serving a host mount and
// checks that everything fsync returned for is in the store.
func TestKill9KeepsFsynced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root and /dev/fuse")
	}
	dir, ws := newStoreDir(t)
	mnt := t.TempDir()
	kill := crashChild(t, dir, ws, mnt)
	big := make([]byte, 3<<20+17)
	for i := range big {
		big[i] = byte(i % 251)
	}
	writeSync(t, filepath.Join(mnt, "one"), []byte("first"))
	os.Mkdir(filepath.Join(mnt, "d"), 0o755)
	writeSync(t, filepath.Join(mnt, "d/big"), big)
	os.Rename(filepath.Join(mnt, "one"), filepath.Join(mnt, "d/one"))
	d, _ := os.Open(filepath.Join(mnt, "d"))
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	os.WriteFile(filepath.Join(mnt, "unsynced"), []byte("maybe"), 0o644)
	kill()
	if err := fusefs.CleanupStale(mnt); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatalf("mount point after cleanup: %v", err)
	}
	st := reopen(t, dir)
	sn, err := st.Snapshot(bg, ws, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := sn.ReadFile(bg, "d/one"); err != nil || string(b) != "first" {
		t.Fatalf("d/one: %q %v", b, err)
	}
	if b, err := sn.ReadFile(bg, "d/big"); err != nil || string(b) != string(big) {
		t.Fatalf("d/big: %d bytes, %v", len(b), err)
	}
	if rep, err := st.Check(bg, fsstore.CheckOptions{}); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("check: %v %v", rep, err)
	}
}

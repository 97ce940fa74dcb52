package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"computerd/client"
	"computerd/core"
	"computerd/fsstore"
)

// sh runs a shell command in another process (the test process serves the
// mount, and must not touch it itself).
func sh(t *testing.T, script string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("sh -c %q: %v\n%s", script, err, out)
	}
	return string(out)
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 5s", what)
}

func TestHostMount(t *testing.T) {
	needExec(t)
	e := startMounts(t)
	e.ok("ws", "create", "w")
	e.write("w", "a.txt", "one\n")
	dir := filepath.Join(t.TempDir(), "mnt")
	e.ok("mount", "w", dir)
	defer e.run(nil, "umount", dir)

	if got := sh(t, "cat "+dir+"/a.txt"); got != "one\n" {
		t.Fatalf("read through the mount: %q", got)
	}
	// A write made durable with fsync is a revision when fsync returns.
	head := e.head("w")
	sh(t, "echo two > "+dir+"/b.txt && sync "+dir+"/b.txt")
	if e.head("w") <= head || e.tree("w")["b.txt"] != "two\n" {
		t.Fatalf("fsync did not commit: head %d, tree %v", e.head("w"), e.tree("w"))
	}
	var revs []core.Revision
	cl := client.New(e.d.URL(), e.token)
	revs, _ = cl.Log(context.Background(), "w", 1)
	if revs[0].Source != core.SourceMount {
		t.Fatalf("mount revision: %+v", revs[0])
	}
	// An API write shows in the mount without waiting for cache timeouts.
	e.write("w", "a.txt", "one, changed through the API\n")
	eventually(t, "API write visible in the mount", func() bool {
		out, _ := exec.Command("cat", dir+"/a.txt").Output()
		return string(out) == "one, changed through the API\n"
	})
	e.ok("rm", "w", "b.txt")
	eventually(t, "API delete visible in the mount", func() bool {
		_, err := os.Stat(dir + "/b.txt") // a stat of a name the kernel was told is gone: answered by the kernel
		out, _ := exec.Command("ls", dir).Output()
		return err != nil && strings.TrimSpace(string(out)) == "a.txt"
	})
	if out := e.ok("mounts"); !strings.Contains(out, dir) {
		t.Fatalf("mounts: %q", out)
	}
	// Errors: busy dir, non-empty dir, another tenant's unmount.
	e.fails("w", "already a mount", "mount", "w", dir)
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	e.fails("w", "not empty", "mount", "w", full)
	bob := e.newToken("bob", fsstore.ScopeMount)
	e.failsAs(bob, "w", "not a mount of yours", nil, "umount", dir)
	// Unmount commits what is pending.
	sh(t, "echo three > "+dir+"/c.txt")
	e.ok("umount", dir)
	if got := e.tree("w")["c.txt"]; got != "three\n" {
		t.Fatalf("unmount did not commit pending writes: %q", got)
	}
	if out := sh(t, "ls -A "+dir); out != "" {
		t.Fatalf("after umount the directory shows %q", out)
	}
}

// Two mounts of one workspace: what one commits shows in the other.
func TestTwoMounts(t *testing.T) {
	needExec(t)
	e := startMounts(t)
	e.ok("ws", "create", "w")
	e.write("w", "a.txt", "one\n")
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	e.ok("mount", "w", one)
	defer e.run(nil, "umount", one)
	e.ok("mount", "w", two)
	defer e.run(nil, "umount", two)
	for _, dir := range []string{one, two} {
		if got := sh(t, "cat "+dir+"/a.txt"); got != "one\n" {
			t.Fatalf("read through %s: %q", dir, got)
		}
	}
	sh(t, "echo from one > "+one+"/a.txt && echo new > "+one+"/b.txt && sync "+one+"/b.txt")
	eventually(t, "the first mount's commit visible in the second", func() bool {
		a, _ := exec.Command("cat", two+"/a.txt").Output()
		b, _ := exec.Command("cat", two+"/b.txt").Output()
		return string(a) == "from one\n" && string(b) == "new\n"
	})
	sh(t, "rm "+two+"/b.txt && sync "+two+"/a.txt")
	eventually(t, "the second mount's commit visible in the first", func() bool {
		out, _ := exec.Command("ls", one).Output()
		return strings.TrimSpace(string(out)) == "a.txt"
	})
	if got := e.tree("w"); len(got) != 1 || got["a.txt"] != "from one\n" {
		t.Fatalf("workspace: %v", got)
	}
}

// A mount left by a computerd killed with SIGKILL is cleaned up by the next start.
func TestStaleMountCleanup(t *testing.T) {
	needExec(t)
	dir := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	os.MkdirAll(mnt, 0o755)
	token := tokenFor(t, dir, "alice", fsstore.ScopeMount)
	c := startChild(t, dir, "--mount-root", os.TempDir())
	cl := client.New(c.url, token)
	if _, err := cl.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Mount(context.Background(), "w", mnt); err != nil {
		t.Fatal(err)
	}
	sh(t, "echo kept > "+mnt+"/f && sync "+mnt+"/f")
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
	if err := exec.Command("ls", mnt).Run(); err == nil {
		t.Log("the dead mount still answers (kernel detached it early)")
	}
	c2 := startChild(t, dir)
	if out := sh(t, "ls -A "+mnt); out != "" {
		t.Fatalf("after restart the mount dir shows %q", out)
	}
	r, err := client.New(c2.url, token).Read(context.Background(), "w", "f", client.ReadOptions{})
	if err != nil {
		t.Fatalf("fsync'ed write through the mount lost: %v", err)
	}
	r.Close()
}

// emptyDir is a FUSE file system of one empty directory.
type emptyDir struct{ fs.Inode }

// The start after a crash unmounts only the mounts the dead process made:
// one that root unmounted, with another FUSE file system mounted in its
// place, is left alone.
func TestStaleMountCleanupLeavesAnotherMount(t *testing.T) {
	needExec(t)
	dir := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	os.MkdirAll(mnt, 0o755)
	token := tokenFor(t, dir, "alice", fsstore.ScopeMount)
	c := startChild(t, dir, "--mount-root", os.TempDir())
	if _, err := client.New(c.url, token).CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(c.url, token).Mount(context.Background(), "w", mnt); err != nil {
		t.Fatal(err)
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	srv, err := fs.Mount(mnt, &emptyDir{}, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, Name: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount() })
	startChild(t, dir)
	if f := mountInfoLine(t, mnt); f == nil || f[len(f)-3] != "fuse.other" {
		t.Fatalf("after restart the mount at %s is %v, want the fuse.other one", mnt, f)
	}
}

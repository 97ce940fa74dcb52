package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"computerd/client"
	daemoncmd "computerd/computerd/command"
	"computerd/computerd/daemon"
	"computerd/computerd/loopfs"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// smallDisk makes an ext4 file system of size, on a loop device, mounted
// in a temporary directory (mkfs.ext4, a loop device and mount(2), through
// loopfs), and returns its root; it is unmounted at the test's end, after
// the daemons the test starts later are stopped.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	m := &loopfs.Maker{Dir: t.TempDir()}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := m.MakeVolume(dir, loopfs.SizeClass(size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := loopfs.RemoveVolume(dir); err != nil {
			t.Errorf("remove the small disk: %v", err)
		}
	})
	return filepath.Join(dir, loopfs.VolumeFS)
}

// fillDisk writes a file in dir until the file system is full, and
// returns a function that removes it.
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	unix.Fallocate(int(f.Fd()), 0, fi.Size(), int64(st.Bavail)*st.Bsize) // most of it at once
	for _, piece := range []int{1 << 20, 64 << 10, 4 << 10, 512} {
		buf := bytes.Repeat([]byte{0x5a}, piece)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filler: %v", err)
				}
				break
			}
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filler: %v", err)
	}
	return func() {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// wantNoSpace checks err is the API's no_space (507).
func wantNoSpace(t *testing.T, what string, err error) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNoSpace || we.Status != http.StatusInsufficientStorage || !errors.Is(err, core.ErrNoSpace) {
		t.Fatalf("%s on a full disk: %v, want 507 no_space", what, err)
	}
}

// With the data directory on a small file system that fills up, every
// write path answers a clear error (507 no_space; ENOSPC through FUSE; an
// exec's commit kept for later), the daemon goes on answering, nothing
// acknowledged is lost, the store stays consistent, and everything works
// again once space is freed.
func TestFullDisk(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	disk := smallDisk(t, 128<<20)
	data := filepath.Join(disk, "data")
	cfg := daemon.Config{ExecMaxWrite: 16 << 20}
	e := startMountsIn(t, data, cfg)
	cl := client.New(e.d.URL(), e.token)
	if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	acked := map[string][]byte{} // path -> content, of every write acknowledged
	write := func(p string, b []byte) error {
		_, err := cl.Write(ctx, "w", p, bytes.NewReader(b), client.WriteOptions{})
		if err == nil {
			acked[p] = b
		}
		return err
	}
	for _, p := range []string{"a", "b", "c"} {
		if err := write(p, randomBytes(1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	// Ready before the disk fills: a host mount, a mirror that pulled,
	// and an exec that will write and print once it is full.
	mnt := filepath.Join(t.TempDir(), "mnt")
	e.ok("mount", "w", mnt)
	defer e.run(nil, "umount", mnt)
	mirror := newMirror(t, e)
	pulled, err := mirror.Pull(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	var late struct {
		sync.WaitGroup
		rec    core.Exec
		output strings.Builder
		err    error
	}
	started := make(chan struct{})
	late.Add(1)
	go func() {
		defer late.Done()
		late.rec, late.err = cl.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c",
			"echo started; sleep 6; head -c 2M /dev/urandom > late && echo wrote; seq 1 20000"}},
			func(ev wire.ExecEvent) error {
				if ev.Type == "output" {
					if late.output.Len() == 0 {
						close(started)
					}
					late.output.WriteString(ev.Data)
				}
				return nil
			})
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the exec did not start")
	}

	free := fillDisk(t, disk)

	// API writes: a few may still fit (in SQLite's WAL, in what the
	// store's reserve gave back); then 507.
	writeUntilFull := func(what string) {
		t.Helper()
		var err error
		fit := 0
		for ; fit < 64 && err == nil; fit++ {
			err = write(fmt.Sprintf("%s-%d", what, fit), randomBytes(1<<20))
		}
		wantNoSpace(t, what, err)
		t.Logf("%s: %d writes of 1 MiB fit, then: %v", what, fit-1, err)
	}
	writeUntilFull("write")
	_, err = cl.Attach(ctx, "w", bytes.NewReader(tarOf(t, "tarred", randomBytes(1<<20))), client.AttachOptions{Merge: true})
	wantNoSpace(t, "attach", err)
	// An exec, refused before it is journaled: the same key runs later.
	check := wire.ExecRequest{Argv: []string{"sh", "-c", "wc -c < late; echo new > new"}, Key: "after-the-disk-filled"}
	_, err = cl.Exec(ctx, "w", check, nil)
	wantNoSpace(t, "exec", err)
	// A push from the mirror.
	local := pulled.Local
	after, err := mirror.Store.Commit(ctx, local.ID, (&core.Batch{}).WriteFile("pushed", randomBytes(1<<20), 0o644),
		fsstore.CommitInfo{Source: core.SourceExec, Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mirror.Store.Diff(ctx, local.ID, local.Head, after.Rev)
	if err != nil {
		t.Fatal(err)
	}
	push := func() (syncproto.PushResult, error) {
		return mirror.Push(ctx, "w", local.ID, cs, syncproto.PushHeader{PushID: "full-1", Base: pulled.HomeRev})
	}
	_, err = push()
	wantNoSpace(t, "push", err)
	// Through the host mount: ENOSPC, at the write or at the fsync that commits.
	out, err := shErr("head -c 1M /dev/urandom > " + mnt + "/mounted && sync " + mnt + "/mounted")
	if err == nil || !strings.Contains(out, "No space left on device") {
		t.Fatalf("write through the mount on a full disk: %v %q, want ENOSPC", err, out)
	}
	// The exec that wrote after the disk filled: its writes fit in its
	// volume, its output from then on is lost, its commit fails and waits.
	late.Wait()
	if late.err != nil {
		t.Fatalf("exec across the full disk: %v", late.err)
	}
	if late.rec.ExitCode != 0 || late.rec.State != core.ExecFailed || !strings.Contains(late.rec.Error, "no space left on device") || !strings.Contains(late.rec.Error, "committed once space is freed") {
		t.Fatalf("exec across the full disk: status %d, state %s, error %q; want failed until its writes are committed", late.rec.ExitCode, late.rec.State, late.rec.Error)
	}
	if !late.rec.OutputTruncated || !strings.Contains(late.rec.Error, "output log: ") || strings.Contains(late.output.String(), "20000") {
		t.Fatalf("exec across the full disk: its output log took it all (truncated %v, error %q, %d bytes of output)",
			late.rec.OutputTruncated, late.rec.Error, late.output.Len())
	}
	t.Logf("the exec across the full disk ended with: %s", late.rec.Error)
	// The daemon answers, and reads what it acknowledged.
	if _, err := cl.Workspaces(ctx); err != nil {
		t.Fatalf("list on a full disk: %v", err)
	}
	checkAcked := func(e *env) {
		t.Helper()
		tree := e.tree("w")
		for p, b := range acked {
			if tree[p] != string(b) {
				t.Fatalf("%s: acknowledged, now %d bytes", p, len(tree[p]))
			}
		}
	}
	checkAcked(e)
	checkStore(t, e.d.Store)

	// Space again: every path works, and the exec's writes are committed.
	free()
	if err := write("after", randomBytes(1<<20)); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	if _, err := cl.Attach(ctx, "w", bytes.NewReader(tarOf(t, "tarred", randomBytes(1<<20))), client.AttachOptions{Merge: true}); err != nil {
		t.Fatalf("attach after freeing space: %v", err)
	}
	if _, err := push(); err != nil {
		t.Fatalf("push after freeing space: %v", err)
	}
	sh(t, "head -c 1M /dev/urandom > "+mnt+"/mounted && sync "+mnt+"/mounted")
	eventually(t, "the exec's writes committed once space was freed", func() bool { return len(e.tree("w")["late"]) == 2<<20 })
	var out2 strings.Builder
	rec, err := cl.Exec(ctx, "w", check, func(ev wire.ExecEvent) error {
		out2.WriteString(ev.Data)
		return nil
	})
	if err != nil || rec.ExitCode != 0 || strings.TrimSpace(out2.String()) != "2097152" || e.tree("w")["new"] != "new\n" {
		t.Fatalf("exec after freeing space: %+v %v %q", rec, err, out2.String())
	}
	journal, err := cl.ExecRecord(ctx, "w", late.rec.ID)
	if err != nil || journal.Rev == 0 || journal.State != core.ExecExited || !strings.Contains(journal.Error, "committed once space was freed") {
		t.Fatalf("the journal of the exec across the full disk: %+v %v", journal, err)
	}
	checkAcked(e)
	checkStore(t, e.d.Store)

	// A restart on a full disk: computerd starts, serves what it stores,
	// and answers writes 507 until there is room again.
	if err := e.d.Close(); err != nil {
		t.Fatal(err)
	}
	free = fillDisk(t, disk)
	full := launch(t, data, cfg)
	full.token = e.token
	cl = client.New(full.d.URL(), full.token)
	if _, err := cl.Workspaces(ctx); err != nil {
		t.Fatalf("list after a restart on a full disk: %v", err)
	}
	checkAcked(full)
	writeUntilFull("write after a restart")
	free()
	if err := write("restarted", randomBytes(1<<20)); err != nil {
		t.Fatalf("write after freeing space again: %v", err)
	}
	// A restart finds everything acknowledged, and the store checks clean
	// offline too.
	if err := full.d.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := startIn(t, data, cfg)
	checkAcked(e2)
	if err := e2.d.Close(); err != nil {
		t.Fatal(err)
	}
	var fsck strings.Builder
	if err := daemoncmd.Run(ctx, []string{"computerd", "store", "fsck", "--data", data, "--all", "--hashes"}, &fsck, io.Discard); err != nil {
		t.Fatalf("computerd store fsck: %v\n%s", err, fsck.String())
	}
}

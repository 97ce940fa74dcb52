package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"computerd/client"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// TestSpecialFilesRoundTrip takes FIFOs, sockets and device nodes made on
// a host mount through every way a tree travels: the store, a diff, a tar
// export attached to another workspace, sync to an executor's mirror and
// back, and an exec's overlay (which sees them, cannot open a device, and
// commits the ones it makes).
func TestSpecialFilesRoundTrip(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	e := startMounts(t)
	cl := client.New(e.d.URL(), e.token)
	e.ok("ws", "create", "w")
	before := e.head("w")
	dir := filepath.Join(t.TempDir(), "mnt")
	e.ok("mount", "w", dir)
	sh(t, `cd `+dir+` && mkdir d && mkfifo -m 640 d/fifo && mknod -m 666 null c 1 3 && mknod -m 600 loop b 7 0 &&
		python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("d/sock")' && chmod 755 d/sock && chown 5:6 loop`)
	if out := sh(t, "cat "+dir+"/null 2>&1 || true"); !strings.Contains(out, "Permission denied") {
		t.Fatalf("a device node opened on the host mount (it must be nodev): %q", out)
	}
	e.ok("umount", dir)
	want := map[string]string{
		"d":      "dir",
		"d/fifo": "prw-r----- 0:0",
		"d/sock": "Srwxr-xr-x 0:0",
		"null":   "Dcrw-rw-rw- 1:3",
		"loop":   "Drw------- 7:0",
	}
	if got := e.tree("w"); !reflect.DeepEqual(got, want) {
		t.Fatalf("store after the mount:\n%v\nwant\n%v", got, want)
	}
	w, _ := e.d.Store.Workspace(ctx, "alice", "w")
	sn, _ := e.d.Store.Snapshot(ctx, w.ID, core.Head)
	if st, err := sn.Stat(ctx, "loop"); err != nil || st.UID != 5 || st.GID != 6 {
		t.Fatalf("loop's owner: %+v %v", st, err)
	}

	if _, err := cl.Read(ctx, "w", "d/fifo", client.ReadOptions{}); err == nil || !strings.Contains(err.Error(), "no contents") {
		t.Fatalf("read of a FIFO through the API: %v", err)
	}

	// Diff: one mknod each; the text diff names them.
	cs, err := e.d.Store.Diff(ctx, w.ID, before, e.head("w"))
	if err != nil {
		t.Fatal(err)
	}
	mknods := map[string]core.Op{}
	for _, op := range cs.Ops {
		if op.Kind == core.OpMknod {
			mknods[op.Path] = op
		}
	}
	if len(mknods) != 4 || mknods["null"].Rdev != core.MakeDev(1, 3) || mknods["d/fifo"].Mode != fs.ModeNamedPipe|0o640 {
		t.Fatalf("diff: %v", cs.Ops)
	}
	if out := e.ok("diff", "--stat", "w", strconv.FormatInt(before, 10), strconv.FormatInt(e.head("w"), 10)); !strings.Contains(out, "null") {
		t.Fatalf("diff --stat: %q", out)
	}

	// Export: FIFOs and devices as tar has them; sockets, which tar cannot
	// hold, are left out (as GNU tar does).
	body, err := cl.Export(ctx, "w", client.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = string(hdr.Typeflag) + " " + strconv.FormatInt(hdr.Mode, 8) + " " + strconv.FormatInt(hdr.Devmajor, 10) + ":" + strconv.FormatInt(hdr.Devminor, 10)
	}
	wantTar := map[string]string{"d/": "5 755 0:0", "d/fifo": "6 640 0:0", "null": "3 666 1:3", "loop": "4 600 7:0"}
	if !reflect.DeepEqual(entries, wantTar) {
		t.Fatalf("export:\n%v\nwant\n%v", entries, wantTar)
	}
	e.ok("ws", "create", "w2")
	if _, err := cl.Attach(ctx, "w2", bytes.NewReader(archive), client.AttachOptions{}); err != nil {
		t.Fatal(err)
	}
	wantAttached := map[string]string{}
	for p, v := range want {
		if p != "d/sock" {
			wantAttached[p] = v
		}
	}
	if got := e.tree("w2"); !reflect.DeepEqual(got, wantAttached) {
		t.Fatalf("attached export:\n%v\nwant\n%v", got, wantAttached)
	}
	// agentctl attach of a directory carries them too (sockets aside).
	src := t.TempDir()
	sh(t, `cd `+src+` && mkfifo -m 640 fifo && mknod -m 660 tty c 4 1 &&
		python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")'`)
	e.ok("ws", "create", "w3")
	e.ok("attach", "w3", src)
	if got, want := e.tree("w3"), map[string]string{"fifo": "prw-r----- 0:0", "tty": "Dcrw-rw---- 4:1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("attach of a directory:\n%v\nwant\n%v", got, want)
	}
	// An archive with a device number Linux cannot hold is refused, whole.
	var bad bytes.Buffer
	tw := tar.NewWriter(&bad)
	tw.WriteHeader(&tar.Header{Name: "ok", Typeflag: tar.TypeFifo, Mode: 0o644})
	tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeChar, Mode: 0o644, Devmajor: 1 << 12})
	tw.Close()
	headW2 := e.head("w2")
	_, err = cl.Attach(ctx, "w2", &bad, client.AttachOptions{Merge: true})
	var we *wire.Error
	if !errors.As(err, &we) || we.Status != 400 || e.head("w2") != headW2 {
		t.Fatalf("attach of a device out of range: %v (head %d, was %d)", err, e.head("w2"), headW2)
	}

	// Sync: a full pull, an incremental one, and a push of a special file
	// made on the executor.
	m := newMirror(t, e)
	pulled, err := m.Pull(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if got := localTree(t, m.Store, pulled.Local.ID); !reflect.DeepEqual(got, want) {
		t.Fatalf("mirror after a full pull:\n%v\nwant\n%v", got, want)
	}
	if _, err := cl.Ops(ctx, "w", wire.Ops{Ops: []core.Op{{Kind: core.OpMknod, Path: "d/tty", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o620, Rdev: core.MakeDev(4, 1)}}}); err != nil {
		t.Fatal(err)
	}
	want["d/tty"] = "Dcrw--w---- 4:1"
	if pulled, err = m.Pull(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if got := localTree(t, m.Store, pulled.Local.ID); !reflect.DeepEqual(got, want) {
		t.Fatalf("mirror after an incremental pull:\n%v\nwant\n%v", got, want)
	}
	local := pulled.Local
	after, err := m.Store.Commit(ctx, local.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpMknod, Path: "executor-fifo", Mode: fs.ModeNamedPipe | 0o600}),
		fsstore.CommitInfo{Source: core.SourceExec, Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := m.Store.Diff(ctx, local.ID, local.Head, after.Rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Push(ctx, "w", local.ID, pushed, syncproto.PushHeader{PushID: "special-1", Base: pulled.HomeRev}); err != nil {
		t.Fatal(err)
	}
	want["executor-fifo"] = "prw------- 0:0"
	if got := e.tree("w"); !reflect.DeepEqual(got, want) {
		t.Fatalf("home after the push:\n%v\nwant\n%v", got, want)
	}

	// An exec sees them; a device does not open (the overlay is nodev, and
	// root in the sandbox may not make one); the FIFO and socket it makes
	// and the FIFO it chmods are its revision.
	out, errs, code := e.exec("w", "--", "sh", "-c", `test -p d/fifo && test -S d/sock && test -c null && test -b loop && echo seen
		cat null 2>/dev/null || echo no-open
		mknod dev c 1 3 2>/dev/null || echo no-mknod
		mkfifo made && chmod 600 d/fifo && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("made-sock")'`)
	if code != 0 || out != "seen\nno-open\nno-mknod\n" {
		t.Fatalf("exec: %d %q %q", code, out, errs)
	}
	want["made"] = "prw-r--r-- 0:0"
	want["made-sock"] = "Srwxr-xr-x 0:0"
	want["d/fifo"] = "prw------- 0:0"
	if got := e.tree("w"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the exec:\n%v\nwant\n%v", got, want)
	}
}

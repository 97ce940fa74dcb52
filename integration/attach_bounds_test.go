package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/internal/testheap"
	"computerd/wire"
)

// manyEntries writes a tar of n entries to w as it is read: a directory
// for every 1000 files, each file of one byte, then closes w.
func manyEntries(w *io.PipeWriter, n int) {
	tw := tar.NewWriter(w)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	var err error
	for i := 0; i < n && err == nil; i++ {
		if i%1000 == 0 {
			err = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%04d/", i/1000), Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime})
			i++
			if i >= n || err != nil {
				break
			}
		}
		if err = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%04d/f%07d", i/1000, i), Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, ModTime: mtime}); err == nil {
			_, err = tw.Write([]byte{'a' + byte(i%26)})
		}
	}
	if err == nil {
		err = tw.Close()
	}
	w.CloseWithError(err)
}

// procHWM is the peak resident set size of process pid, in bytes.
func procHWM(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// attachEntriesEnv is a computerd process with a workspace w of alice's.
func attachEntriesEnv(t *testing.T) (*child, *client.Client) {
	dir := t.TempDir()
	token := tokenFor(t, dir, "alice")
	c := startChild(t, dir)
	cl := client.New(c.url, token)
	if _, err := cl.CreateWorkspace(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// Attach streams its entries into the store: the daemon's memory does
// not grow with the number of entries (it held ~0.9 KiB an entry until
// the commit, so 300k entries broke 256 MiB). Its RSS rises while
// SQLite's page caches fill (bounded: 64 MiB for the writer, 16 MiB per
// reader) and then stays flat: 185 MiB at the peak for 1M entries
// (`go run ./bench -suite attach`); set COMPUTERD_ATTACH_ENTRIES to run
// that many here.
func TestBoundAttachEntries(t *testing.T) {
	n := 300000
	if v := os.Getenv("COMPUTERD_ATTACH_ENTRIES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	c, cl := attachEntriesEnv(t)
	ctx := context.Background()
	attach := func(n int) (wire.AttachResult, time.Duration) {
		pr, pw := io.Pipe()
		go manyEntries(pw, n)
		start := time.Now()
		res, err := cl.Attach(ctx, "w", pr, client.AttachOptions{})
		if err != nil {
			t.Fatalf("attach %d entries: %v", n, err)
		}
		return res, time.Since(start)
	}
	res, took := attach(n)
	peak := procHWM(t, c.cmd.Process.Pid)
	files := n - (n+999)/1000
	t.Logf("attach of %d entries: %v (%.0f entries/s), revision %d; daemon peak RSS %.1f MiB",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), res.Revision.Rev, float64(peak)/(1<<20))
	if res.Files != files || res.Revision.Rev != 2 {
		t.Fatalf("attach: %d files in revision %d, want %d in revision 2", res.Files, res.Revision.Rev, files)
	}
	if peak > 256<<20 {
		t.Fatalf("daemon peak RSS %.1f MiB during the attach, want under 256 MiB", float64(peak)/(1<<20))
	}
	// One revision, holding exactly the archive.
	list, err := cl.Find(ctx, "w", client.FindOptions{Name: "f000[01]000"})
	if err != nil || len(list) != 0 {
		t.Fatalf("find f0000000 and f0001000 (directories' slots): %v %v", list, err)
	}
	r, err := cl.Read(ctx, "w", fmt.Sprintf("d%04d/f%07d", (n-1)/1000, n-1), client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if want := string(rune('a' + (n-1)%26)); string(got) != want {
		t.Fatalf("last file reads %q, want %q", got, want)
	}
	log, err := cl.Log(ctx, "w", 0)
	if err != nil || len(log) != 2 || log[0].Changes < n {
		t.Fatalf("log: %d revisions (%v), want 2, the last of at least %d changes", len(log), err, n)
	}
}

// An attach cut short (a bad entry after many good ones) leaves nothing:
// no revision, and the workspace as it was.
func TestAttachFailureLeavesNothing(t *testing.T) {
	_, cl := attachEntriesEnv(t)
	ctx := context.Background()
	if _, err := cl.Write(ctx, "w", "keep", strings.NewReader("kept"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for i := range 10000 {
			tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/f%d", i/100, i), Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
			tw.Write([]byte("x"))
		}
		tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeLink, Linkname: "d0/f0"})
		tw.Close()
		pw.Close()
	}()
	_, err := cl.Attach(ctx, "w", pr, client.AttachOptions{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Status != http.StatusBadRequest {
		t.Fatalf("attach with a hard link: %v, want 400", err)
	}
	ws, err := cl.Workspace(ctx, "w")
	if err != nil || ws.Head != 2 {
		t.Fatalf("head after the failed attach: %+v %v, want 2", ws, err)
	}
	list, err := cl.List(ctx, "w", "", 0, true)
	if err != nil || len(list) != 1 || list[0].Path != "keep" {
		t.Fatalf("tree after the failed attach: %+v %v, want keep alone", list, err)
	}
}

// A gzip archive that expands beyond 1000 times its size (past 64 MiB) is
// refused with 413 too_large, and nothing is committed.
func TestAttachDecompressionRatio(t *testing.T) {
	_, cl := attachEntriesEnv(t)
	ctx := context.Background()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	const size = 1 << 30
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
	zero := make([]byte, 1<<20)
	for range size >> 20 {
		tw.Write(zero)
	}
	tw.Close()
	zw.Close()
	t.Logf("1 GiB of zeros: %d bytes of gzip (%.0f:1)", buf.Len(), float64(size)/float64(buf.Len()))
	_, err := cl.Attach(ctx, "w", &buf, client.AttachOptions{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Status != http.StatusRequestEntityTooLarge || we.Code != wire.CodeTooLarge {
		t.Fatalf("attach of a gzip bomb: %v, want 413 too_large", err)
	}
	if ws, err := cl.Workspace(ctx, "w"); err != nil || ws.Head != 1 {
		t.Fatalf("head after the refused attach: %+v %v, want 1", ws, err)
	}
	// A well-compressed archive under the floor goes through.
	buf.Reset()
	zw, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw = tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: 32 << 20})
	for range 32 {
		tw.Write(zero)
	}
	tw.Close()
	zw.Close()
	if _, err := cl.Attach(ctx, "w", &buf, client.AttachOptions{}); err != nil {
		t.Fatalf("attach of 32 MiB of zeros: %v", err)
	}
}

// List, find and diff stream their answers: over a tree of 200k entries,
// a recursive listing (33 MiB of JSON) goes out while the daemon's heap grows by a
// few MiB. A diff of the 200k creates does too: the store sorts its ops
// (and, for stat, the changed paths) on disk and reads them back one at a
// time (it held ~900 bytes of heap a change before).
func TestBoundListings(t *testing.T) {
	const n = 200000
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	ctx := context.Background()
	pr, pw := io.Pipe()
	go manyEntries(pw, n)
	if _, err := cl.Attach(ctx, "w", pr, client.AttachOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int64, int) {
		req, _ := http.NewRequest("GET", e.d.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		size, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return size, resp.StatusCode
	}
	for _, tc := range []struct {
		name, path string
		bound      int64
	}{
		{"list", "/v1/workspaces/w/list/?recursive=1", 12 << 20},
		{"find", "/v1/workspaces/w/find?name=f*", 12 << 20},
		{"diff stat", "/v1/workspaces/w/diff?from=1&to=2&format=stat", 12 << 20},
		{"diff changeset", "/v1/workspaces/w/diff?from=1&to=2&format=changeset", 12 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var size int64
			grew := testheap.Growth(func() { size, _ = get(tc.path) })
			t.Logf("%s: %.1f MiB answered, heap grew %.1f MiB", tc.name, float64(size)/(1<<20), float64(grew)/(1<<20))
			if bound := tc.bound; grew > bound {
				t.Fatalf("heap grew %.1f MiB for an answer of %.1f MiB, want under %.1f MiB", float64(grew)/(1<<20), float64(size)/(1<<20), float64(tc.bound)/(1<<20))
			}
		})
	}
	// The streamed changeset is the diff, whole and in order: the
	// directories before the files in them.
	cs, err := cl.Changeset(ctx, "w", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	creates, seen := 0, map[string]bool{"": true} // manyEntries' n entries: 1 in 1000 a directory
	for _, op := range cs.Ops {
		switch op.Kind {
		case core.OpMkdir:
			seen[op.Path] = true
		case core.OpCreate:
			creates++
		default:
			continue
		}
		if dir, _ := path.Split(op.Path); !seen[strings.TrimSuffix(dir, "/")] {
			t.Fatalf("%s %s before its directory", op.Kind, op.Path)
		}
	}
	if cs.From != 1 || cs.To != 2 || creates+len(seen)-1 != n {
		t.Fatalf("changeset %d..%d with %d creates and %d mkdirs, want 1..2 with %d entries", cs.From, cs.To, creates, len(seen)-1, n)
	}
	// The client reads a streamed listing as it comes.
	entries := 0
	if err := cl.ListEach(ctx, "w", "", 0, true, func(core.Stat) error { entries++; return nil }); err != nil || entries != n {
		t.Fatalf("ListEach: %d entries (%v), want %d", entries, err, n)
	}
}

// A zstd archive attaches as a gzip one does, under the same ratio limit.
func TestAttachZstd(t *testing.T) {
	_, cl := attachEntriesEnv(t)
	ctx := context.Background()
	archive := func(files map[string]int) *bytes.Buffer {
		var buf bytes.Buffer
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		tw := tar.NewWriter(zw)
		for name, size := range files {
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)})
			for left := size; left > 0; left -= min(left, 1<<20) {
				tw.Write(bytes.Repeat([]byte{'z'}, min(left, 1<<20)))
			}
		}
		tw.Close()
		zw.Close()
		return &buf
	}
	res, err := cl.Attach(ctx, "w", archive(map[string]int{"a.txt": 5, "dir/b.txt": 3}), client.AttachOptions{})
	if err != nil || res.Files != 2 {
		t.Fatalf("attach of a zstd archive: %+v %v", res, err)
	}
	r, err := cl.Read(ctx, "w", "dir/b.txt", client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "zzz" {
		t.Fatalf("dir/b.txt reads %q", got)
	}
	bomb := archive(map[string]int{"zeros": 1 << 30})
	t.Logf("1 GiB as zstd: %d bytes", bomb.Len())
	_, err = cl.Attach(ctx, "w", bomb, client.AttachOptions{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("attach of a zstd bomb: %v, want 413", err)
	}
	if ws, err := cl.Workspace(ctx, "w"); err != nil || ws.Head != 2 {
		t.Fatalf("head after the refused attach: %+v %v, want 2", ws, err)
	}
	// A stream that is not zstd past its magic is bad input.
	_, err = cl.Attach(ctx, "w", bytes.NewReader(append([]byte{0x28, 0xb5, 0x2f, 0xfd}, bytes.Repeat([]byte{0xff}, 100)...)), client.AttachOptions{})
	if !errors.As(err, &we) || we.Status != http.StatusBadRequest {
		t.Fatalf("attach of a broken zstd stream: %v, want 400", err)
	}
}

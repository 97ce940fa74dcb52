package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/internal/tartest"
	"computerd/wire"
)

// cpuTime is the CPU time this process has used (user and system), from
// /proc/self/stat; the daemon of start runs in it.
func cpuTime(t testing.TB) time.Duration {
	t.Helper()
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's name (which may hold spaces), from
	// the state, field 3: utime and stime are fields 14 and 15, in ticks.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// busy is the share of a core this process uses over d.
func busy(t testing.TB, d time.Duration) float64 {
	before, start := cpuTime(t), time.Now()
	time.Sleep(d)
	return float64(cpuTime(t)-before) / float64(time.Since(start))
}

// attachRaw posts archive to ws's attach as alice and answers the status
// and the body.
func (e *env) attachRaw(ctx context.Context, ws string, archive []byte) (int, []byte, error) {
	return e.attachSent(ctx, ws, archive, nil)
}

// attachSent is attachRaw that closes sent, if not nil, once the whole
// archive has gone to the daemon's socket.
func (e *env) attachSent(ctx context.Context, ws string, archive []byte, sent chan struct{}) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", e.d.URL()+"/v1/workspaces/"+ws+"/attach", &eofReader{r: bytes.NewReader(archive), eof: sent})
	if err != nil {
		return 0, nil, err
	}
	req.ContentLength = int64(len(archive))
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// eofReader reads r and closes eof, if not nil, when r is at its end.
type eofReader struct {
	r   io.Reader
	eof chan struct{}
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF && e.eof != nil {
		close(e.eof)
		e.eof = nil
	}
	return n, err
}

// A 3 KiB archive with a sparse entry of 1 TiB (in either of GNU's
// formats) is refused with 413 once its zeros pass the bound (64 MiB for
// so small a request), and commits nothing; the daemon is idle again as
// soon as it has answered. (It made all of the entry's zeros, ~3 minutes
// of a core here, on long after the client had given up.)
func TestBoundSparseAttach(t *testing.T) {
	for _, oldGNU := range []bool{false, true} {
		t.Run(fmt.Sprintf("oldgnu=%v", oldGNU), func(t *testing.T) { testBoundSparseAttach(t, oldGNU) })
	}
}

func testBoundSparseAttach(t *testing.T, oldGNU bool) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "keep", "kept")
	before := e.head("w")
	archive := tartest.Archive(nil, tartest.Sparse{Name: "huge", Size: 1 << 40, Data: map[int64][]byte{0: []byte("start"), 1<<40 - 3: []byte("end")}, OldGNU: oldGNU})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0, cpu0 := time.Now(), cpuTime(t)
	status, body, err := e.attachRaw(ctx, "w", archive)
	took, cpu := time.Since(t0), cpuTime(t)-cpu0
	if err != nil {
		t.Fatalf("attach of %d bytes with a sparse entry of 1 TiB: %v after %v", len(archive), err, took)
	}
	t.Logf("attach of %d bytes, a sparse entry of 1 TiB: %d in %v, %v of CPU: %s", len(archive), status, took.Round(time.Millisecond), cpu, bytes.TrimSpace(body))
	wantError(t, status, body, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
	if !strings.Contains(string(body), "limit") || !strings.Contains(string(body), "1000") {
		t.Fatalf("the answer does not name the limit: %s", body)
	}
	if after := e.head("w"); after != before {
		t.Fatalf("head moved from %d to %d", before, after)
	}
	if got := e.tree("w"); len(got) != 1 || got["keep"] != "kept" {
		t.Fatalf("tree after the refused attach: %v", got)
	}
	if b := busy(t, time.Second); b > 0.2 {
		t.Fatalf("the process used %.2f of a core in the second after the answer, want ~0", b)
	}
}

// A client that goes away while its sparse entry is expanded (within the
// bound: 128 MiB sent allow 128 GiB of zeros, ~4 s of a core) stops the
// daemon's work at once; it used to expand the rest.
func TestBoundSparseAttachStopsWhenClientGoes(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	before := e.head("w")
	const size = 120 << 30
	archive := tartest.Archive([]tartest.File{{Name: "pad", Data: make([]byte, 128<<20)}},
		tartest.Sparse{Name: "big", Size: size, Data: map[int64][]byte{size - 4: []byte("tail")}})
	ctx, cancel := context.WithCancel(context.Background())
	sent := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		status, body, err := e.attachSent(ctx, "w", archive, sent)
		if err == nil {
			err = fmt.Errorf("answered %d %s", status, body)
		}
		done <- err
	}()
	select {
	case <-sent:
	case err := <-done:
		t.Fatalf("attach: %v before the archive was sent", err)
	}
	// The daemon reads the last of the pad from its socket and then makes
	// up the sparse entry's zeros: a core's worth of work.
	time.Sleep(500 * time.Millisecond)
	if b := busy(t, 300*time.Millisecond); b < 0.5 {
		t.Fatalf("the attach used %.2f of a core before the client left, want a core's worth", b)
	}
	cancel()
	left := time.Now()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("attach: %v, want the client's own cancellation", err)
	}
	// Quiet within a second: sample in tenths until one is idle (the
	// time counts to the end of that tenth).
	var quiet time.Duration
	for {
		b := busy(t, 100*time.Millisecond)
		if quiet = time.Since(left); b <= 0.1 {
			break
		}
		if quiet > 5*time.Second {
			t.Fatalf("still %.2f of a core busy %v after the client left", b, quiet.Round(time.Millisecond))
		}
	}
	after := busy(t, time.Second)
	t.Logf("idle (under 0.1 of a core) %v after the client left; %.3f of a core in the second after", quiet.Round(time.Millisecond), after)
	if quiet > time.Second || after > 0.1 {
		t.Fatalf("quiet after %v, then %.2f of a core, want within a second and ~0", quiet, after)
	}
	if got := e.head("w"); got != before {
		t.Fatalf("head moved from %d to %d", before, got)
	}
}

// A moderately sparse file, within the bound, attaches whole: its data
// where the map puts it and zeros between, in GNU's PAX format and in its
// old one, which tar -S writes by default (refused as an unknown type
// before).
func TestAttachSparseWithinBound(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	const size = 40 << 20
	frags := map[int64][]byte{0: []byte("head"), 1<<20 + 7: []byte("middle"), size - 4: []byte("tail")}
	want := make([]byte, size)
	for off, b := range frags {
		copy(want[off:], b)
	}
	for _, oldGNU := range []bool{false, true} {
		t.Run(fmt.Sprintf("oldgnu=%v", oldGNU), func(t *testing.T) {
			archive := tartest.Archive([]tartest.File{{Name: "plain", Data: []byte("pppppppppp")}}, tartest.Sparse{Name: "sparse", Size: size, Data: frags, OldGNU: oldGNU})
			status, body, err := e.attachRaw(context.Background(), "w", archive)
			if err != nil || status != http.StatusOK {
				t.Fatalf("attach: %d %s %v", status, body, err)
			}
			r, err := cl.Read(context.Background(), "w", "sparse", client.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("sparse reads %d bytes, not the %d of its map", len(got), len(want))
			}
			if tree := e.tree("w"); tree["plain"] != "pppppppppp" {
				t.Fatalf("plain reads %q", tree["plain"])
			}
		})
	}
}

// Ops that make zeros they do not carry (a truncate that lengthens a
// file, a write past its end, content whose size runs past its chunks)
// are bounded like a sparse archive: past the bound, 413 and nothing
// committed; within it, and shortening a file, they go through.
func TestBoundOpsHoles(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "f", "data")
	ops := func(ops ...core.Op) (int, []byte) {
		b, err := json.Marshal(wire.Ops{Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		return e.mustHTTP("POST", "/v1/workspaces/w/ops", nil, string(b))
	}
	for _, tc := range []struct {
		name string
		ops  []core.Op
	}{
		{"truncate", []core.Op{{Kind: core.OpTruncate, Path: "f", Size: 1 << 40}}},
		{"write past the end", []core.Op{{Kind: core.OpWrite, Path: "f", Offset: 1 << 50, Data: []byte("x")}}},
		{"content past its chunks", []core.Op{{Kind: core.OpCreate, Path: "g", Content: &core.Content{Size: 1 << 62, Chunks: []core.ChunkRef{}}}}},
		{"many truncates under the bound each", func() []core.Op {
			var ops []core.Op
			for i := range 100 {
				ops = append(ops, core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("h%d", i), Data: []byte{}}, core.Op{Kind: core.OpTruncate, Path: fmt.Sprintf("h%d", i), Size: 1 << 20})
			}
			return ops
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.head("w")
			status, body := ops(tc.ops...)
			t.Logf("%d %s", status, bytes.TrimSpace(body))
			wantError(t, status, body, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
			if !strings.Contains(string(body), "limit") {
				t.Fatalf("the answer does not name the limit: %s", body)
			}
			if after := e.head("w"); after != before {
				t.Fatalf("head moved from %d to %d", before, after)
			}
		})
	}
	// Within the bound, and shortening, commit.
	for _, op := range []core.Op{
		{Kind: core.OpTruncate, Path: "f", Size: 60 << 20},
		{Kind: core.OpTruncate, Path: "f", Size: 2},
		{Kind: core.OpWrite, Path: "f", Offset: 1 << 20, Data: []byte("x")},
	} {
		if status, body := ops(op); status != http.StatusOK {
			t.Fatalf("%v: %d %s", op, status, body)
		}
	}
	if st, err := client.New(e.d.URL(), e.token).Stat(context.Background(), "w", "f", 0); err != nil || st.Size != 1<<20+1 {
		t.Fatalf("f: %+v %v, want %d bytes", st, err, 1<<20+1)
	}
}

// An entry with an empty name, or a file named as the archive's root, is
// bad input: 400 invalid, nothing committed (an entry named "" used to be
// skipped as the root, so its archive replaced the tree with nothing).
func TestAttachRefusesEmptyName(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "keep", "kept")
	for _, tc := range []struct {
		name string
		hdr  tar.Header
	}{
		{"empty file name", tar.Header{Name: "", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
		{"empty directory name", tar.Header{Name: "", Typeflag: tar.TypeDir, Mode: 0o755}},
		{"file named dot", tar.Header{Name: ".", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
		{"symlink named dot", tar.Header{Name: ".", Typeflag: tar.TypeSymlink, Linkname: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			if err := tw.WriteHeader(&tc.hdr); err != nil {
				t.Fatal(err)
			}
			if tc.hdr.Size > 0 {
				tw.Write([]byte("x"))
			}
			tw.Close()
			before := e.head("w")
			status, body, err := e.attachRaw(context.Background(), "w", buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d %s", status, bytes.TrimSpace(body))
			wantError(t, status, body, http.StatusBadRequest, wire.CodeInvalid)
			if after := e.head("w"); after != before {
				t.Fatalf("head moved from %d to %d", before, after)
			}
			if got := e.tree("w"); len(got) != 1 || got["keep"] != "kept" {
				t.Fatalf("tree after the refused attach: %v", got)
			}
		})
	}
	// A body with nothing in it, not even an archive's end, is refused:
	// by default an attach replaces the tree.
	status, body, err := e.attachRaw(context.Background(), "w", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, status, body, http.StatusBadRequest, wire.CodeInvalid)
	if got := e.tree("w"); len(got) != 1 || got["keep"] != "kept" {
		t.Fatalf("tree after an attach of an empty body: %v", got)
	}
	// The root as a directory ("./", as tar -C DIR . writes it) is fine.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "./a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("a"))
	tw.Close()
	if status, body, err := e.attachRaw(context.Background(), "w", buf.Bytes()); err != nil || status != http.StatusOK {
		t.Fatalf("attach of ./ and ./a: %d %s %v", status, body, err)
	}
	if got := e.tree("w"); len(got) != 1 || got["a"] != "a" {
		t.Fatalf("tree: %v", got)
	}
}

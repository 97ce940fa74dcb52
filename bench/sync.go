package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
)

func init() {
	register(Suite{Name: "sync", Doc: "syncproto: first pull vs tar over loopback, bytes on the wire of incremental pull and push", Run: runSync})
}

var barFirstPull = Bar{On: "ratio", Op: "<=", X: 2} // pull time / tar-over-loopback time

// firstPullRuns is how many first pulls (each into a new executor store)
// and tar references run, taking turns; the best of each counts.
const firstPullRuns = 2

// wireCounter counts the bytes a client's connections carry, both ways.
type wireCounter struct{ n atomic.Int64 }

type countedConn struct {
	net.Conn
	c *wireCounter
}

func (c countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.c.n.Add(int64(n))
	return n, err
}

func (c countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.c.n.Add(int64(n))
	return n, err
}

func (w *wireCounter) client() *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countedConn{c, w}, nil
	}}}
}

// tarOverLoopback times copying src to a new directory under dir as tar
// over a loopback TCP connection: `tar c` on one end, `tar x` on the other
// (what the pull does: read a tree, send it, store it).
// Without extract the receiving end only counts the bytes.
func tarOverLoopback(ctx context.Context, src, dir string, extract bool) (time.Duration, int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer ln.Close()
	dst := filepath.Join(dir, fmt.Sprintf("tar-copy-%d", time.Now().UnixNano()))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, 0, err
	}
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		var n countingReader
		n.r = c
		if !extract {
			_, err = io.Copy(io.Discard, &n)
			got <- result{n.n, err}
			return
		}
		x := exec.CommandContext(ctx, "tar", "-xf", "-", "-C", dst)
		x.Stdin = &n
		err = x.Run()
		got <- result{n.n, err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, "tar", "-cf", "-", "-C", src, ".")
	cmd.Stdout = conn
	err = cmd.Run()
	conn.Close()
	r := <-got
	d := time.Since(start)
	if err == nil {
		err = r.err
	}
	return d, r.n, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func runSync(ctx context.Context, env *Env) error {
	tree, err := scanTree(ctx, env.Src)
	if err != nil {
		return err
	}
	d, token, err := startDaemon(ctx, daemon.Config{DataDir: filepath.Join(env.Dir, "home"), NoExec: true})
	if err != nil {
		return err
	}
	defer d.Close()
	w, err := d.Store.CreateWorkspace(ctx, "bench", "src")
	if err != nil {
		return err
	}
	importStart := time.Now()
	if _, err := d.Store.ImportDir(ctx, w.ID, env.Src, true, fsstore.CommitInfo{Source: core.SourceAPI, Tenant: "bench"}, nil); err != nil {
		return err
	}
	importTime := time.Since(importStart)

	// 1. First pull, into an empty executor store, against tar c | loopback
	// | tar x, taking turns; the best of firstPullRuns each counts.
	var (
		wire                        wireCounter
		m                           *syncproto.Mirror
		local                       *fsstore.Store
		st                          syncproto.PullStats
		tarTime, sendTime, pullTime time.Duration
		tarBytes                    int64
		wireFirst                   int64
	)
	best := func(b *time.Duration, d time.Duration) {
		if *b == 0 || d < *b {
			*b = d
		}
	}
	for i := range firstPullRuns {
		t, n, err := tarOverLoopback(ctx, env.Src, env.Dir, true)
		if err != nil {
			return fmt.Errorf("tar reference: %w", err)
		}
		best(&tarTime, t)
		tarBytes = n
		if t, _, err = tarOverLoopback(ctx, env.Src, env.Dir, false); err != nil {
			return fmt.Errorf("tar reference: %w", err)
		}
		best(&sendTime, t)
		local = fsstore.New(filepath.Join(env.Dir, fmt.Sprintf("executor-%d", i)))
		if err := local.Open(ctx); err != nil {
			return err
		}
		defer local.Close()
		m = &syncproto.Mirror{Client: &syncproto.Client{URL: d.URL(), Token: token, HTTP: wire.client()}, Store: local, Tenant: "bench"}
		before := wire.n.Load()
		if err := env.phase(ctx, "first_pull", func(ctx context.Context) error {
			start := time.Now()
			st, err = m.Pull(ctx, "src")
			best(&pullTime, time.Since(start))
			return err
		}); err != nil {
			return err
		}
		wireFirst = wire.n.Load() - before
	}
	env.Emit(Result{Name: "sync/first_pull_time", Value: secs(pullTime), Unit: "s",
		Note: fmt.Sprintf("best of %d; %d files, %.1f MB of content; %d chunks, %.1f MB of chunk data, %.1f MB on the wire; pull %.0f MB/s, tar c|tar x over loopback %.0f MB/s (%.1f MB)",
			firstPullRuns, tree.Files, float64(tree.Bytes)/1e6, st.Chunks, float64(st.Bytes)/1e6, float64(wireFirst)/1e6,
			mbps(tree.Bytes, pullTime), mbps(tarBytes, tarTime), float64(tarBytes)/1e6)}.
		withRef("tar_c_loopback_tar_x_s", secs(tarTime)).check(barFirstPull))
	env.Emit(Result{Name: "sync/first_pull_vs_send_only", Value: secs(pullTime), Unit: "s",
		Note: "the same pull against tar c over loopback into a byte counter (nothing stored on the receiving side); no bar"}.
		withRef("tar_c_loopback_s", secs(sendTime)).check(Bar{}))
	env.Emit(Result{Name: "sync/first_pull_vs_local_import", Value: secs(pullTime), Unit: "s",
		Note: "the same pull against the home's own import of the tree from the local file system (fsstore.ImportDir, one run): what storing it costs with no network; no bar"}.
		withRef("import_dir_s", secs(importTime)).check(Bar{}))

	// 2. One changed file: an incremental pull.
	changed := strings.Repeat("incremental sync payload line\n", 4000) // ~116 KB
	if _, err := d.Store.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("changed.txt", []byte(changed), 0o644), fsstore.CommitInfo{Source: core.SourceAPI, Tenant: "bench"}); err != nil {
		return err
	}
	size := int64(len(changed))
	before := wire.n.Load()
	if st, err = m.Pull(ctx, "src"); err != nil {
		return err
	}
	pulled := wire.n.Load() - before
	env.Emit(Result{Name: "sync/incremental_pull_wire_bytes", Value: float64(pulled), Unit: "bytes",
		Note: fmt.Sprintf("bar: under 2x the file plus 16 KiB; %d round trip(s)", st.Requests)}.
		withRef("changed_file_bytes", float64(size)).check(Bar{On: "value", Op: "<", X: float64(2*size + 16<<10)}))

	// 3. One changed file: a push.
	lw := st.Local
	rev, err := local.Commit(ctx, lw.ID, (&core.Batch{}).WriteFile("pushed.txt", []byte(changed+"pushed\n"), 0o644), fsstore.CommitInfo{Source: core.SourceExec, Tenant: "bench"})
	if err != nil {
		return err
	}
	cs, err := local.Diff(ctx, lw.ID, lw.Head, rev.Rev)
	if err != nil {
		return err
	}
	before = wire.n.Load()
	if _, err := m.Push(ctx, "src", lw.ID, cs, syncproto.PushHeader{PushID: "bench-push", Base: st.HomeRev}); err != nil {
		return err
	}
	pushed := wire.n.Load() - before
	env.Emit(Result{Name: "sync/incremental_push_wire_bytes", Value: float64(pushed), Unit: "bytes", Note: "one round trip"}.
		withRef("changed_file_bytes", float64(size+7)).check(Bar{On: "value", Op: "<", X: float64(2*(size+7) + 16<<10)}))
	return nil
}

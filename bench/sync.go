package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"computerd/fsstore"
	"computerd/syncproto"
)

func init() {
	register(Suite{Name: "sync", Doc: "syncproto: first pull vs tar over loopback, bytes on the wire of incremental pull and push", Run: runSync})
}

var barFirstPull = Bar{On: "ratio", Op: "<=", X: 2} // pull time / tar-over-loopback time

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

// tarOverLoopback times `tar c` of src streamed through a loopback TCP connection.
func tarOverLoopback(ctx context.Context, src string) (time.Duration, int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, 0, err
	}
	f, err := conn.(*net.TCPConn).File()
	conn.Close()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, "tar", "-cf", "-", "-C", src, ".")
	cmd.Stdout = f
	err = cmd.Run()
	f.Close()
	n := <-got
	return time.Since(start), n, err
}

func runSync(ctx context.Context, env *Env) error {
	tree, err := scanTree(ctx, env.Src)
	if err != nil {
		return err
	}
	d, token, err := startDaemon(ctx, filepath.Join(env.Dir, "home"), true)
	if err != nil {
		return err
	}
	defer d.Close()
	w, err := d.Store.CreateWorkspace(ctx, "bench", "src")
	if err != nil {
		return err
	}
	if _, err := d.Store.ImportDir(ctx, w.ID, env.Src, true, fsstore.CommitInfo{Source: fsstore.SourceAPI, Tenant: "bench"}, nil); err != nil {
		return err
	}
	local := fsstore.New(filepath.Join(env.Dir, "executor"))
	if err := local.Open(ctx); err != nil {
		return err
	}
	defer local.Close()
	var wire wireCounter
	m := &syncproto.Mirror{Client: &syncproto.Client{URL: d.URL(), Token: token, HTTP: wire.client()}, Store: local, Tenant: "bench"}

	// 1. First pull against tar over loopback (the reference first, then the pull).
	tarTime, tarBytes, err := tarOverLoopback(ctx, env.Src)
	if err != nil {
		return fmt.Errorf("tar reference: %w", err)
	}
	var pullTime time.Duration
	var st syncproto.PullStats
	if err := env.phase(ctx, "first_pull", func(ctx context.Context) error {
		start := time.Now()
		st, err = m.Pull(ctx, "src")
		pullTime = time.Since(start)
		return err
	}); err != nil {
		return err
	}
	env.Emit(Result{Name: "sync/first_pull_time", Value: secs(pullTime), Unit: "s",
		Note: fmt.Sprintf("%d files, %.1f MB of content; %d chunks, %.1f MB of chunk data, %.1f MB on the wire; pull %.0f MB/s, tar %.0f MB/s (%.1f MB)",
			tree.Files, float64(tree.Bytes)/1e6, st.Chunks, float64(st.Bytes)/1e6, float64(wire.n.Load())/1e6,
			mbps(tree.Bytes, pullTime), mbps(tarBytes, tarTime), float64(tarBytes)/1e6)}.
		withRef("tar_loopback_s", secs(tarTime)).check(barFirstPull))

	// 2. One changed file: an incremental pull.
	changed := strings.Repeat("incremental sync payload line\n", 4000) // ~116 KB
	if _, err := d.Store.Commit(ctx, w.ID, (&fsstore.Batch{}).WriteFile("changed.txt", []byte(changed), 0o644), fsstore.CommitInfo{Source: fsstore.SourceAPI, Tenant: "bench"}); err != nil {
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
	rev, err := local.Commit(ctx, lw.ID, (&fsstore.Batch{}).WriteFile("pushed.txt", []byte(changed+"pushed\n"), 0o644), fsstore.CommitInfo{Source: fsstore.SourceExec, Tenant: "bench"})
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

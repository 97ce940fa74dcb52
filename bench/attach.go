package main

// The attach suite: one archive of -attach-entries entries (default 1M:
// a directory for every 1000 one-byte files), generated as it is sent,
// attached to a computerd process; its peak RSS must stay within the
// daemon's bound, whatever the number of entries.

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"computerd/client"
	"computerd/computerd/daemon"
)

func init() {
	register(Suite{Name: "attach", Doc: "attach an archive of 1M entries to a computerd process: time and peak RSS", Run: runAttach})
}

// writeEntries writes a tar of n entries to w as it is read: a directory
// for every 1000 files, each file of one byte; then closes w.
func writeEntries(w *io.PipeWriter, n int) {
	tw := tar.NewWriter(w)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	var err error
	for i := 0; i < n && err == nil; i++ {
		if i%1000 == 0 {
			if err = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%04d/", i/1000), Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
				break
			}
			continue
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

func runAttach(ctx context.Context, env *Env) error {
	if os.Geteuid() != 0 {
		return errors.New("attach suite needs root (computerd serve mounts its view)")
	}
	setup, err := setupDaemon(ctx, env, "data", false)
	if err != nil {
		return err
	}
	data := setup.data
	d, err := setup.start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		d.stop(false)
		daemon.CleanupMounts(data)
	}()
	token, err := d.token(ctx, "bench")
	if err != nil {
		return err
	}
	cl := client.New(d.url, token)
	if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
		return err
	}
	n := env.AttachEntries
	env.Logf("attach: %d entries", n)
	pr, pw := io.Pipe()
	go writeEntries(pw, n)
	start := time.Now()
	res, err := cl.Attach(ctx, "w", pr, client.AttachOptions{})
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("attach %d entries: %w", n, err)
	}
	rss, err := d.peakRSSMiB()
	if err != nil {
		return err
	}
	env.Emit(Result{Name: "attach/entries_per_s", Value: float64(n) / took.Seconds(), Unit: "entries/s",
		Note: fmt.Sprintf("%d entries (%d files) in %v, one revision (%d)", n, res.Files, took.Round(time.Millisecond), res.Revision.Rev)}.check(Bar{}))
	env.Emit(Result{Name: "attach/rss_peak", Value: rss, Unit: "MiB",
		Note: "VmHWM of the computerd process, which streamed the entries into a stage and committed it as one revision"}.check(Bar{"value", "<=", loadRSSBarMiB}))
	return nil
}

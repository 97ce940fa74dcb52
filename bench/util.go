package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"computerd/computerd/daemon"
)

// errTimeout is the cause of a phase's cancellation when it overruns Env.Timeout.
var errTimeout = errors.New("timed out")

// phase runs fn, one metric's measurement, with the pprof label
// metric=name (so CPU profile samples can be attributed to it) and a
// deadline of env.Timeout. If the deadline cuts it short, the error wraps
// errTimeout.
func (e *Env) phase(ctx context.Context, name string, fn func(context.Context) error) error {
	pctx := ctx
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeoutCause(ctx, e.Timeout, errTimeout)
		defer cancel()
	}
	runtime.GC() // start every measurement without the previous one's garbage
	var err error
	pprof.Do(pctx, pprof.Labels("metric", name), func(ctx context.Context) { err = fn(ctx) })
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(pctx), errTimeout) {
		return fmt.Errorf("%s: %w after %v (%v)", name, errTimeout, e.Timeout, err)
	}
	return err
}

// timedOut is the failing result of a metric abandoned after timeout.
func timedOut(name, unit string, b Bar, err error) Result {
	r := Result{Name: name, Unit: unit, Note: err.Error()}.check(b)
	r.Pass = false
	return r
}

// walkSrc visits every entry beneath root (not root itself) in lexical
// order, with its slash-separated path relative to root, its full path and
// its lstat info. It is the one way every timed pass over the source tree
// reads it, so that the store and its references pay the same walk costs.
func walkSrc(ctx context.Context, root string, fn func(rel, full string, fi fs.FileInfo) error) error {
	return filepath.WalkDir(root, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if full == root {
			return nil
		}
		rel, err := filepath.Rel(root, full)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), full, fi)
	})
}

// treeStats counts what a source tree holds.
type treeStats struct {
	Files, Dirs, Symlinks, Other int
	Bytes                        int64 // regular file bytes
	DirList                      []string
	FirstFile                    string
	FirstSize                    int64
}

// scanTree reads the whole tree once (which also warms the page cache) and
// counts it.
func scanTree(ctx context.Context, root string) (treeStats, error) {
	var st treeStats
	err := walkSrc(ctx, root, func(rel, full string, fi fs.FileInfo) error {
		switch {
		case fi.IsDir():
			st.Dirs++
			st.DirList = append(st.DirList, rel)
		case fi.Mode()&fs.ModeSymlink != 0:
			st.Symlinks++
		case fi.Mode().IsRegular():
			n, err := readAll(full, io.Discard)
			if err != nil {
				return err
			}
			if n != fi.Size() {
				return fmt.Errorf("%s: read %d bytes, size %d: is the tree changing?", full, n, fi.Size())
			}
			if st.FirstFile == "" && n > 0 {
				st.FirstFile, st.FirstSize = rel, n
			}
			st.Files++
			st.Bytes += n
		default:
			st.Other++
		}
		return nil
	})
	return st, err
}

// readAll copies the file at path to w.
func readAll(path string, w io.Writer) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of ds,
// which it sorts.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p/100*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func ms(d time.Duration) float64   { return float64(d) / float64(time.Millisecond) }
func secs(d time.Duration) float64 { return d.Seconds() }

// mbps is bytes per second in MB/s (10^6 bytes).
func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

// removeGlob removes the files matching pattern.
func removeGlob(pattern string) error {
	names, err := filepath.Glob(pattern)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.Remove(n); err != nil {
			return err
		}
	}
	return nil
}

// countOver counts the durations longer than d.
func countOver(ds []time.Duration, d time.Duration) int {
	n := 0
	for _, x := range ds {
		if x > d {
			n++
		}
	}
	return n
}

// startDaemon starts an in-process computerd configured as cfg says, on a
// random port, and returns it with a token of tenant "bench".
func startDaemon(ctx context.Context, cfg daemon.Config) (*daemon.Daemon, string, error) {
	cfg.Listen = "127.0.0.1:0"
	d, err := daemon.Start(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	token, _, err := d.Store.CreateToken(ctx, "bench")
	if err != nil {
		d.Close()
		return nil, "", err
	}
	return d, token, nil
}

// startRSSWindow gives back to the OS what earlier suites of this process
// left behind and restarts its peak RSS (VmHWM) from the current RSS, so
// that the peak a suite reports is its own.
func startRSSWindow() {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSSMiB is the process's peak resident set size.
func peakRSSMiB() (float64, error) { return peakRSSOf("self") }

// peakRSSOf is the peak resident set size of process pid ("self" for this one).
func peakRSSOf(pid string) (float64, error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb float64
			if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb); err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM")
}

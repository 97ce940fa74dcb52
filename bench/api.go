package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	agentcmd "computerd/agentctl/command"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
)

func init() {
	register(Suite{Name: "api", Doc: "computerd API through agentctl: attach, export, grep of the source tree; small writes, flushed and not", Run: runAPI})
}

// barAttach: attach of the Go source tree end to end under 3 s.
var barAttach = Bar{On: "value", Op: "<", X: 3}

func runAPI(ctx context.Context, env *Env) error {
	tree, err := scanTree(ctx, env.Src)
	if err != nil {
		return err
	}
	startRSSWindow()
	d, token, err := startDaemon(ctx, daemon.Config{DataDir: filepath.Join(env.Dir, "api"), NoExec: true})
	if err != nil {
		return err
	}
	defer d.Close()
	tokenFile := filepath.Join(env.Dir, "api-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return err
	}
	agentctl := func(ctx context.Context, out io.Writer, args ...string) error {
		full := append([]string{"agentctl", "--server", d.URL(), "--token-file", tokenFile}, args...)
		var errb strings.Builder
		if err := agentcmd.Run(ctx, full, agentcmd.IO{Stdin: strings.NewReader(""), Stdout: out, Stderr: &errb}); err != nil {
			return fmt.Errorf("agentctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
		}
		return nil
	}
	if err := agentctl(ctx, io.Discard, "ws", "create", "src"); err != nil {
		return err
	}

	var refTime, attachTime time.Duration
	if err := env.phase(ctx, "attach", func(ctx context.Context) error {
		start := time.Now()
		err := agentctl(ctx, io.Discard, "attach", "src", env.Src)
		attachTime = time.Since(start)
		return err
	}); err != nil {
		return err
	}

	var exportTime time.Duration
	var exported countingWriter
	if err := env.phase(ctx, "export", func(ctx context.Context) error {
		start := time.Now()
		err := agentctl(ctx, &exported, "export", "src")
		exportTime = time.Since(start)
		return err
	}); err != nil {
		return err
	}
	refTar, err := timeCommand(ctx, "tar", "-cf", "-", "-C", env.Src, ".")
	if err != nil {
		return err
	}
	env.Emit(Result{Name: "api/export_time", Value: secs(exportTime), Unit: "s",
		Note: fmt.Sprintf("agentctl export: %.1f MB of tar, %.0f MB/s", float64(exported)/1e6, mbps(int64(exported), exportTime))}.
		withRef("local_tar_s", secs(refTar)).check(Bar{}))

	if rss, err := peakRSSMiB(); err == nil {
		env.Emit(Result{Name: "api/peak_rss_after_attach_export", Value: rss, Unit: "MiB",
			Note: "VmHWM of the bench process, which runs the daemon and agentctl's code, after attaching and exporting the tree"}.check(Bar{"value", "<=", 256}))
	}
	var grepTime time.Duration
	if err := env.phase(ctx, "grep", func(ctx context.Context) error {
		start := time.Now()
		err := agentctl(ctx, io.Discard, "grep", "src", `func \w+Reader\(`, "--glob", "*.go")
		grepTime = time.Since(start)
		return err
	}); err != nil {
		return err
	}
	refGrep, err := timeCommand(ctx, "grep", "-rE", "--include=*.go", `func \w+Reader\(`, env.Src)
	if err != nil {
		return err
	}
	env.Emit(Result{Name: "api/grep_tree_s", Value: secs(grepTime), Unit: "s", Note: "agentctl grep of a regexp over every .go file"}.
		withRef("local_grep_s", secs(refGrep)).check(Bar{}))
	// The reference: the same tree imported straight into a store, no HTTP, no tar.
	ref := fsstore.New(filepath.Join(env.Dir, "api-ref"))
	if err := ref.Open(ctx); err != nil {
		return err
	}
	defer ref.Close()
	rw, err := ref.CreateWorkspace(ctx, "bench", "src")
	if err != nil {
		return err
	}
	if err := env.phase(ctx, "ref_import_dir", func(ctx context.Context) error {
		start := time.Now()
		_, err := ref.ImportDir(ctx, rw.ID, env.Src, true, fsstore.CommitInfo{Source: core.SourceAPI, Tenant: "bench"}, nil)
		refTime = time.Since(start)
		return err
	}); err != nil {
		return err
	}
	env.Emit(Result{Name: "api/attach_time", Value: secs(attachTime), Unit: "s",
		Note: fmt.Sprintf("agentctl attach of %d files, %.1f MB through the API", tree.Files, float64(tree.Bytes)/1e6)}.
		withRef("store_import_dir_s", secs(refTime)).check(barAttach))
	return apiWrites(ctx, env)
}

// timeCommand runs a local command (output discarded) and times it.
func timeCommand(ctx context.Context, name string, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout = io.Discard
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return time.Since(start), nil
}

// countingWriter counts the bytes written to it.
type countingWriter int64

func (c *countingWriter) Write(b []byte) (int, error) {
	*c += countingWriter(len(b))
	return len(b), nil
}

package main

// The workload suite: commands on a real repository, through computerd's
// API (fresh container per exec, /workspace an overlay over the revision
// view, the exec's writes committed as one revision), against the same
// command in the same container configuration and limits (the same
// sandbox.Manager settings, helper and warm containers) with an ext4
// directory holding the same tree bound at /workspace. The page cache is
// dropped before each cold pair; a warm pair reads the tree once on each
// side first (see pair), then times a single pass on each.
//
// Metrics (all ratios are computerd / ext4 container):
//   - grep_first_exec: `grep -r` of the tree in the first exec after the
//     attach, both sides cold (bar <= 1.5);
//   - grep_again: the same exec again, head unchanged (bar <= 1.3);
//   - grep_after_change: again after a one-file write through the API, so
//     the exec runs on a new revision (bar <= 1.3);
//   - grep_*_vs_overlay: each grep against the same command with
//     /workspace a fresh overlay over the ext4 tree, mounted as an exec's
//     (no bar): what is left once overlayfs's own cost is out;
//   - tar_x: `tar x` of the tree's tarball into /workspace, commit
//     included (bar <= 1.5);
//   - git_add_commit: `git init && git add -A && git commit` of the tree,
//     commit included (bar <= 1.5);
//   - go_build, go_test: `go build ./...` and `go test ./...` of a
//     generated module of 200 packages (tests in 20), build cache empty
//     (bar <= 1.5);
//   - true_50k: `true` in a 50k-file workspace against `true` in an empty
//     one, p50 over runs (bar <= 1.2);
//   - commit_one_file_50k: an exec writing one file in a 50k-file
//     workspace against the same in a 1k-file one, p50 (bar <= 2);
//   - rss_peak: the computerd process's peak RSS (bar < 256 MiB).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"computerd/client"
	"computerd/computerd/daemon"
	"computerd/computerd/overlay"
	"computerd/computerd/sandbox"
	"computerd/core"
	"computerd/wire"
)

func init() {
	register(Suite{Name: "workload", Doc: "commands on a real repository in a sandbox, against an ext4 /workspace (needs root)", Run: runWorkload})
}

var (
	barWorkCold   = Bar{On: "ratio", Op: "<=", X: 1.5}
	barWorkWarm   = Bar{On: "ratio", Op: "<=", X: 1.3}
	barWorkWrite  = Bar{On: "ratio", Op: "<=", X: 1.5}
	barWorkTrue   = Bar{On: "ratio", Op: "<=", X: 1.2}
	barWorkCommit = Bar{On: "ratio", Op: "<=", X: 2}
	barWorkRSS    = Bar{On: "value", Op: "<", X: 256}
)

// workload is the suite's state: a daemon and its client, and the
// reference's container manager.
type workload struct {
	env *Env
	cl  *client.Client
	ref *sandbox.Manager
	n   int
	// ovl and ovlLayers are ovlRun's mounts and layers directory.
	ovl       *overlay.Mounts
	ovlLayers string
}

func runWorkload(ctx context.Context, env *Env) error {
	if os.Geteuid() != 0 {
		return errors.New("workload suite needs root (containers, FUSE, drop_caches)")
	}
	setup, err := setupDaemon(ctx, env, "workload", true)
	if err != nil {
		return err
	}
	helper := setup.helper
	d, err := setup.start(ctx)
	if err != nil {
		return err
	}
	defer d.stop(false)
	token, err := d.token(ctx, "bench")
	if err != nil {
		return err
	}
	ref := &sandbox.Manager{StateDir: filepath.Join(env.Dir, "workload-ref"), Helper: helper, Warm: daemon.DefaultSandboxWarm}
	defer ref.Close()
	if err := ref.Warmup(); err != nil {
		return err
	}
	w := &workload{env: env, cl: client.New(d.url, token), ref: ref}
	defer func() {
		if w.ovl != nil {
			w.ovl.Close()
		}
	}()

	// The same tree twice: attached to workspace src, copied to ext4.
	refSrc := filepath.Join(env.Dir, "ref-src")
	if out, err := exec.CommandContext(ctx, "cp", "-a", env.Src, refSrc).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %v: %s", env.Src, err, out)
	}
	if err := w.attachDir(ctx, "src", env.Src); err != nil {
		return err
	}
	grep := []string{"grep", "-r", "-c", "func main", "/workspace"}

	pair := func(name string, b Bar, cold bool, ws, refDir string, argv []string, change func() error) error {
		return w.pair(ctx, name, b, cold, ws, refDir, argv, change, false)
	}
	// The greps also run a third side: the ext4 tree under a fresh
	// overlay (ovlRun), what overlayfs costs by itself.
	grepPair := func(name string, b Bar, cold bool, change func() error) error {
		return w.pair(ctx, name, b, cold, "src", refSrc, grep, change, true)
	}
	if err := grepPair("grep_first_exec", barWorkCold, true, nil); err != nil {
		return err
	}
	if err := grepPair("grep_again", barWorkWarm, false, nil); err != nil {
		return err
	}
	oneChange := func() error {
		if _, err := w.cl.Write(ctx, "src", "README.bench", strings.NewReader("one change\n"), client.WriteOptions{}); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(refSrc, "README.bench"), []byte("one change\n"), 0o644)
	}
	if err := grepPair("grep_after_change", barWorkWarm, false, oneChange); err != nil {
		return err
	}
	gitArgv := []string{"sh", "-c", "cd /workspace && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm tree"}
	if err := pair("git_add_commit", barWorkWrite, false, "src", refSrc, gitArgv, nil); err != nil {
		return err
	}

	// go build and go test of a generated module of 200 packages, with a
	// build cache that starts empty in /tmp on both sides (HOME=/tmp in a
	// sandbox), as a fresh container meets it.
	refMod := filepath.Join(env.Dir, "ref-mod")
	if err := w.goModule(ctx, "mod", refMod); err != nil {
		return err
	}
	goEnv := "cd /workspace && export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local && "
	if err := pair("go_build", barWorkWrite, false, "mod", refMod, []string{"sh", "-c", goEnv + "go build ./..."}, nil); err != nil {
		return err
	}
	if err := pair("go_test", barWorkWrite, false, "mod", refMod, []string{"sh", "-c", goEnv + "go test ./... >/dev/null"}, nil); err != nil {
		return err
	}

	// tar x: the tarball lies in /workspace on both sides.
	tarball := filepath.Join(env.Dir, "src.tar")
	if out, err := exec.CommandContext(ctx, "tar", "-C", env.Src, "-cf", tarball, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("tar: %v: %s", err, out)
	}
	refTar := filepath.Join(env.Dir, "ref-tar")
	if err := os.Mkdir(refTar, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", tarball, refTar+"/src.tar").CombinedOutput(); err != nil {
		return fmt.Errorf("cp: %v: %s", err, out)
	}
	if _, err := w.cl.CreateWorkspace(ctx, "tar"); err != nil {
		return err
	}
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	_, err = w.cl.Write(ctx, "tar", "src.tar", f, client.WriteOptions{})
	f.Close()
	if err != nil {
		return err
	}
	tarArgv := []string{"sh", "-c", "mkdir /workspace/x && tar -xf /workspace/src.tar -C /workspace/x"}
	{
		var got, want time.Duration
		err := env.phase(ctx, "tar_x", func(ctx context.Context) error {
			var err error
			if want, err = w.refRun(ctx, refTar, tarArgv); err != nil {
				return fmt.Errorf("ext4 container: %w", err)
			}
			got, err = w.exec(ctx, "tar", tarArgv)
			return err
		})
		if err != nil {
			env.Emit(timedOut("workload/tar_x", "s", barWorkWrite, err))
			return err
		}
		env.Emit(Result{Name: "workload/tar_x", Value: secs(got), Unit: "s"}.withRef("ext4_container_s", secs(want)).check(barWorkWrite))
	}

	// Size does not cost: true and a one-file commit in 50k files.
	for _, ws := range []struct {
		name  string
		files int
	}{{"empty", 0}, {"f1k", 1000}, {"f50k", 50000}} {
		if err := w.generated(ctx, ws.name, ws.files); err != nil {
			return err
		}
	}
	runs := func(name string, argv []string, n int) ([]time.Duration, error) {
		var out []time.Duration
		for range n {
			d, err := w.exec(ctx, name, argv)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		return out, nil
	}
	var tEmpty, t50k, c1k, c50k []time.Duration
	err = env.phase(ctx, "true_50k", func(ctx context.Context) error {
		for range 10 {
			a, err := runs("empty", []string{"true"}, 1)
			if err != nil {
				return err
			}
			b, err := runs("f50k", []string{"true"}, 1)
			if err != nil {
				return err
			}
			tEmpty, t50k = append(tEmpty, a...), append(t50k, b...)
		}
		for i := range 10 {
			write := []string{"sh", "-c", fmt.Sprintf("echo %d > /workspace/one.txt", i)}
			a, err := runs("f1k", write, 1)
			if err != nil {
				return err
			}
			b, err := runs("f50k", write, 1)
			if err != nil {
				return err
			}
			c1k, c50k = append(c1k, a...), append(c50k, b...)
		}
		return nil
	})
	if err != nil {
		env.Emit(timedOut("workload/true_50k", "ms", barWorkTrue, err))
		return err
	}
	env.Emit(Result{Name: "workload/true_50k", Value: ms(percentile(t50k, 50)), Unit: "ms"}.withRef("true_empty_ms", ms(percentile(tEmpty, 50))).check(barWorkTrue))
	env.Emit(Result{Name: "workload/commit_one_file_50k", Value: ms(percentile(c50k, 50)), Unit: "ms"}.withRef("commit_one_file_1k_ms", ms(percentile(c1k, 50))).check(barWorkCommit))
	rss, err := d.peakRSSMiB()
	if err != nil {
		return err
	}
	env.Emit(Result{Name: "workload/rss_peak", Value: rss, Unit: "MiB", Note: "VmHWM of the computerd process over the whole suite"}.check(barWorkRSS))
	return nil
}

// warmUp reads every file of /workspace once (grep must read each whole:
// nothing matches; a pipe, as grep stops at a first match when its output
// is /dev/null).
var warmUp = []string{"sh", "-c", "grep -rc 'warm up' /workspace | wc -l"}

// pair times argv in workspace ws and in the reference's container with
// refDir at /workspace, and emits the ratio; with ovl, also in the
// reference's container with a fresh overlay over refDir (ovlRun),
// emitted as name_vs_overlay (no bar). A cold pair drops the page cache
// before each side. A warm pair first reads the tree once on each side
// (untimed; the computerd side through an exec of its own), then runs
// change (if any), then times each side: every side meets the command
// with caches as warm as the others'. Both sides need the warm-up: the
// reference's caches were dropped by the cold pair before it, and a
// machine may page out file pages that idle (DAMON's proactive reclaim
// on this one; docs/FUSE.md).
func (w *workload) pair(ctx context.Context, name string, b Bar, cold bool, ws, refDir string, argv []string, change func() error, ovl bool) error {
	var got, want, overlaid time.Duration
	err := w.env.phase(ctx, name, func(ctx context.Context) error {
		var err error
		if cold {
			dropCaches()
		} else {
			if _, err := w.exec(ctx, ws, warmUp); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
			if _, err := w.refRun(ctx, refDir, warmUp); err != nil {
				return fmt.Errorf("ext4 container: %w", err)
			}
		}
		if change != nil {
			if err := change(); err != nil {
				return err
			}
		}
		if want, err = w.refRun(ctx, refDir, argv); err != nil {
			return fmt.Errorf("ext4 container: %w", err)
		}
		if ovl {
			if cold {
				dropCaches()
			}
			if overlaid, err = w.ovlRun(ctx, refDir, argv); err != nil {
				return fmt.Errorf("ext4 overlay container: %w", err)
			}
		}
		if cold {
			dropCaches()
		}
		got, err = w.exec(ctx, ws, argv)
		return err
	})
	if err != nil {
		w.env.Emit(timedOut("workload/"+name, "s", b, err))
		return err
	}
	w.env.Emit(Result{Name: "workload/" + name, Value: secs(got), Unit: "s"}.withRef("ext4_container_s", secs(want)).check(b))
	if ovl {
		w.env.Emit(Result{Name: "workload/" + name + "_vs_overlay", Value: secs(got), Unit: "s",
			Note: fmt.Sprintf("against the same command with /workspace a fresh overlay over the ext4 tree, made as an exec's (overlayfs by itself: %.2fx the ext4 container)", secs(overlaid)/secs(want))}.
			withRef("ext4_overlay_container_s", secs(overlaid)).check(Bar{}))
	}
	return nil
}

// exec runs argv in workspace ws through the API and returns the time
// from request to the recorded end (the commit included).
func (w *workload) exec(ctx context.Context, ws string, argv []string) (time.Duration, error) {
	start := time.Now()
	rec, err := w.cl.Exec(ctx, ws, wire.ExecRequest{Argv: argv, Timeout: "20m"}, nil)
	d := time.Since(start)
	if err == nil && rec.ExitCode != 0 {
		err = fmt.Errorf("%s exited %d (%s)", strings.Join(argv, " "), rec.ExitCode, rec.Error)
	}
	if err == nil && rec.Error != "" {
		err = errors.New(rec.Error)
	}
	w.env.Logf("exec %s in %s: %v", strings.Join(argv, " "), ws, d)
	return d, err
}

// ovlRun runs argv in a container of the reference's with /workspace a
// fresh overlay over dir (under env.Dir), its upper layer in env.Dir,
// mounted as computerd mounts an exec's (overlay.MountPlain) and timed
// with the run, as an exec's mount is.
func (w *workload) ovlRun(ctx context.Context, dir string, argv []string) (time.Duration, error) {
	if w.ovl == nil {
		layers := filepath.Join(w.env.Dir, "ovl-layers")
		if err := os.Mkdir(layers, 0o755); err != nil {
			return 0, err
		}
		ms, err := overlay.OpenMounts(w.env.Dir, layers, w.ref.MappedIDs())
		if err != nil {
			return 0, err
		}
		w.ovl, w.ovlLayers = ms, layers
	}
	w.n++
	layer := filepath.Join(w.ovlLayers, fmt.Sprintf("run-%d", w.n))
	defer os.RemoveAll(layer)
	start := time.Now()
	if err := overlay.MountPlain(dir, layer, w.ovl); err != nil {
		return 0, err
	}
	defer unix.Unmount(filepath.Join(layer, "mnt"), unix.MNT_DETACH)
	return w.timedRef(ctx, "ext4 overlay", start, sandbox.Spec{ID: fmt.Sprintf("ovl-%d", w.n), Argv: argv, WorkspaceDir: filepath.Join(layer, "mnt"), WorkspaceMapped: true})
}

// refRun runs argv in a container of the reference's with dir at /workspace.
func (w *workload) refRun(ctx context.Context, dir string, argv []string) (time.Duration, error) {
	w.n++
	return w.timedRef(ctx, "ext4", time.Now(), sandbox.Spec{ID: fmt.Sprintf("ref-%d", w.n), Argv: argv, WorkspaceDir: dir})
}

// timedRef runs spec in a container of the reference's and returns the
// time since start; a command that exits non-zero is an error. label
// names the side in the log.
func (w *workload) timedRef(ctx context.Context, label string, start time.Time, spec sandbox.Spec) (time.Duration, error) {
	spec.Timeout = 20 * time.Minute
	res, err := w.ref.Run(ctx, spec, nil)
	d := time.Since(start)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("%s exited %d", strings.Join(spec.Argv, " "), res.ExitCode)
	}
	w.env.Logf("%s %s: %v", label, strings.Join(spec.Argv, " "), d)
	return d, err
}

// attachDir makes workspace ws and attaches dir to it.
func (w *workload) attachDir(ctx context.Context, ws, dir string) error {
	if _, err := w.cl.CreateWorkspace(ctx, ws); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "tar", "-C", dir, "-cf", "-", ".")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	_, aerr := w.cl.Attach(ctx, ws, out, client.AttachOptions{})
	io.Copy(io.Discard, out)
	return errors.Join(aerr, cmd.Wait())
}

// generated makes workspace ws holding n small files, 100 per directory,
// in one revision.
func (w *workload) generated(ctx context.Context, ws string, n int) error {
	if _, err := w.cl.CreateWorkspace(ctx, ws); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	var ops []core.Op
	for i := range n {
		ops = append(ops, core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("d%03d/f%05d.txt", i/100, i), Data: []byte(fmt.Sprintf("file %d\n", i))})
		if i%100 == 0 {
			ops = append(ops[:len(ops)-1], core.Op{Kind: core.OpMkdir, Path: fmt.Sprintf("d%03d", i/100)}, ops[len(ops)-1])
		}
	}
	_, err := w.cl.Ops(ctx, ws, wire.Ops{Ops: ops})
	return err
}

// goModule writes a module of modPackages packages, each importing up to
// three earlier ones, with a test in every tenth, to workspace ws (one
// revision) and to the directory refDir.
func (w *workload) goModule(ctx context.Context, ws, refDir string) error {
	files := map[string]string{"go.mod": "module gen\n\ngo 1.22\n"}
	for i := range modPackages {
		var imports []int
		for _, j := range []int{i / 3, i / 2, i - 1} {
			if j >= 0 && j < i && (len(imports) == 0 || imports[len(imports)-1] != j) {
				imports = append(imports, j)
			}
		}
		var src, body strings.Builder
		fmt.Fprintf(&src, "// Package p%03d is generated.\npackage p%03d\n\n", i, i)
		body.WriteString("x")
		for _, j := range imports {
			fmt.Fprintf(&src, "import \"gen/p%03d\"\n", j)
			fmt.Fprintf(&body, " + p%03d.F(x)", j)
		}
		fmt.Fprintf(&src, "\n// F adds its imports' F.\nfunc F(x int) int { return %s + %d }\n", body.String(), i)
		files[fmt.Sprintf("p%03d/f.go", i)] = src.String()
		if i%10 == 0 {
			files[fmt.Sprintf("p%03d/f_test.go", i)] = fmt.Sprintf("package p%03d\n\nimport \"testing\"\n\nfunc TestF(t *testing.T) {\n\tif F(1) < 1 {\n\t\tt.Fatal(F(1))\n\t}\n}\n", i)
		}
	}
	if _, err := w.cl.CreateWorkspace(ctx, ws); err != nil {
		return err
	}
	var ops []core.Op
	for i := range modPackages {
		ops = append(ops, core.Op{Kind: core.OpMkdir, Path: fmt.Sprintf("p%03d", i)})
		if err := os.MkdirAll(filepath.Join(refDir, fmt.Sprintf("p%03d", i)), 0o755); err != nil {
			return err
		}
	}
	for name, src := range files {
		ops = append(ops, core.Op{Kind: core.OpCreate, Path: name, Data: []byte(src)})
		if err := os.WriteFile(filepath.Join(refDir, name), []byte(src), 0o644); err != nil {
			return err
		}
	}
	_, err := w.cl.Ops(ctx, ws, wire.Ops{Ops: ops})
	return err
}

// modPackages is the size of goModule's module.
const modPackages = 200

// dropCaches drops the page, dentry and inode caches (both sides go cold).
func dropCaches() {
	exec.Command("sync").Run()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200)
}

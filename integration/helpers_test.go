package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	agentcmd "computerd/agentctl/command"
	"computerd/computerd/api"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
)

// env is one in-process computerd and a tenant's token for it.
type env struct {
	t     *testing.T
	d     *daemon.Daemon
	dir   string
	token string
}

// start runs a daemon on a random port with a fresh data directory.
func start(t *testing.T, limits api.Limits) *env {
	t.Helper()
	return startWith(t, daemon.Config{Limits: limits})
}

// startWith is start with more of the daemon's config set.
func startWith(t *testing.T, cfg daemon.Config) *env {
	t.Helper()
	return startIn(t, t.TempDir(), cfg)
}

// startIn is startWith on data directory dir.
func startIn(t *testing.T, dir string, cfg daemon.Config) *env {
	t.Helper()
	e := launch(t, dir, cfg)
	e.token = e.newToken("alice")
	return e
}

// launch starts a daemon on data directory dir, with no token made.
func launch(t *testing.T, dir string, cfg daemon.Config) *env {
	t.Helper()
	cfg.DataDir, cfg.Listen, cfg.MetricsListen = dir, "127.0.0.1:0", "127.0.0.1:0"
	cfg.SandboxHelper, cfg.SandboxWarm = sandboxHelper, daemon.DefaultSandboxWarm
	if cfg.ExecMaxWrite == 0 {
		// Each exec's upper layer, and each one the pool keeps ready,
		// takes this much disk while it exists: the default (4 GiB) would
		// have every daemon of the suite take 8 GiB.
		cfg.ExecMaxWrite = 256 << 20
	}
	d, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close daemon: %v", err)
		}
	})
	return &env{t: t, d: d, dir: dir}
}

// startMounts is start for host mounts: the temporary directory is a
// mount root and alice's token has the mount scope.
func startMounts(t *testing.T) *env {
	t.Helper()
	return startMountsIn(t, t.TempDir(), daemon.Config{})
}

// startMountsIn is startMounts with cfg on data directory dir.
func startMountsIn(t *testing.T, dir string, cfg daemon.Config) *env {
	t.Helper()
	cfg.MountRoots = append(cfg.MountRoots, os.TempDir())
	e := startIn(t, dir, cfg)
	e.token = e.newToken("alice", fsstore.ScopeMount)
	return e
}

// newToken creates a token for tenant through `computerd token create`, with scopes.
func (e *env) newToken(tenant string, scopes ...string) string {
	e.t.Helper()
	return tokenFor(e.t, e.dir, tenant, scopes...)
}

// run runs agentctl with args as the default tenant, stdin optional.
func (e *env) run(stdin io.Reader, args ...string) (string, string, error) {
	return e.runAs(e.token, stdin, args...)
}

func (e *env) runAs(token string, stdin io.Reader, args ...string) (string, string, error) {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var out, errb bytes.Buffer
	full := []string{"agentctl", "--server", e.d.URL()}
	if token != "" {
		full = append(full, "--token-file", tokenFile(e.t, token))
	}
	full = append(full, args...)
	err := agentcmd.Run(context.Background(), full, agentcmd.IO{Stdin: stdin, Stdout: &out, Stderr: &errb})
	return out.String(), errb.String(), err
}

// tokenFile writes token to a file of its own (mode 0600), as a user
// hands it to agentctl or an executor, and returns the file's path.
func tokenFile(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ok runs agentctl and fails the test unless it succeeds; it returns stdout.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	out, errs, err := e.run(nil, args...)
	if err != nil {
		e.t.Fatalf("agentctl %s: %v\nstderr: %s", strings.Join(args, " "), err, errs)
	}
	return out
}

// write stores content at p through `agentctl write`.
func (e *env) write(ws, p, content string) {
	e.t.Helper()
	if _, errs, err := e.run(strings.NewReader(content), "write", ws, p); err != nil {
		e.t.Fatalf("write %s: %v %s", p, err, errs)
	}
}

// fails runs agentctl, expects an error whose message contains want, and
// checks that the workspace's head did not move.
func (e *env) fails(ws, want string, args ...string) {
	e.t.Helper()
	e.failsAs(e.token, ws, want, nil, args...)
}

func (e *env) failsAs(token, ws, want string, stdin io.Reader, args ...string) {
	e.t.Helper()
	before := e.head(ws)
	out, _, err := e.runAs(token, stdin, args...)
	if err == nil {
		e.t.Fatalf("agentctl %s: succeeded (%q), want error %q", strings.Join(args, " "), out, want)
	}
	if !strings.Contains(err.Error(), want) {
		e.t.Fatalf("agentctl %s: error %q, want it to contain %q", strings.Join(args, " "), err, want)
	}
	if after := e.head(ws); after != before {
		e.t.Fatalf("agentctl %s failed but moved %s's head from %d to %d", strings.Join(args, " "), ws, before, after)
	}
}

// head is ws's head revision for tenant alice (0 if it does not exist).
func (e *env) head(ws string) int64 {
	e.t.Helper()
	if ws == "" {
		return 0
	}
	w, err := e.d.Store.Workspace(context.Background(), "alice", ws)
	if err != nil {
		return 0
	}
	return w.Head
}

// tree reads ws's head tree straight from the store: path -> content
// (directories as "dir", symlinks as "-> target", special files as their
// mode and device number).
func (e *env) tree(ws string) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	w, err := e.d.Store.Workspace(ctx, "alice", ws)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.treeOf(e.d.Store, w.ID)
}

// treeOf reads the head tree of workspace id ws of store s.
func (e *env) treeOf(s *fsstore.Store, ws int64) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	sn, err := s.Snapshot(ctx, ws, core.Head)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	err = sn.ReadTree(ctx, "", func(p string, st core.Stat, r io.Reader) error {
		switch {
		case p == "":
		case st.IsDir():
			out[p] = "dir"
		case core.IsSpecial(st.Mode):
			out[p] = fmt.Sprintf("%v %d:%d", st.Mode, core.DevMajor(st.Rdev), core.DevMinor(st.Rdev))
		case r == nil:
			out[p] = "-> " + st.Target
		default:
			b, err := io.ReadAll(r)
			out[p] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

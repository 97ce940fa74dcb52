package integration

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"computerd/computerd/daemon"
	"computerd/computerd/sandbox"
	"computerd/fsstore"
)

// TestStartFailsCleanly: a start that fails halfway, once the store is
// open, the sandbox helper (or the in-process warm pool) started and the
// runner recovered, because its listen or metrics address is taken, stops
// all of it again: no goroutine, child process, container, cgroup, FUSE
// mount or open file of the data directory is left.
func TestStartFailsCleanly(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name          string
		listen, metrc string
		helper        string
		want          string
	}{
		{"listen taken, helper", taken.Addr().String(), "", sandboxHelper, "listen:"},
		{"metrics taken, helper", "127.0.0.1:0", taken.Addr().String(), sandboxHelper, "metrics listen:"},
		{"listen taken, in-process", taken.Addr().String(), "127.0.0.1:0", "", "listen:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			before := MustHostState(t)
			d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dir, Listen: tc.listen, MetricsListen: tc.metrc,
				SandboxHelper: tc.helper, SandboxWarm: daemon.DefaultSandboxWarm})
			if err == nil {
				d.Close()
				t.Fatalf("start on a taken address: no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("start: %v, want an error with %q", err, tc.want)
			}
			before.MustBeBack(t, dir)
			// The data directory is free again: a second start takes it.
			d, err = daemon.Start(context.Background(), daemon.Config{DataDir: dir, Listen: "127.0.0.1:0", NoExec: true})
			if err != nil {
				t.Fatalf("start after the failed one: %v", err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCloseLeavesNothing: a daemon that served a host mount and made warm
// containers leaves nothing behind once closed.
func TestCloseLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	before := MustHostState(t)
	d, err := daemon.Start(context.Background(), daemon.Config{DataDir: dir, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0",
		SandboxHelper: sandboxHelper, SandboxWarm: daemon.DefaultSandboxWarm, MountRoots: []string{os.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, d: d, dir: dir}
	e.token = e.newToken("alice", fsstore.ScopeMount)
	e.ok("ws", "create", "w")
	e.write("w", "a.txt", "hello")
	mnt := t.TempDir()
	e.ok("mount", "w", mnt)
	e.write("w", "b.txt", "bye") // a commit the mount's refresh loop sees
	e.ok("exec", "w", "--", "true")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	before.MustBeBack(t, dir, mnt)
}

// hostState is what a test process holds that a daemon could leave behind.
type hostState struct {
	goroutines int
	mounts     map[string]bool
	children   map[int]bool
}

// MustHostState records the goroutines, mounts and child processes of this process.
func MustHostState(tb testing.TB) hostState {
	tb.Helper()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return hostState{goroutines: settledGoroutines(0), mounts: mustMounts(tb), children: children()}
}

// MustBeBack fails tb unless this process is back to state h, with nothing
// of a daemon on dataDir left: no new goroutine or child process, no new
// mount in dataDir or dirs (other processes on the host mount elsewhere
// meanwhile), no open file in dataDir, no container state and no cgroup
// of its sandbox.
func (h hostState) MustBeBack(tb testing.TB, dataDir string, dirs ...string) {
	tb.Helper()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // agentctl's
	if n := settledGoroutines(h.goroutines); n > h.goroutines {
		buf := make([]byte, 1<<20)
		tb.Errorf("%d goroutines, %d before the daemon:\n%s", n, h.goroutines, buf[:runtime.Stack(buf, true)])
	}
	dirs = append(dirs, dataDir)
	for m := range mustMounts(tb) {
		for _, d := range dirs {
			if !h.mounts[m] && (m == d || strings.HasPrefix(m, d+"/")) {
				tb.Errorf("mount left: %s", m)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []int
		for pid := range children() {
			if !h.children[pid] {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				tb.Errorf("child process left: %d %q", pid, cmd)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if p, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(p, dataDir+"/") {
			tb.Errorf("file left open: %s", p)
		}
	}
	state := daemon.SandboxStateDir(dataDir)
	if ents, _ := os.ReadDir(filepath.Join(state, "containers")); len(ents) > 0 {
		tb.Errorf("container state left: %d in %s", len(ents), state)
	}
	prefix := (&sandbox.Manager{StateDir: state}).CgroupName("")
	for _, cg := range cgroupDirs() {
		ents, _ := os.ReadDir(cg)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				tb.Errorf("cgroup left: %s", filepath.Join(cg, e.Name()))
			}
		}
	}
}

// settledGoroutines counts goroutines, waiting up to 5 s for the count
// to drop to want (0: for it to stop changing), as ending ones do.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if want > 0 && m <= want || want == 0 && m == n {
			return m
		}
		n = m
	}
	return n
}

func mustMounts(tb testing.TB) map[string]bool {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			out[f[4]] = true // the mount point
		}
	}
	return out
}

// children are the processes whose parent is this process.
func children() map[int]bool {
	self := os.Getpid()
	out := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == self {
				out[pid] = true
			}
		}
	}
	return out
}

// cgroupDirs are where this process's containers get their cgroups: its
// own cgroup and the one above it (cgroup v2).
func cgroupDirs() []string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own := filepath.Join("/sys/fs/cgroup", p)
			return []string{own, filepath.Dir(own)}
		}
	}
	return nil
}

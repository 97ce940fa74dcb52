package integration

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"computerd/client"
	"computerd/computerd/api"
	daemoncmd "computerd/computerd/command"
	"computerd/wire"
)

// unitSettings reads contrib/computerd.service's [Service] settings.
func unitSettings(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "contrib", "computerd.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			settings[k] = v
		}
	}
	return settings
}

// The unit stops computerd the way docs/LIFECYCLE.md ("Under systemd")
// says it must: SIGTERM to computerd alone, longer than its grace before
// the SIGKILL, its cgroup subtree delegated, no cap on the containers'
// processes; and its ExecStart is a computerd serve command line that
// computerd takes.
func TestSystemdUnit(t *testing.T) {
	s := unitSettings(t)
	for k, want := range map[string]string{
		"Delegate": "yes", "KillMode": "mixed", "KillSignal": "SIGTERM", "TasksMax": "infinity", "Type": "simple",
	} {
		if s[k] != want {
			t.Errorf("%s=%q, want %q", k, s[k], want)
		}
	}
	if _, ok := s["RuntimeDirectory"]; ok {
		t.Error("RuntimeDirectory= would remove every computerd's id claims at stop")
	}
	args := strings.Fields(s["ExecStart"])
	if len(args) < 2 || filepath.Base(args[0]) != "computerd" || args[1] != "serve" {
		t.Fatalf("ExecStart=%q", s["ExecStart"])
	}
	grace := 30 * time.Second // --shutdown-grace's default
	for i, a := range args {
		if a == "--shutdown-grace" && i+1 < len(args) {
			grace, _ = time.ParseDuration(args[i+1])
		}
	}
	stop, err := time.ParseDuration(s["TimeoutStopSec"] + "s")
	if err != nil || stop < grace+10*time.Second {
		t.Errorf("TimeoutStopSec=%s: want the grace (%v) and time to stop after it", s["TimeoutStopSec"], grace)
	}
	// Every flag is serve's: the command line parses, and fails only on
	// the flag added after it.
	cmdline := append([]string{"computerd"}, args[1:]...)
	cmdline = append(cmdline, "--gc-interval", "-1s")
	err = daemoncmd.Run(context.Background(), cmdline, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--gc-interval -1s") {
		t.Errorf("ExecStart's flags: %v", err)
	}
	if verify, err := exec.LookPath("systemd-analyze"); err == nil {
		if out, err := exec.Command(verify, "verify", filepath.Join("..", "contrib", "computerd.service")).CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "/usr/local/bin/computerd") { // not installed here
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}
}

// On cgroup v1 a container's cgroups lie beneath computerd's own in every
// hierarchy, systemd's own (name=systemd) included: under the unit they
// are in its subtree, which systemd's stop reaches (docs/LIFECYCLE.md).
// On cgroup v2 they lie beside it, in the parent of computerd's cgroup.
func TestContainersBeneathDaemonCgroup(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	own := cgroupsOf(t, "self")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	go client.New(e.d.URL(), e.token).Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo up; exec sleep 1014"}, Timeout: "1m"}, func(ev wire.ExecEvent) error {
		if strings.Contains(ev.Data, "up") {
			close(started)
		}
		return nil
	})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the exec did not start")
	}
	out, err := exec.Command("pgrep", "-f", "sleep 1014").Output()
	pids := strings.Fields(string(out))
	if err != nil || len(pids) != 1 {
		t.Fatalf("pgrep sleep 1014: %q %v", out, err)
	}
	theirs := cgroupsOf(t, pids[0])
	if v2, ok := own[""]; ok && len(own) == 1 {
		if got := theirs[""]; filepath.Dir(got) != filepath.Dir(v2) || got == v2 {
			t.Errorf("cgroup v2: the container's %q, want beside computerd's %q", got, v2)
		}
		return
	}
	for _, ctrl := range []string{"memory", "pids", "cpu", "name=systemd"} {
		if path := theirs[ctrl]; !strings.HasPrefix(path, strings.TrimSuffix(own[ctrl], "/")+"/computerd-") {
			t.Errorf("%s: the container's cgroup %q is not beneath computerd's %q", ctrl, path, own[ctrl])
		}
	}
	for ctrl, path := range theirs {
		if path != own[ctrl] && !strings.HasPrefix(path, strings.TrimSuffix(own[ctrl], "/")+"/") {
			t.Errorf("%q: the container's cgroup %q is outside computerd's %q", ctrl, path, own[ctrl])
		}
	}
}

// cgroupsOf reads /proc/PID/cgroup: controllers -> path ("" for v2).
func cgroupsOf(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out
}

package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"computerd/computerd/sandbox"
)

// buildHelper builds computerd-sandbox for the test.
func buildHelper(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "computerd-sandbox")
	out, err := exec.Command("go", "build", "-o", p, "computerd/computerd/sandboxd").CombinedOutput()
	if err != nil {
		t.Fatalf("go build computerd-sandbox: %v\n%s", err, out)
	}
	return p
}

// helperPids lists the running processes of the helper binary at path.
func helperPids(t *testing.T, path string) []int {
	t.Helper()
	var pids []int
	for _, pid := range hostProcs(t, path) {
		if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); strings.HasPrefix(string(b), path+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestHelper runs containers through the helper binary: output, stdin,
// exit codes, errors, timeout and cancel; the helper dying mid-run fails
// that run and the next one starts a new helper; Close stops it.
func TestHelper(t *testing.T) {
	m := MustManager(t)
	m.Helper = buildHelper(t)
	defer m.Close()

	res, o := MustRun(t, m, sandbox.Spec{Argv: sh("echo out; echo err >&2; read x; echo got $x; exit 3"), Stdin: strings.NewReader("in\n")})
	if res.ExitCode != 3 || o.stream(sandbox.Stdout) != "out\ngot in\n" || o.stream(sandbox.Stderr) != "err\n" {
		t.Fatalf("run through the helper: %+v stdout %q stderr %q", res, o.stream(sandbox.Stdout), o.stream(sandbox.Stderr))
	}
	if pids := helperPids(t, m.Helper); len(pids) != 1 {
		t.Fatalf("helper processes: %v", pids)
	}
	_, err := m.Run(context.Background(), sandbox.Spec{Argv: []string{"no-such-command"}}, nil)
	if !errors.Is(err, sandbox.ErrStart) || !errors.Is(err, sandbox.ErrNotFound) || err.Error() != "no-such-command: command not found in the sandbox" {
		t.Fatalf("missing command: %v, want ErrStart and ErrNotFound", err)
	}
	_, err = m.Run(context.Background(), sandbox.Spec{Argv: nil}, nil)
	if !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("empty argv: %v, want ErrInvalidSpec", err)
	}

	start := time.Now()
	res, _ = MustRun(t, m, sandbox.Spec{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if !res.TimedOut || res.Signal != syscall.SIGKILL || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %+v after %v", res, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	res, err = m.Run(ctx, sandbox.Spec{Argv: []string{"sleep", "30"}}, nil)
	cancel()
	if err != nil || !res.Canceled {
		t.Fatalf("cancel: %+v %v", res, err)
	}

	// The helper dies mid-run: that run fails, its container dies with
	// the helper, and the next run starts a new helper.
	mk := marker()
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(context.Background(), sandbox.Spec{Argv: sh("sleep " + mk + " & echo up; wait")}, func(sandbox.Event) {})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(hostProcs(t, mk)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, pid := range helperPids(t, m.Helper) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sandbox.ErrStart) {
			t.Fatalf("run whose helper died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run whose helper died did not return")
	}
	for len(hostProcs(t, mk)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := hostProcs(t, mk); len(left) > 0 {
		t.Fatalf("container outlived its helper: %v", left)
	}
	if ids, err := m.Sweep(context.Background()); err != nil || len(ids) != 1 {
		t.Fatalf("sweep after the helper died: %v %v", ids, err)
	}
	if res, _ := MustRun(t, m, sandbox.Spec{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Fatalf("run after the helper died: %+v", res)
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// A helper keeps the warm containers of its Manager.
	wm := MustManager(t)
	wm.Helper, wm.Warm = m.Helper, 1
	if err := wm.Warmup(); err != nil {
		t.Fatal(err)
	}
	if res, o := runWarm(t, wm, sandbox.Spec{Argv: []string{"cat"}, Stdin: strings.NewReader("warm\n")}); o.stream(sandbox.Stdout) != "warm\n" {
		t.Fatalf("warm run through the helper: %+v %q", res, o.stream(sandbox.Stdout))
	}
	// A helper killed with its pool: the next Run sweeps what its warm
	// containers left (their state and cgroups) before a new helper starts.
	deadline = time.Now().Add(10 * time.Second)
	for len(warmIDs(wm)) < wm.Warm && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	left := warmIDs(wm)
	if len(left) == 0 {
		t.Fatal("no warm containers to leave behind")
	}
	for _, pid := range helperPids(t, wm.Helper) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for len(helperPids(t, wm.Helper)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// (A Run sent to the helper as it died fails with ErrStart.)
	res, err = wm.Run(context.Background(), sandbox.Spec{Argv: []string{"true"}}, nil)
	if errors.Is(err, sandbox.ErrStart) {
		res, err = wm.Run(context.Background(), sandbox.Spec{Argv: []string{"true"}}, nil)
	}
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run after the helper died: %+v %v", res, err)
	}
	for _, id := range left {
		if slices.Contains(warmIDs(wm), id) || len(cgroupsNamed(t, wm.CgroupName(id))) > 0 {
			t.Errorf("warm container %s of the dead helper left behind", id)
		}
	}
	if err := wm.Close(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(helperPids(t, m.Helper)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pids := helperPids(t, m.Helper); len(pids) > 0 {
		t.Fatalf("helper still running after Close: %v", pids)
	}
}

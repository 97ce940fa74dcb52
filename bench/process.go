package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemonProcess is a computerd serve process on a data directory, for
// the suites that measure computerd as users run it: its own RSS, a
// SIGKILL of it.
type daemonProcess struct {
	daemonSetup
	cmd *exec.Cmd
	url string
}

// daemonSetup is what computerd processes start from: the computerd
// binary, its sandbox helper ("none": execs off) and a data directory.
type daemonSetup struct {
	bin, helper, data string
	args              []string // more flags of computerd serve
}

// setupDaemon builds computerd and, if sandboxed, its sandbox helper, and
// makes data directory name in env.Dir.
func setupDaemon(ctx context.Context, env *Env, name string, sandboxed bool) (daemonSetup, error) {
	s := daemonSetup{helper: "none", data: filepath.Join(env.Dir, name)}
	var err error
	if s.bin, err = buildTool(ctx, env.Dir, "computerd", "computerd/computerd"); err != nil {
		return s, err
	}
	if sandboxed {
		if s.helper, err = buildTool(ctx, env.Dir, "computerd-sandbox", "computerd/computerd/sandboxd"); err != nil {
			return s, err
		}
	}
	return s, os.Mkdir(s.data, 0o700)
}

var servingRE = regexp.MustCompile(`api=(http://\S+)`)

// start starts computerd serve on s's data directory and waits until it
// serves. Its log goes to the data directory's name plus ".log".
func (s daemonSetup) start(ctx context.Context) (*daemonProcess, error) {
	cmd := exec.Command(s.bin, append([]string{"serve", "--data", s.data, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--sandbox-helper", s.helper}, s.args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	urls := make(chan string, 1)
	ended := make(chan []string, 1) // stderr closed: the process is gone; its last lines
	logf, err := os.OpenFile(s.data+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	go func() {
		defer logf.Close()
		var last []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
			last = append(last[max(0, len(last)-9):], sc.Text())
		}
		ended <- last
	}()
	select {
	case u := <-urls:
		return &daemonProcess{daemonSetup: s, cmd: cmd, url: u}, nil
	case last := <-ended:
		cmd.Wait()
		return nil, fmt.Errorf("computerd exited before serving: %s", strings.Join(last, "\n"))
	case <-time.After(3 * time.Minute):
	case <-ctx.Done():
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, errors.New("computerd did not start serving")
}

// peakRSSMiB is the daemon's peak resident set size.
func (d *daemonProcess) peakRSSMiB() (float64, error) {
	return peakRSSOf(strconv.Itoa(d.cmd.Process.Pid))
}

// token creates a token for tenant; flags go to token create before it
// (--scope mount).
func (d *daemonProcess) token(ctx context.Context, tenant string, flags ...string) (string, error) {
	args := append(append([]string{"token", "create", "--data", d.data}, flags...), tenant)
	out, err := exec.CommandContext(ctx, d.bin, args...).Output()
	if err != nil {
		return "", fmt.Errorf("token create %s: %w", tenant, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// stop ends the daemon: gracefully (SIGTERM), or with SIGKILL.
func (d *daemonProcess) stop(kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	d.cmd.Process.Signal(sig)
	if kill {
		// A computerd killed while the kernel waited on its own FUSE
		// server for it cannot exit by itself; the next start frees it
		// (it aborts those connections), so this does not wait long.
		done := make(chan error, 1)
		go func() { done <- d.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
		}
		return nil
	}
	return d.cmd.Wait()
}

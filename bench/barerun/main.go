// Command barerun is the exec bench's reference: it runs `true` in
// containers with a minimal libcontainer configuration, created, run and
// destroyed directly, one per line of standard input (a number naming
// the container), and answers each with the nanoseconds it took. It is a
// binary of its own, as small as computerd-sandbox, because a container's
// init is the binary that starts it: timed from the bench's own binary, the
// reference would carry that binary's start-up.
//
// The configuration: mount, UTS, IPC, PID and network (loopback)
// namespaces, /proc, a tmpfs /dev with the default devices, a read-only
// bind of /usr (plus the /bin, /lib... links of a merged-usr host), a
// cgroup with only device rules; no output pipes, no limits, no masked
// paths, no seccomp.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	"computerd/computerd/sandbox"
)

func main() {
	sandbox.Init() // a re-executed container init never returns
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: barerun DIR (then container numbers on stdin)")
		os.Exit(2)
	}
	b, err := newBareRunner(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "barerun:", err)
		os.Exit(1)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		i, err := strconv.Atoi(strings.TrimSpace(in.Text()))
		if err != nil {
			fmt.Println("bad container number")
			continue
		}
		d, err := b.run(i)
		if err != nil {
			fmt.Println(strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Println(d.Nanoseconds())
	}
}

// bareRunner runs `true` in containers with the minimal configuration.
type bareRunner struct {
	stateDir, rootfs string
}

func newBareRunner(dir string) (*bareRunner, error) {
	b := &bareRunner{stateDir: filepath.Join(dir, "containers"), rootfs: filepath.Join(dir, "rootfs")}
	for _, d := range []string{"proc", "dev", "usr"} {
		if err := os.MkdirAll(filepath.Join(b.rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, l := range []string{"/bin", "/lib", "/lib64", "/sbin"} {
		if target, err := os.Readlink(l); err == nil {
			if err := os.Symlink(target, filepath.Join(b.rootfs, l)); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

func (b *bareRunner) config(i int) *configs.Config {
	rules := []*devconfig.Rule{{Type: devconfig.WildcardDevice, Major: devconfig.Wildcard, Minor: devconfig.Wildcard, Permissions: "rwm"}}
	var devs []*devconfig.Device
	for _, d := range specconv.AllowedDevices {
		if d.Path != "" {
			devs = append(devs, d)
			rules = append(rules, &d.Rule)
		}
	}
	caps := []string{"CAP_KILL", "CAP_AUDIT_WRITE"}
	return &configs.Config{
		Rootfs:  b.rootfs,
		Devices: devs,
		Namespaces: configs.Namespaces{
			{Type: configs.NEWNS}, {Type: configs.NEWUTS}, {Type: configs.NEWIPC},
			{Type: configs.NEWPID}, {Type: configs.NEWNET},
		},
		Networks:     []*configs.Network{{Type: "loopback", Address: "127.0.0.1/0", Gateway: "localhost"}},
		Capabilities: &configs.Capabilities{Bounding: caps, Effective: caps, Permitted: caps},
		Mounts: []*configs.Mount{
			{Source: "proc", Destination: "/proc", Device: "proc", Flags: unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV},
			{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755"},
			{Source: "/usr", Destination: "/usr", Device: "bind", Flags: unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY},
		},
		Cgroups: &cgroups.Cgroup{
			Path:      fmt.Sprintf("computerd-bench-bare-%d-%d", os.Getpid(), i),
			Resources: &cgroups.Resources{Devices: rules},
		},
	}
}

// run creates, runs and destroys one container running true.
func (b *bareRunner) run(i int) (time.Duration, error) {
	// The container's init dies with the thread that forked it (see
	// sandbox.Init): stay on one thread until it is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	c, err := libcontainer.Create(b.stateDir, fmt.Sprintf("bare-%d", i), b.config(i))
	if err != nil {
		return 0, err
	}
	p := &libcontainer.Process{Args: []string{"/usr/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Init: true}
	if err := c.Run(p); err != nil {
		_ = c.Destroy()
		return 0, err
	}
	st, err := p.Wait()
	if derr := c.Destroy(); err == nil {
		err = derr
	}
	if err == nil && !st.Success() {
		err = fmt.Errorf("true: %v", st)
	}
	return time.Since(start), err
}

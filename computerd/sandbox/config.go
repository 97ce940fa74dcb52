package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"computerd/computerd/idmap"
	"computerd/core"

	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"
)

// Capabilities is what a container's processes may hold: Docker's default
// set less CAP_NET_RAW (there is no network) and CAP_MKNOD (the device
// cgroup allows no new devices anyway).
var Capabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETFCAP",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
	"CAP_AUDIT_WRITE",
}

// MaskedPaths are hidden inside a container (a file by /dev/null, a
// directory by an empty read-only tmpfs; a path the host lacks is left
// alone). docs/SANDBOX.md says why each, and what is left.
var MaskedPaths = []string{
	// Docker's list (runc's example spec has all but /proc/interrupts
	// and powercap); Docker adds the CPUs' thermal_throttle (maskedPaths).
	"/proc/asound",
	"/proc/acpi",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/sys/firmware",
	"/sys/devices/virtual/powercap",
	// What tells this host and this boot from others: the kernel's
	// command line (where boot setups put addresses, ports, even
	// tokens), its build configuration, the boot's id, the boot loader's
	// parameters, and the machine's DMI identity (/sys/class/dmi/id
	// links into it).
	"/proc/cmdline",
	"/proc/config.gz",
	"/proc/sys/kernel/random/boot_id",
	"/sys/kernel/boot_params",
	"/sys/devices/virtual/dmi",
	// The map of the running kernel an exploit would want: its symbols,
	// modules, type layout (BTF), build id, and the physical address of
	// its crash-dump notes.
	"/proc/kallsyms",
	"/proc/modules",
	"/sys/kernel/btf",
	"/sys/kernel/notes",
	"/sys/kernel/vmcoreinfo",
}

// maskedPaths is MaskedPaths and the thermal_throttle directory of each
// of the host's CPUs that has one (Docker's, for the same reason as
// /proc/interrupts: its counters leak other processes' activity).
var maskedPaths = sync.OnceValue(func() []string {
	cpus, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	return append(slices.Clip(MaskedPaths), cpus...)
})

// ReadonlyPaths are remounted read-only inside a container (Docker's list).
var ReadonlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// CgroupName is the name of the cgroup container id gets, relative to
// this process's own (cgroup v1: beneath it in each hierarchy; v2: beside
// it). The StateDir hash keeps two Managers' containers of the same ID apart.
func (m *Manager) CgroupName(id string) string { return m.cgroupName(id) }

func (m *Manager) cgroupName(id string) string {
	abs, err := filepath.Abs(m.StateDir)
	if err != nil {
		abs = m.StateDir
	}
	h := sha256.Sum256([]byte(abs))
	return "computerd-" + hex.EncodeToString(h[:4]) + "-" + id
}

// config is the libcontainer configuration of one container, all but its
// /workspace (see workspaceMount).
func (m *Manager) config(id, rootfs string, hostRoot bool, l core.Limits) (*configs.Config, error) {
	const (
		noExecSuidDev = unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV
		roBind        = unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	)
	mounts := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: noExecSuidDev},
		{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=65536k"},
		{Source: "devpts", Destination: "/dev/pts", Device: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: noExecSuidDev, Data: "mode=1777,size=65536k"},
		{Source: "mqueue", Destination: "/dev/mqueue", Device: "mqueue", Flags: noExecSuidDev},
		{Source: "sysfs", Destination: "/sys", Device: "sysfs", Flags: noExecSuidDev | unix.MS_RDONLY},
	}
	if hostRoot {
		for _, hd := range m.hostDirs() {
			if fi, err := os.Lstat(hd); err != nil || !fi.IsDir() {
				continue // missing, or a link recreated in the root
			}
			mounts = append(mounts, &configs.Mount{
				Source: hd, Destination: hd, Device: "bind", Flags: roBind,
				RecAttr: &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY},
			})
		}
	}
	mounts = append(mounts, &configs.Mount{
		Source: "tmpfs", Destination: "/tmp", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV,
		Data: "mode=1777,size=" + strconv.FormatInt(l.Tmp, 10),
	})

	// Devices: deny everything, then allow the usual character devices and
	// ptys (the devices get created in /dev from the same list).
	var devs []*devconfig.Device
	rules := []*devconfig.Rule{{Type: devconfig.WildcardDevice, Major: devconfig.Wildcard, Minor: devconfig.Wildcard, Permissions: "rwm", Allow: false}}
	for _, d := range specconv.AllowedDevices {
		if d.Path == "" {
			continue // the "mknod anything" rules
		}
		devs = append(devs, d)
		rules = append(rules, &d.Rule)
	}
	rules = append(rules,
		&devconfig.Rule{Type: devconfig.CharDevice, Major: 136, Minor: devconfig.Wildcard, Permissions: "rwm", Allow: true}, // /dev/pts/*
		&devconfig.Rule{Type: devconfig.CharDevice, Major: 5, Minor: 2, Permissions: "rwm", Allow: true},                    // /dev/ptmx
	)

	pids := l.Pids
	period := uint64(100_000)
	quota := int64(l.CPUs * float64(period))
	if quota < 1000 {
		return nil, fmt.Errorf("%w: CPUs %v too small", ErrInvalidSpec, l.CPUs)
	}
	caps := &configs.Capabilities{
		Bounding:  Capabilities,
		Effective: Capabilities,
		Permitted: Capabilities,
	}
	return &configs.Config{
		Rootfs:            rootfs,
		Readonlyfs:        true,
		RootPropagation:   unix.MS_SLAVE | unix.MS_REC,
		ParentDeathSignal: int(unix.SIGKILL),
		Mounts:            mounts,
		Devices:           devs,
		Hostname:          "sandbox",
		Namespaces: configs.Namespaces{
			{Type: configs.NEWUSER},
			{Type: configs.NEWNS},
			{Type: configs.NEWUTS},
			{Type: configs.NEWIPC},
			{Type: configs.NEWPID},
			{Type: configs.NEWNET},
			{Type: configs.NEWCGROUP},
		},
		UIDMappings:  idMappings(m.ids()),
		GIDMappings:  idMappings(m.ids()),
		Networks:     []*configs.Network{{Type: "loopback", Address: "127.0.0.1/0", Gateway: "localhost"}},
		Capabilities: caps,
		Cgroups: &cgroups.Cgroup{
			Path: m.cgroupName(id),
			Resources: &cgroups.Resources{
				Memory:     l.Memory,
				MemorySwap: noSwap(l.Memory),
				PidsLimit:  &pids,
				CpuQuota:   quota,
				CpuPeriod:  period,
				Devices:    rules,
			},
		},
		MaskPaths:       maskedPaths(),
		ReadonlyPaths:   ReadonlyPaths,
		NoNewPrivileges: true,
		Rlimits: []configs.Rlimit{
			{Type: unix.RLIMIT_CORE, Hard: 0, Soft: 0},
		},
	}, nil
}

// idMappings is the user namespace map of ids.
func idMappings(ids idmap.Range) []configs.IDMap {
	return []configs.IDMap{{ContainerID: 0, HostID: int64(ids.Base), Size: int64(ids.Size)}}
}

// workspaceMount is what a container made for its Run gets at
// /workspace: a bind of the host directory dir, through a mount idmapped
// with ids unless dir shows the container's ids already (mapped), or if
// dir is empty a tmpfs of tmpSize bytes.
func workspaceMount(dir string, mapped bool, ids idmap.Range, tmpSize int64) (*configs.Mount, error) {
	if dir == "" {
		return workspaceTmpfs(tmpSize, ""), nil
	}
	m := &configs.Mount{
		Source: dir, Destination: "/workspace", Device: "bind",
		Flags: unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV,
	}
	if !mapped {
		ns, err := ids.Userns()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStart, err)
		}
		// libcontainer opens it from this process: its descriptor will do.
		m.IDMapping = &configs.MountIDMapping{UserNSPath: "/proc/self/fd/" + strconv.Itoa(int(ns.Fd()))}
	}
	return m, nil
}

// workspaceTmpfs is a tmpfs of size bytes at /workspace; owner adds the
// mount options that set its owner, where the mounter is not the
// container's root.
func workspaceTmpfs(size int64, owner string) *configs.Mount {
	return &configs.Mount{
		Source: "tmpfs", Destination: "/workspace", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV,
		Data: "mode=755,size=" + strconv.FormatInt(size, 10) + owner,
	}
}

// noSwap is the memory+swap limit that allows no swap, or 0 (no setting)
// where cgroup v1 has no swap accounting to set.
func noSwap(memory int64) int64 {
	if !cgroups.IsCgroup2UnifiedMode() && !memswAccounting() {
		return 0
	}
	return memory
}

var memswAccounting = sync.OnceValue(func() bool {
	mnt, err := cgroups.FindCgroupMountpoint("", "memory")
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(mnt, "memory.memsw.limit_in_bytes"))
	return err == nil
})

// oomKills is how many processes the kernel's OOM killer killed in c's
// memory cgroup (memory.events on cgroup v2, memory.oom_control on v1).
func oomKills(c *libcontainer.Container) int {
	st, err := c.State()
	if err != nil {
		return 0
	}
	dir, file := st.CgroupPaths["memory"], "memory.oom_control"
	if cgroups.IsCgroup2UnifiedMode() {
		dir, file = st.CgroupPaths[""], "memory.events"
	}
	if dir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

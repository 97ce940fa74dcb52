package sandbox

import (
	"io"
	"os"
	"runtime"
	"strconv"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"

	// Device cgroup rules need the devices manager registered.
	_ "github.com/opencontainers/cgroups/devices"
	// nsenter's C constructor does the namespace set-up of the re-executed
	// init before the Go runtime starts.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// libcontainer moves threads it has locked into a container's mount
// namespace (and so does mountWorkspace), counting on the runtime to end
// each thread with its goroutine. The runtime cannot end the main thread:
// it would stay in that namespace for good, holding the container's mounts
// (a workspace's FUSE connection among them), and /proc/self would show
// that namespace. Locking the main goroutine to the main thread from an
// init function (main then runs there too) keeps other goroutines off it.
func init() {
	runtime.LockOSThread()
}

// sealedEnv marks a process that Init has re-executed from a sealed copy
// of its binary, so that it never tries twice.
const sealedEnv = "COMPUTERD_SANDBOX_SEALED"

// Init must be the first thing main (or TestMain) does in a binary that
// runs containers.
//
// When libcontainer has re-executed the binary as a container's init
// ("/proc/self/exe init"), Init becomes that init and never returns: it
// sets the init to die with its supervisor, starts the seccomp agent, and
// hands over to libcontainer, which ends by executing the command.
//
// When it is the stub of a warm container (see Manager.Warm), Init waits
// for the container's command and executes it; it never returns.
//
// In the binary's ordinary runs as root, Init re-executes the process once
// from a sealed in-memory copy of its binary (see sealSelf), then returns
// in the new image; otherwise it returns at once.
func Init() {
	if len(os.Args) >= 2 && os.Args[1] == "init" && os.Getenv("_LIBCONTAINER_INITPIPE") != "" {
		containerInit()
	}
	if isStub() {
		stubMain()
	}
	sealSelf()
}

func containerInit() {
	// The thread that will exec the command must carry the parent-death
	// signal (it is per thread); libcontainer.Init locks to this one.
	runtime.LockOSThread()
	// The init inherits the container's CPU limit, and with it a
	// GOMAXPROCS of 1: libcontainer's goroutine then blocks in the open of
	// its exec fifo holding the only P, and the seccomp agent's goroutine
	// waits for sysmon to take that P back (up to 10 ms) before it can
	// answer the handshake. Two Ps let the agent run at once.
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	// SIGKILL when the supervisor dies: the PID namespace dies with its
	// init, so a killed supervisor leaves no process behind (Sweep removes
	// the state and cgroups). libcontainer keeps this setting across its
	// credential changes.
	// (A supervisor that died before this point leaves an init that
	// Sweep removes; the window is the init's first milliseconds.)
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	startSeccompAgent()
	libcontainer.Init()
	os.Exit(255) // not reached
}

// sealSelf re-executes the process from a sealed memfd copy of its own
// binary. A container's init is the supervisor's binary re-executed
// (CVE-2019-5736: a container must never be able to reach, and so
// overwrite, that file); unless the running binary is already such a copy,
// libcontainer makes one for every container it starts (an overlayfs view,
// or where that cannot be mounted, as here, a full copy of the binary:
// about 9 ms for computerd's 30 MB). Sealing once at start-up lets every
// container reuse the process's own sealed image. It costs one copy of the
// binary in memory. Only root runs containers; if anything fails the
// process goes on unsealed and libcontainer copies per container as before.
func sealSelf() {
	if os.Geteuid() != 0 || os.Getenv(sealedEnv) != "" || exeseal.IsSelfExeCloned() {
		os.Unsetenv(sealedEnv) // children seal themselves
		return
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return
	}
	defer self.Close()
	sealed, seal, err := exeseal.Memfd("/proc/self/exe")
	if err != nil {
		return
	}
	defer sealed.Close()
	if _, err := io.Copy(sealed, self); err != nil {
		return
	}
	if err := seal(&sealed); err != nil {
		return
	}
	os.Setenv(sealedEnv, "1")
	// execve resolves the path before it closes close-on-exec descriptors.
	_ = unix.Exec("/proc/self/fd/"+strconv.Itoa(int(sealed.Fd())), os.Args, os.Environ())
	os.Unsetenv(sealedEnv) // the exec failed: go on unsealed
}

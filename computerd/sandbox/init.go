package sandbox

import (
	"os"
	"runtime"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	// Device cgroup rules need the devices manager registered.
	_ "github.com/opencontainers/cgroups/devices"
	// nsenter's C constructor does the namespace set-up of the re-executed
	// init before the Go runtime starts.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// Init must be the first thing main (or TestMain) does in a binary that
// runs containers. In the binary's ordinary runs it returns at once. When
// libcontainer has re-executed the binary as a container's init
// ("/proc/self/exe init"), it becomes that init and never returns: it sets
// the init to die with its supervisor, starts the seccomp agent, and
// hands over to libcontainer, which ends by executing the command.
func Init() {
	if len(os.Args) < 2 || os.Args[1] != "init" || os.Getenv("_LIBCONTAINER_INITPIPE") == "" {
		return
	}
	// The thread that will exec the command must carry the parent-death
	// signal (it is per thread); libcontainer.Init locks to this one.
	runtime.LockOSThread()
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

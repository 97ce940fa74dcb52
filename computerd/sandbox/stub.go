package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The stub is what a warm container (see warm.go) runs while it waits: the
// container's init executes this binary again (/proc/self/exe, the sealed
// image) with stubArg and two descriptors. The stub says it is ready on
// the status descriptor, reads its command from the control descriptor
// until EOF, takes on the command's environment, working directory and
// standard input, says it is about to exec, and executes the command in
// its place: the command runs as the container's PID 1 with the
// capabilities, seccomp filter and limits the init set up, as it would in
// a container made for it. If the command cannot run, the stub sends the
// reason and exits 127. The status descriptor is close-on-exec, so its
// EOF after the exec byte means the exec happened.

// stubArg is the stub's first argument.
const stubArg = "computerd-sandbox-stub"

// The stub's status bytes.
const (
	stubReady = 'R' // waiting for its command
	stubExec  = 'X' // about to exec it
	stubFail  = 'E' // followed by why it cannot run
)

// stubCommand is what a warm container's stub runs.
type stubCommand struct {
	Argv  []string `json:"argv"`
	Env   []string `json:"env"`
	Cwd   string   `json:"cwd"`
	Stdin bool     `json:"stdin"` // false: /dev/null, true: the stdin pipe
}

// isStub reports whether this process is a warm container's stub.
func isStub() bool {
	return len(os.Args) == 4 && os.Args[1] == stubArg && os.Getpid() == 1
}

// stubMain is the stub; it never returns.
func stubMain() {
	ctlFd, err1 := strconv.Atoi(os.Args[2])
	statusFd, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil {
		os.Exit(127)
	}
	unix.CloseOnExec(statusFd)
	status := os.NewFile(uintptr(statusFd), "status")
	fail := func(err error) {
		_, _ = status.Write(append([]byte{stubFail}, err.Error()...))
		os.Exit(127)
	}
	if _, err := status.Write([]byte{stubReady}); err != nil {
		os.Exit(127)
	}
	ctl := os.NewFile(uintptr(ctlFd), "control")
	b, err := io.ReadAll(ctl)
	ctl.Close()
	var cmd stubCommand
	if err == nil {
		err = json.Unmarshal(b, &cmd)
	}
	if err != nil || len(cmd.Argv) == 0 {
		fail(fmt.Errorf("bad command from the supervisor: %v", err))
	}
	os.Clearenv()
	for _, kv := range cmd.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	if err := os.Chdir(cmd.Cwd); err != nil {
		fail(fmt.Errorf("chdir to %s: %w", cmd.Cwd, err))
	}
	if !cmd.Stdin {
		null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			fail(fmt.Errorf("open /dev/null: %w", err))
		}
		if err := unix.Dup3(null, 0, 0); err != nil {
			fail(fmt.Errorf("stdin: %w", err))
		}
		unix.Close(null)
	}
	// Looked up in the command's PATH, as libcontainer's init does.
	path, err := exec.LookPath(cmd.Argv[0])
	if err != nil {
		fail(err)
	}
	if _, err := status.Write([]byte{stubExec}); err != nil {
		os.Exit(127)
	}
	err = unix.Exec(path, cmd.Argv, cmd.Env)
	fail(fmt.Errorf("exec %s: %w", path, err))
}

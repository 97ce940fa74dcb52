package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny list in the spirit of Docker's default
// profile: the syscalls below fail with EPERM, clone3 fails with ENOSYS (so
// that libc falls back to clone, whose flags a filter can inspect), clone
// fails with EPERM when asked for new namespaces, and every syscall of a
// foreign ABI (i386, x32) fails with EPERM. Everything else is allowed.
//
// libcontainer applies seccomp only when built with libseccomp and the
// "seccomp" build tag; this package builds its own classic BPF program
// instead, and installs it from the container's init process (see Init) at
// the last moment before the command is executed: after libcontainer has
// set up the container (which needs mount, pivot_root and friends) and
// before the init is allowed to exec.

// deniedSyscalls are the syscalls that fail with EPERM on every
// architecture; deniedArchSyscalls adds those only some have.
var deniedSyscalls = []uintptr{
	unix.SYS_ACCT,
	unix.SYS_ADD_KEY,
	unix.SYS_BPF,
	unix.SYS_CLOCK_ADJTIME,
	unix.SYS_CLOCK_SETTIME,
	unix.SYS_DELETE_MODULE,
	unix.SYS_FANOTIFY_INIT,
	unix.SYS_FINIT_MODULE,
	unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT,
	unix.SYS_FSOPEN,
	unix.SYS_FSPICK,
	unix.SYS_INIT_MODULE,
	unix.SYS_IO_URING_ENTER,
	unix.SYS_IO_URING_REGISTER,
	unix.SYS_IO_URING_SETUP,
	unix.SYS_KCMP,
	unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_KEXEC_LOAD,
	unix.SYS_KEYCTL,
	unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_MIGRATE_PAGES,
	unix.SYS_MOUNT,
	unix.SYS_MOUNT_SETATTR,
	unix.SYS_MOVE_MOUNT,
	unix.SYS_MOVE_PAGES,
	unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_OPEN_TREE,
	unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_PIDFD_GETFD,
	unix.SYS_PIVOT_ROOT,
	unix.SYS_PROCESS_VM_READV,
	unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_PTRACE,
	unix.SYS_QUOTACTL,
	unix.SYS_QUOTACTL_FD,
	unix.SYS_REBOOT,
	unix.SYS_REQUEST_KEY,
	unix.SYS_SETNS,
	unix.SYS_SETTIMEOFDAY,
	unix.SYS_SWAPOFF,
	unix.SYS_SWAPON,
	unix.SYS_SYSLOG,
	unix.SYS_UMOUNT2,
	unix.SYS_UNSHARE,
	unix.SYS_USERFAULTFD,
	unix.SYS_VHANGUP,
}

// namespaceCloneFlags are the clone flags that create namespaces.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian machines
)

// filterProgram is the classic BPF program of the filter.
func filterProgram() ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	st := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jmp := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	eperm := st(ret, errno(unix.EPERM))

	p := []unix.SockFilter{
		st(ld, offArch),
		jmp(jeq, auditArch, 1, 0),
		eperm,
		st(ld, offNr),
	}
	if x32Bit != 0 {
		p = append(p, jmp(jge, x32Bit, 0, 1), eperm)
	}
	for _, nr := range append(deniedSyscalls, deniedArchSyscalls...) {
		p = append(p, jmp(jeq, uint32(nr), 0, 1), eperm)
	}
	p = append(p,
		jmp(jeq, uint32(unix.SYS_CLONE3), 0, 1),
		st(ret, errno(unix.ENOSYS)),
		jmp(jeq, uint32(unix.SYS_CLONE), 0, 3),
		st(ld, offArg0),
		jmp(jset, namespaceCloneFlags, 0, 1),
		eperm,
		st(ret, unix.SECCOMP_RET_ALLOW),
	)
	return p, nil
}

// installFilter applies the filter to every thread of this process, and so
// to whatever it executes next.
func installFilter() error {
	prog, err := filterProgram()
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): thread %d could not be synchronized", r)
	}
	return nil
}

// The handshake between Run and the container's init: Run passes one end
// of a SOCK_SEQPACKET socket pair as the init's fd 3 (the first of
// Process.ExtraFiles), and after Container.Start has returned (the
// container is set up; the init waits to be told to exec) sends
// seccompMagic; the init's agent goroutine installs the filter on all its
// threads and answers "ok" or the error. Only then does Run let the init
// exec the command.
const (
	seccompMagic  = "computerd-sandbox-seccomp-v1"
	seccompFd     = 3
	seccompWait   = 10 * time.Second
	seccompOK     = "ok"
	maxSeccompMsg = 512
)

// seccompConn is Run's end of the handshake.
type seccompConn struct {
	parent, child *os.File
}

func newSeccompConn() (*seccompConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	if err := unix.SetNonblock(fds[1], false); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	return &seccompConn{parent: os.NewFile(uintptr(fds[0]), "seccomp"), child: os.NewFile(uintptr(fds[1]), "seccomp-init")}, nil
}

func (s *seccompConn) Close() error {
	s.child.Close()
	return s.parent.Close()
}

// apply asks the init to install the filter and waits for its answer.
func (s *seccompConn) apply() error {
	s.child.Close() // so that a dead init reads as EOF
	if _, err := s.parent.Write([]byte(seccompMagic)); err != nil {
		return fmt.Errorf("seccomp handshake: %w", err)
	}
	_ = s.parent.SetReadDeadline(time.Now().Add(seccompWait))
	buf := make([]byte, maxSeccompMsg)
	n, err := s.parent.Read(buf)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("seccomp handshake: no answer from the container's init (does the binary call sandbox.Init first thing in main?)")
	case err != nil:
		return fmt.Errorf("seccomp handshake: %w", err)
	case string(buf[:n]) != seccompOK:
		return fmt.Errorf("seccomp filter: %s", buf[:n])
	}
	return nil
}

// startSeccompAgent runs in the container's init before libcontainer's:
// if fd 3 is the handshake socket, a goroutine waits on it for the request
// to install the filter.
func startSeccompAgent() {
	initPipe, err := strconv.Atoi(os.Getenv("_LIBCONTAINER_INITPIPE"))
	if err != nil || initPipe <= seccompFd {
		return // no extra files: a container not started by Run
	}
	if typ, err := unix.GetsockoptInt(seccompFd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_SEQPACKET {
		return
	}
	if dom, err := unix.GetsockoptInt(seccompFd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_UNIX {
		return
	}
	unix.CloseOnExec(seccompFd) // never reaches the command
	go seccompAgent(seccompFd)
}

func seccompAgent(fd int) {
	// Stay on this thread and let it die with the goroutine: capabilities
	// are per thread, and libcontainer drops them only on its own.
	runtime.LockOSThread()
	// Wait through the runtime's poller, not in a blocking read: the init
	// may run with GOMAXPROCS=1 (its CPU limit), and a goroutine blocked in
	// a raw syscall holds the only P until sysmon takes it back (up to
	// 10 ms), which stalls libcontainer's setup in the same process.
	if err := unix.SetNonblock(fd, true); err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "seccomp")
	buf := make([]byte, len(seccompMagic)+1)
	n, err := f.Read(buf)
	if err != nil || string(buf[:n]) != seccompMagic {
		return
	}
	reply := seccompOK
	if err := installFilter(); err != nil {
		reply = err.Error()
		if len(reply) > maxSeccompMsg {
			reply = reply[:maxSeccompMsg]
		}
	}
	_, _ = f.Write([]byte(reply))
	runtime.KeepAlive(f)
}

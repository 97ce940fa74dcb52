package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is an allow list in the spirit of Docker's default
// profile: the syscalls below are allowed (allowedSyscalls, and those of
// allowedArchSyscalls the architecture has), for the capabilities a
// container holds; a few are allowed with some arguments only:
//
//   - clone, unless its flags ask for a namespace (EPERM);
//   - clone3 fails with ENOSYS, so that libc and Go fall back to clone,
//     whose flags a filter can read (as Docker does);
//   - socket, except for AF_VSOCK (it reaches the hypervisor and other
//     machines' guests, and network namespaces do not confine it), AF_ALG
//     (the kernel's crypto API: attack surface no tool needs) and
//     families this table does not know: EAFNOSUPPORT, as from a kernel
//     without them;
//   - personality, only to query or to ask for what Docker allows
//     (PER_LINUX, PER_LINUX32, UNAME26).
//
// Every other syscall fails with EPERM, but one newer than the tables
// (above lastKnownSyscall) fails with ENOSYS, as on a kernel that lacks
// it, so that libc falls back to an older one. Every syscall of a foreign
// ABI (i386, x32) fails with EPERM.
//
// Left out, unlike Docker's profile: ptrace, process_vm_readv and
// process_vm_writev (Docker allows them on kernels from 4.8; here a
// container cannot trace its processes) and name_to_handle_at. Docker's
// capability-gated entries follow the capabilities held here: of them,
// only chroot (CAP_SYS_CHROOT).
//
// libcontainer applies seccomp only when built with libseccomp and the
// "seccomp" build tag; this package builds its own classic BPF program
// instead, and installs it from the container's init process (see Init) at
// the last moment before the command is executed: after libcontainer has
// set up the container (which needs mount, pivot_root and friends) and
// before the init is allowed to exec.

// namespaceCloneFlags are the clone flags that create namespaces.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Socket families refused: AF_VSOCK, AF_ALG, and any from
// socketFamiliesKnown on (AF_MCTP, 45, is the last one this table knows).
const socketFamiliesKnown = unix.AF_MCTP + 1

// allowedPersonalities are the personality arguments allowed: PER_LINUX,
// PER_LINUX32, UNAME26 with each, and the query (0xffffffff).
var allowedPersonalities = []uint32{0, 0x8, 0x20000, 0x20008, 0xffffffff}

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian machines
)

// filterProgram is the classic BPF program of the filter. Its returns
// are each next to the test that leads to them, so that no conditional
// jump has to reach far (255 instructions at most).
func filterProgram() ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	allow := ret(unix.SECCOMP_RET_ALLOW)
	eperm := ret(errnoAction(unix.EPERM))
	enosys := ret(errnoAction(unix.ENOSYS))
	eafnosupport := ret(errnoAction(unix.EAFNOSUPPORT))
	p := []unix.SockFilter{
		ld(offArch),
		jump(jeq, auditArch, 1, 0),
		eperm,
		ld(offNr),
	}
	if x32Bit != 0 {
		p = append(p, jump(jge, x32Bit, 0, 1), eperm)
	}
	// on adds a block run for syscall nr (which ends in returns).
	on := func(nr uintptr, block ...unix.SockFilter) {
		p = append(p, jump(jeq, uint32(nr), 0, uint8(len(block))))
		p = append(p, block...)
	}
	on(unix.SYS_CLONE3, enosys)
	on(unix.SYS_CLONE,
		ld(offArg0),
		jump(jset, namespaceCloneFlags, 0, 1),
		eperm,
		allow,
	)
	on(unix.SYS_SOCKET,
		ld(offArg0),
		jump(jeq, unix.AF_VSOCK, 2, 0),
		jump(jeq, unix.AF_ALG, 1, 0),
		jump(jge, socketFamiliesKnown, 0, 1),
		eafnosupport,
		allow,
	)
	personality := []unix.SockFilter{ld(offArg0)}
	for i, v := range allowedPersonalities {
		personality = append(personality, jump(jeq, v, uint8(len(allowedPersonalities)-i), 0))
	}
	on(unix.SYS_PERSONALITY, append(personality, eperm, allow)...)
	p = append(p, jump(jgt, lastKnownSyscall, 0, 1), enosys)
	p = append(p, search(allowedRanges())...)
	if len(p) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp filter: %d instructions", len(p))
	}
	return p, nil
}

// search is a binary search of the accumulator (a syscall number) in
// rs: it returns allow for a number in one of them, EPERM for any other.
func search(rs []syscallRange) []unix.SockFilter {
	if len(rs) == 1 {
		return []unix.SockFilter{
			jump(jge, rs[0].lo, 0, 2),
			jump(jgt, rs[0].hi, 1, 0),
			ret(unix.SECCOMP_RET_ALLOW),
			ret(errnoAction(unix.EPERM)),
		}
	}
	mid := len(rs) / 2
	left, right := search(rs[:mid]), search(rs[mid:])
	var p []unix.SockFilter
	if len(left) <= 255 {
		p = append(p, jump(jge, rs[mid].lo, uint8(len(left)), 0))
	} else {
		p = append(p, jump(jge, rs[mid].lo, 0, 1), unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JA, K: uint32(len(left))})
	}
	return append(append(p, left...), right...)
}

func ld(off uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
}

func ret(action uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: action}
}

func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
}

func errnoAction(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

// syscallRange is allowed syscall numbers lo to hi.
type syscallRange struct{ lo, hi uint32 }

// allowedRanges are the allowed syscalls as sorted ranges of numbers.
func allowedRanges() []syscallRange {
	nrs := make([]uint32, 0, len(allowedSyscalls)+len(allowedArchSyscalls))
	for _, nr := range append(slices.Clone(allowedSyscalls), allowedArchSyscalls...) {
		nrs = append(nrs, uint32(nr))
	}
	slices.Sort(nrs)
	nrs = slices.Compact(nrs)
	var rs []syscallRange
	for _, nr := range nrs {
		if n := len(rs); n > 0 && rs[n-1].hi+1 == nr {
			rs[n-1].hi = nr
			continue
		}
		rs = append(rs, syscallRange{nr, nr})
	}
	return rs
}

// Jump kinds of the program.
const (
	jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jgt  = unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K
	jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
)

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

package sandbox

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// runFilter interprets the filter's classic BPF (the few instructions it
// uses) on one struct seccomp_data.
func runFilter(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32, arg0 uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	binary.LittleEndian.PutUint64(data[offArg0:], arg0)
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			a = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K,
			unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var cond bool
			switch in.Code & 0xf0 {
			case unix.BPF_JEQ:
				cond = a == in.K
			case unix.BPF_JGE:
				cond = a >= in.K
			case unix.BPF_JGT:
				cond = a > in.K
			case unix.BPF_JSET:
				cond = a&in.K != 0
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("unexpected instruction %#x at %d", in.Code, pc)
		}
	}
	t.Fatal("fell off the end of the program")
	return 0
}

func TestFilterProgram(t *testing.T) {
	prog, err := filterProgram()
	if err != nil {
		t.Skip(err)
	}
	t.Logf("%d instructions", len(prog))
	eperm := errnoAction(unix.EPERM)
	enosys := errnoAction(unix.ENOSYS)
	eafnosupport := errnoAction(unix.EAFNOSUPPORT)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	type filterCase struct {
		name string
		arch uint32
		nr   uintptr
		arg0 uint64
		want uint32
	}
	tests := []filterCase{
		{"read", auditArch, unix.SYS_READ, 0, allow},
		{"execve", auditArch, unix.SYS_EXECVE, 0, allow},
		{"chroot", auditArch, unix.SYS_CHROOT, 0, allow},
		{"clone3", auditArch, unix.SYS_CLONE3, 0, enosys},
		{"clone thread", auditArch, unix.SYS_CLONE, unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND, allow},
		{"clone fork", auditArch, unix.SYS_CLONE, uint64(unix.SIGCHLD), allow},
		{"clone newuser", auditArch, unix.SYS_CLONE, unix.CLONE_NEWUSER | uint64(unix.SIGCHLD), eperm},
		{"clone newnet", auditArch, unix.SYS_CLONE, unix.CLONE_NEWNET, eperm},
		{"socket unix", auditArch, unix.SYS_SOCKET, unix.AF_UNIX, allow},
		{"socket inet", auditArch, unix.SYS_SOCKET, unix.AF_INET, allow},
		{"socket inet6", auditArch, unix.SYS_SOCKET, unix.AF_INET6, allow},
		{"socket netlink", auditArch, unix.SYS_SOCKET, unix.AF_NETLINK, allow},
		{"socket vsock", auditArch, unix.SYS_SOCKET, unix.AF_VSOCK, eafnosupport},
		{"socket alg", auditArch, unix.SYS_SOCKET, unix.AF_ALG, eafnosupport},
		{"socket unknown family", auditArch, unix.SYS_SOCKET, socketFamiliesKnown, eafnosupport},
		{"personality query", auditArch, unix.SYS_PERSONALITY, 0xffffffff, allow},
		{"personality linux", auditArch, unix.SYS_PERSONALITY, 0, allow},
		{"personality no-aslr", auditArch, unix.SYS_PERSONALITY, 0x0040000, eperm},
		{"newer than the tables", auditArch, lastKnownSyscall + 1, 0, enosys},
		{"far newer", auditArch, 4000, 0, enosys},
		{"foreign arch", auditArch ^ 1, unix.SYS_READ, 0, eperm},
	}
	if x32Bit != 0 {
		tests = append(tests, filterCase{"x32", auditArch, x32Bit | unix.SYS_READ, 0, eperm})
	}
	// What the profile leaves out: the mount API, namespaces, tracing,
	// kernel keys, BPF, io_uring, modules, the clock, and the rest.
	for _, nr := range []uintptr{
		unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT,
		unix.SYS_FSPICK, unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_MOUNT_SETATTR, unix.SYS_UNSHARE, unix.SYS_SETNS,
		unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_KCMP, unix.SYS_PIDFD_GETFD,
		unix.SYS_ADD_KEY, unix.SYS_KEYCTL, unix.SYS_REQUEST_KEY, unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
		unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER, unix.SYS_USERFAULTFD,
		unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE, unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
		unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_SYSLOG, unix.SYS_SETTIMEOFDAY,
		unix.SYS_CLOCK_SETTIME, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_FANOTIFY_INIT,
		unix.SYS_QUOTACTL, unix.SYS_VHANGUP, unix.SYS_SETHOSTNAME, unix.SYS_MBIND, unix.SYS_MOVE_PAGES, unix.SYS_MIGRATE_PAGES,
		unix.SYS_LISTNS,
	} {
		tests = append(tests, filterCase{fmt.Sprintf("left out %d", nr), auditArch, nr, 0, eperm})
	}
	for _, tt := range tests {
		if got := runFilter(t, prog, tt.arch, uint32(tt.nr), tt.arg0); got != tt.want {
			t.Errorf("%s: action %#x, want %#x", tt.name, got, tt.want)
		}
	}
	// Every number up to the newest known: allowed exactly when listed.
	listed := map[uint32]bool{}
	for _, nr := range append(slices.Clone(allowedSyscalls), allowedArchSyscalls...) {
		listed[uint32(nr)] = true
	}
	special := map[uint32]bool{unix.SYS_CLONE: true, unix.SYS_CLONE3: true, unix.SYS_SOCKET: true, unix.SYS_PERSONALITY: true}
	for nr := uint32(0); nr <= lastKnownSyscall; nr++ {
		want := eperm
		if listed[nr] {
			want = allow
		}
		if got := runFilter(t, prog, auditArch, nr, 0); !special[nr] && got != want {
			t.Errorf("syscall %d: action %#x, want %#x", nr, got, want)
		}
	}
}

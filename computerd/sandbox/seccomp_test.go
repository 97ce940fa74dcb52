package sandbox

import (
	"encoding/binary"
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
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var cond bool
			switch in.Code & 0xf0 {
			case unix.BPF_JEQ:
				cond = a == in.K
			case unix.BPF_JGE:
				cond = a >= in.K
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
	if len(prog) > 4096 {
		t.Fatalf("%d instructions", len(prog))
	}
	eperm := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	enosys := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
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
		{"mount", auditArch, unix.SYS_MOUNT, 0, eperm},
		{"ptrace", auditArch, unix.SYS_PTRACE, 0, eperm},
		{"unshare", auditArch, unix.SYS_UNSHARE, 0, eperm},
		{"bpf", auditArch, unix.SYS_BPF, 0, eperm},
		{"clone3", auditArch, unix.SYS_CLONE3, 0, enosys},
		{"clone thread", auditArch, unix.SYS_CLONE, unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND, allow},
		{"clone fork", auditArch, unix.SYS_CLONE, uint64(unix.SIGCHLD), allow},
		{"clone newuser", auditArch, unix.SYS_CLONE, unix.CLONE_NEWUSER | uint64(unix.SIGCHLD), eperm},
		{"clone newnet", auditArch, unix.SYS_CLONE, unix.CLONE_NEWNET, eperm},
		{"foreign arch", auditArch ^ 1, unix.SYS_READ, 0, eperm},
	}
	if x32Bit != 0 {
		tests = append(tests, filterCase{"x32", auditArch, x32Bit | unix.SYS_READ, 0, eperm})
	}
	for _, nr := range append(deniedSyscalls, deniedArchSyscalls...) {
		if got := runFilter(t, prog, auditArch, uint32(nr), 0); got != eperm {
			t.Errorf("denied syscall %d: action %#x", nr, got)
		}
	}
	for _, tt := range tests {
		if got := runFilter(t, prog, tt.arch, uint32(tt.nr), tt.arg0); got != tt.want {
			t.Errorf("%s: action %#x, want %#x", tt.name, got, tt.want)
		}
	}
}

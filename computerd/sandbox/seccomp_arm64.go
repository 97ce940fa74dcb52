package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	x32Bit    = 0
	// lastKnownSyscall is the newest syscall the tables know of (rseq_slice_yield,
	// 471); a newer one fails with ENOSYS.
	lastKnownSyscall = unix.SYS_RSEQ_SLICE_YIELD
)

// allowedArchSyscalls: arm64 has only the generic table's syscalls.
var allowedArchSyscalls []uintptr

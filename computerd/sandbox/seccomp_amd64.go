package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	x32Bit    = 0x40000000 // __X32_SYSCALL_BIT: x32 ABI syscalls
)

var deniedArchSyscalls = []uintptr{
	unix.SYS_CREATE_MODULE,
	unix.SYS_GET_KERNEL_SYMS,
	unix.SYS_IOPERM,
	unix.SYS_IOPL,
	unix.SYS_NFSSERVCTL,
	unix.SYS_QUERY_MODULE,
	unix.SYS_SYSFS,
	unix.SYS__SYSCTL,
	unix.SYS_USELIB,
	unix.SYS_USTAT,
}

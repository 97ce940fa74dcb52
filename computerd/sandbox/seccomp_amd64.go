package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	x32Bit    = 0x40000000 // __X32_SYSCALL_BIT: x32 ABI syscalls
	// lastKnownSyscall is the newest syscall the tables know of (rseq_slice_yield,
	// 471); a newer one fails with ENOSYS.
	lastKnownSyscall = unix.SYS_RSEQ_SLICE_YIELD
)

// allowedArchSyscalls are the allowed syscalls that amd64 has and arm64
// does not: the older calls that the generic table replaced with their
// *at and *2 forms, and amd64's own.
var allowedArchSyscalls = []uintptr{
	unix.SYS_ACCESS, unix.SYS_ALARM, unix.SYS_ARCH_PRCTL, unix.SYS_CHMOD, unix.SYS_CHOWN, unix.SYS_CREAT,
	unix.SYS_DUP2, unix.SYS_EPOLL_CREATE, unix.SYS_EPOLL_CTL_OLD, unix.SYS_EPOLL_WAIT, unix.SYS_EPOLL_WAIT_OLD,
	unix.SYS_EVENTFD, unix.SYS_FORK, unix.SYS_FUTIMESAT, unix.SYS_GETDENTS, unix.SYS_GETPGRP,
	unix.SYS_GET_THREAD_AREA, unix.SYS_INOTIFY_INIT, unix.SYS_LCHOWN, unix.SYS_LINK, unix.SYS_LSTAT,
	unix.SYS_MKDIR, unix.SYS_MKNOD, unix.SYS_MODIFY_LDT, unix.SYS_OPEN, unix.SYS_PAUSE, unix.SYS_PIPE,
	unix.SYS_POLL, unix.SYS_READLINK, unix.SYS_RENAME, unix.SYS_RMDIR, unix.SYS_SELECT,
	unix.SYS_SET_THREAD_AREA, unix.SYS_SIGNALFD, unix.SYS_STAT, unix.SYS_SYMLINK, unix.SYS_TIME,
	unix.SYS_UNLINK, unix.SYS_URETPROBE, unix.SYS_UTIME, unix.SYS_UTIMES, unix.SYS_VFORK,
}

//go:build !amd64 && !arm64

package sandbox

// No filter for this architecture: Run fails unless Manager.NoSeccomp.
const (
	auditArch        = 0
	x32Bit           = 0
	lastKnownSyscall = 0
)

var allowedSyscalls, allowedArchSyscalls []uintptr

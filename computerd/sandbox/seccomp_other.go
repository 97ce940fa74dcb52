//go:build !amd64 && !arm64

package sandbox

// No filter for this architecture: Run fails unless Manager.NoSeccomp.
const (
	auditArch = 0
	x32Bit    = 0
)

var deniedArchSyscalls []uintptr

package daemon

import (
	"os"
	"runtime/debug"
)

// Garbage collector settings of a computerd process, unless GOGC or
// GOMEMLIMIT set them.
//
// Reading chunks makes short-lived garbage at the rate of the bytes read
// (the SQLite driver hands every chunk out in a slice of its own), while
// the heap that stays alive is small. With the default GOGC of 100 the
// collector then runs every few megabytes read, and reading a tree back
// went at 450-630 MB/s; with 400 it goes at 560-800 MB/s
// (`go run ./bench -suite store`). The soft limit bounds what the
// larger target could cost: 96 MiB of Go heap, which leaves room under the
// 256 MiB RSS bound for SQLite's page caches (up to 128 MiB, outside the Go
// heap) and the binary. Near the limit the collector runs more often, as
// with the default.
const (
	gcPercent   = 400
	memoryLimit = 96 << 20
)

// TuneRuntime applies those settings. computerd serve calls it first; so
// does the bench, whose suites run the store as computerd runs it.
func TuneRuntime() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}

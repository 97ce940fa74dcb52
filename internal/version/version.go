// Package version is the build's version, as computerd and agentctl print
// it (--version) and computerd reports it (GET /v1/version, the
// computerd_build_info metric).
package version

import (
	"runtime"
	"runtime/debug"
)

// version and revision are set at build time: go build -ldflags "-X
// computerd/internal/version.version=v1.2.3 -X
// computerd/internal/version.revision=COMMIT" (make build sets them
// from git describe and git rev-parse).
var version, revision string

// String is the build's version: the one set at build time, else the
// module version go install recorded, else the commit the binary was
// built from (its first 12 digits, "-dirty" when the tree had changes),
// else "devel".
func String() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, modified := vcs(info)
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		rev += "-dirty"
	}
	return rev
}

// Revision is the commit the binary was built from, as set at build time
// or recorded by go build ("" when neither: a test binary, a build with
// -buildvcs=false or outside git).
func Revision() string {
	if revision != "" {
		return revision
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, _ := vcs(info)
	return rev
}

// Go is the Go release the binary was built with.
func Go() string { return runtime.Version() }

// vcs reads the commit and whether the tree had changes from info.
func vcs(info *debug.BuildInfo) (rev string, modified bool) {
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return rev, modified
}

package version_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"computerd/internal/version"
)

// build builds testdata/printversion with ldflags and returns what it prints.
func build(t *testing.T, ldflags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "printversion")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, "./testdata/printversion")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// The version make build sets with -ldflags -X is what the binary
// reports; without it, and without a commit go build recorded, "devel".
func TestVersionFromLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	got := build(t, "-X computerd/internal/version.version=v9.8.7 -X computerd/internal/version.revision=0123abcd")
	if want := "v9.8.7 0123abcd"; got != want {
		t.Errorf("with -X: %q, want %q", got, want)
	}
	if got, want := build(t, ""), "devel"; got != want {
		t.Errorf("without -X: %q, want %q", got, want)
	}
}

func TestGo(t *testing.T) {
	if version.Go() != runtime.Version() || version.String() == "" {
		t.Fatalf("Go %q, String %q", version.Go(), version.String())
	}
}

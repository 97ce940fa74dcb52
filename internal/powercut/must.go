package powercut

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// MustStart formats an ext4 image of size bytes in a temporary directory
// of tb and starts a Machine on it, which tb's cleanup takes down. Where
// that cannot be (not root) it skips tb.
func MustStart(tb testing.TB, size int64) (m *Machine, image string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root, /dev/fuse and loop devices")
	}
	dir := tb.TempDir()
	image = filepath.Join(dir, "image")
	if err := Format(image, size); err != nil {
		tb.Fatal(err)
	}
	m, err := Start(image, filepath.Join(dir, "m"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := m.Close(); err != nil {
			tb.Error(err)
		}
	})
	return m, image
}

// MustCutAndBoot cuts the power of m (keeping nothing unflushed), takes
// it down and mounts its image at a temporary directory of tb, which it
// returns (tb's cleanup unmounts it). Whatever uses m.Root must be done.
func (m *Machine) MustCutAndBoot(tb testing.TB, image string) string {
	tb.Helper()
	if _, err := m.Cut(rand.New(rand.NewPCG(0, 0)), 0); err != nil {
		tb.Fatal(err)
	}
	if err := m.Close(); err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	unmount, err := Mount(image, dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := unmount(); err != nil {
			tb.Error(err)
		}
	})
	return dir
}

package durable_test

import (
	"os"
	"path/filepath"
	"testing"

	"computerd/internal/durable"
	"computerd/internal/powercut"
)

// A file WriteFile replaced holds its new contents after a power cut, not
// the old ones (the rename is durable), and never a part of them. The
// exec layers' records and the host-mounts record are written so.
func TestWriteFilePowerCut(t *testing.T) {
	m, image := powercut.MustStart(t, 64<<20)
	path := filepath.Join(m.Root, "record")
	for _, data := range []string{"one", "two"} {
		if err := durable.WriteFile(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	boot := m.MustCutAndBoot(t, image)
	got, err := os.ReadFile(filepath.Join(boot, "record"))
	if err != nil || string(got) != "two" {
		t.Errorf("after the cut the record holds %q (%v), want %q", got, err, "two")
	}
	if _, err := os.Stat(filepath.Join(boot, "record.tmp")); !os.IsNotExist(err) {
		t.Errorf("a temporary file is left: %v", err)
	}
}

package overlay

import (
	"os"
	"path/filepath"
	"testing"

	"computerd/internal/powercut"
)

// TestWriteFileSyncPowerCut: a file writeFileSync replaced holds its new
// contents after a power cut, not the old ones (the rename is durable).
func TestWriteFileSyncPowerCut(t *testing.T) {
	m, image := powercut.MustStart(t, 64<<20)
	path := filepath.Join(m.Root, "record")
	for _, data := range []string{"one", "two"} {
		if err := writeFileSync(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	boot := m.MustCutAndBoot(t, image)
	got, err := os.ReadFile(filepath.Join(boot, "record"))
	if err != nil || string(got) != "two" {
		t.Errorf("after the cut the record holds %q (%v), want %q", got, err, "two")
	}
}

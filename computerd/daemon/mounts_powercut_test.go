package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"computerd/internal/powercut"
)

// TestMountRecordPowerCut: the record of host mounts, once written, holds
// what was written last after a power cut, not an older record.
func TestMountRecordPowerCut(t *testing.T) {
	m, image := powercut.MustStart(t, 64<<20)
	path := filepath.Join(m.Root, "mounts.json")
	for _, data := range []string{`[{"dir":"/a"}]`, `[{"dir":"/b"}]`} {
		if err := writeSynced(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	boot := m.MustCutAndBoot(t, image)
	got, err := os.ReadFile(filepath.Join(boot, "mounts.json"))
	if want := `[{"dir":"/b"}]`; err != nil || string(got) != want {
		t.Errorf("after the cut the record holds %q (%v), want %q", got, err, want)
	}
}

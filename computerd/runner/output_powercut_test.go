package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"computerd/core"
	"computerd/internal/powercut"
)

// TestOutputLogPowerCut: an output log synced as an exec's is once its
// command ended (before its records say what the log holds) keeps every
// event through a power cut; one not synced keeps none, which shows the
// cut is real.
func TestOutputLogPowerCut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sync   bool
		events int
	}{
		{"synced", true, 20},
		{"not synced", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, image := powercut.MustStart(t, 64<<20)
			dir := filepath.Join(m.Root, "output")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			syncDirForTest(t, m.Root)
			l, err := createOutputLog(filepath.Join(dir, "x.ndjson"), 1<<20, "the cap")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				l.output("stdout", []byte(fmt.Sprintf("line %d\n", i)))
			}
			if tc.sync {
				l.sync()
				if err := l.lostErr(); err != nil {
					t.Fatal(err)
				}
			}
			l.f.Close() // a close flushes nothing; an open file would keep the disk mounted
			boot := m.MustCutAndBoot(t, image)
			var got int
			err = replayLog(context.Background(), filepath.Join(boot, "output", "x.ndjson"), core.Exec{}, func(ev Event) error {
				if ev.Type == "output" {
					if want := fmt.Sprintf("line %d\n", got); ev.Data != want {
						return fmt.Errorf("event %d: %q, want %q", got, ev.Data, want)
					}
					got++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.events {
				t.Errorf("after the cut the log holds %d output events, want %d", got, tc.events)
			}
		})
	}
}

func syncDirForTest(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

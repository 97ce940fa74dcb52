package powercut_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"computerd/internal/powercut"
)

// TestCutKeepsWhatWasFlushed writes a file and fsyncs it, writes another
// out to the disk without a flush, cuts the power, and boots the image:
// the first is there, the second is not, nor what was written after the
// cut.
func TestCutKeepsWhatWasFlushed(t *testing.T) {
	m, image := powercut.MustStart(t, 64<<20)
	kept := bytes.Repeat([]byte("kept "), 5000)
	// sync: fsync the file and the directory; otherwise the file's data
	// is only written out (sync_file_range), reaching the disk's cache.
	write := func(name string, data []byte, sync bool) {
		f, err := os.Create(filepath.Join(m.Root, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			d, err := os.Open(m.Root)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			d.Close()
		} else if err := unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write("kept", kept, true)
	flushes := m.Disk.Flushes()
	if flushes == 0 {
		t.Fatal("an fsync on the machine made no flush of its disk")
	}
	write("lost", []byte(strings.Repeat("lost ", 5000)), false)
	lost, err := m.Cut(rand.New(rand.NewPCG(1, 2)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if lost == 0 {
		t.Error("the cut found no unflushed block to lose")
	}
	// What the kernel writes and flushes now (unmounting) must not count.
	write("after", []byte("after the cut"), true)
	boot := m.MustCutAndBoot(t, image)
	if got, err := os.ReadFile(filepath.Join(boot, "kept")); err != nil || !bytes.Equal(got, kept) {
		t.Errorf("the fsynced file after the cut: %d bytes, %v; want its %d bytes", len(got), err, len(kept))
	}
	for _, name := range []string{"lost", "after"} {
		if _, err := os.Stat(filepath.Join(boot, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, never flushed before the cut, is there after it (%v)", name, err)
		}
	}
}

package loopfs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"computerd/computerd/loopfs"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mount)")
	}
}

// volume makes a volume of size in a fresh directory, removed at cleanup.
func volume(t *testing.T, m *loopfs.Maker, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "v")
	if err := m.MakeVolume(dir, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := loopfs.RemoveVolume(dir); err != nil {
			t.Error(err)
		}
	})
	return filepath.Join(dir, loopfs.VolumeFS)
}

// fill writes 64 KiB pieces to a new file in dir until a write fails,
// fsyncing as it goes, and returns the bytes written and the error.
func fill(dir string) (int64, error) {
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	piece := bytes.Repeat([]byte{0xa5}, 64<<10)
	var n int64
	for {
		k, err := f.Write(piece)
		n += int64(k)
		if err == nil && n%(1<<20) == 0 {
			err = f.Sync()
		}
		if err != nil {
			return n, err
		}
	}
}

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct{ in, want int64 }{
		{0, loopfs.MinSize},
		{-5, loopfs.MinSize},
		{loopfs.MinSize, loopfs.MinSize},
		{1 << 30, 1 << 30},
		{1<<30 + 1, 1 << 30},
		{1<<30 + 1<<27, 1<<30 + 1<<27},
		{1<<31 - 1, 1<<31 - 1<<27},
		{300 << 10, 288 << 10},
	} {
		if got := loopfs.SizeClass(tc.in); got != tc.want {
			t.Errorf("SizeClass(%d) = %d, want %d", tc.in, got, tc.want)
		}
		if got := loopfs.SizeClass(tc.in); got > max(tc.in, loopfs.MinSize) || got < max(tc.in, loopfs.MinSize)*7/8 {
			t.Errorf("SizeClass(%d) = %d: not within an eighth below", tc.in, got)
		}
	}
}

// A volume takes at most its size of writes, then ENOSPC, even for root;
// what fit reads back.
func TestVolumeBound(t *testing.T) {
	needRoot(t)
	m := &loopfs.Maker{Dir: t.TempDir()}
	for _, size := range []int64{loopfs.MinSize, loopfs.SizeClass(24 << 20)} {
		fs := volume(t, m, size)
		n, err := fill(fs)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("size %d: filled %d bytes, then %v; want ENOSPC", size, n, err)
		}
		if n > size || n < size/2 {
			t.Fatalf("size %d: took %d bytes", size, n)
		}
		got, err := os.ReadFile(filepath.Join(fs, "fill"))
		if err != nil || int64(len(got)) < n/2 || got[len(got)/2] != 0xa5 {
			t.Fatalf("size %d: read back %d bytes, %v", size, len(got), err)
		}
		t.Logf("size %d: %d bytes fit", size, n)
	}
}

// A volume's blocks are the disk's from the start: once the disk beneath
// is full, the volume still takes what it has room for (no write errors
// after the fact), and a new volume is refused with ENOSPC.
func TestVolumeOnFullDisk(t *testing.T) {
	needRoot(t)
	m := &loopfs.Maker{Dir: t.TempDir()}
	disk := volume(t, m, 64<<20)
	inner := &loopfs.Maker{Dir: filepath.Join(disk, "templates")}
	fs := volume(t, inner, 16<<20)
	if n, err := fill(disk); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filler: %d bytes, %v", n, err)
	}
	n, err := fill(fs)
	if !errors.Is(err, syscall.ENOSPC) || n < 12<<20 {
		t.Fatalf("volume on a full disk took %d bytes, then %v; want about 16 MiB, then ENOSPC", n, err)
	}
	err = inner.MakeVolume(filepath.Join(disk, "another"), 16<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a new volume on a full disk: %v, want ENOSPC", err)
	}
	if _, err := os.Stat(filepath.Join(disk, "another")); !os.IsNotExist(err) {
		t.Fatalf("a refused volume left its directory: %v", err)
	}
}

// A pool hands out mounted volumes and makes new ones.
func TestPool(t *testing.T) {
	needRoot(t)
	m := &loopfs.Maker{Dir: t.TempDir()}
	var full atomic.Bool // Room: no more volumes once set
	p := &loopfs.Pool{Maker: m, Dir: filepath.Join(t.TempDir(), "pool"), Size: 8 << 20, Count: 2,
		Room: func(int64) bool { return !full.Load() }}
	if err := p.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dest := t.TempDir()
	for i, name := range []string{"a", "b", "c"} {
		dir := filepath.Join(dest, name)
		deadline := time.Now().Add(10 * time.Second)
		for !p.Take(dir, 8<<20) {
			if time.Now().After(deadline) {
				t.Fatalf("take %d: no volume after 10 s", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !loopfs.Mounted(filepath.Join(dir, loopfs.VolumeFS)) {
			t.Fatalf("take %d: not mounted", i)
		}
		if err := os.WriteFile(filepath.Join(dir, loopfs.VolumeFS, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer loopfs.RemoveVolume(dir)
	}
	if p.Take(filepath.Join(dest, "d"), 16<<20) {
		t.Fatal("took a volume of a size the pool does not keep")
	}
	// A volume given back is handed out again, mounted.
	full.Store(true)
	time.Sleep(100 * time.Millisecond) // a volume in the making lands
	for p.Take(filepath.Join(dest, "drain"), 8<<20) {
		loopfs.RemoveVolume(filepath.Join(dest, "drain"))
	}
	if !p.Put(filepath.Join(dest, "a"), 8<<20) {
		t.Fatal("Put refused a volume of the pool's size while it was short")
	}
	if !p.Take(filepath.Join(dest, "again"), 8<<20) {
		t.Fatal("no volume after Put")
	}
	defer loopfs.RemoveVolume(filepath.Join(dest, "again"))
	if _, err := os.Stat(filepath.Join(dest, "again", loopfs.VolumeFS, "f")); err != nil {
		t.Fatalf("the volume put back is not the one taken: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(p.Dir); len(ents) != 0 {
		t.Fatalf("Close left %d volumes", len(ents))
	}
}

// Package loopfs makes file systems of a fixed size out of image files:
// an ext4 image whose blocks are allocated on the disk beneath when it is
// made (fallocate), attached to a loop device and mounted. What is
// written into one fails with ENOSPC once it is full, whoever writes it
// and whatever their privileges, and never needs more of the disk beneath
// than it took when it was made: a disk that fills up later cannot make
// its writes fail after they were acknowledged.
//
// An exec's writes go to one (its overlay's upper layer), so a command
// that fills /workspace gets ENOSPC and nothing else feels it. The
// kernel this runs on has no disk quotas (CONFIG_QUOTA), and a tmpfs
// would hold the writes in memory, charged to the container's memory
// limit.
//
// Formatting an image takes mkfs.ext4 10-30 ms, so each size is formatted
// once into a sparse template (a few hundred KiB of metadata) and an image
// is a copy of its template's data into a newly allocated file (Maker);
// Pool keeps a few images of the most asked size mounted ahead of need.
package loopfs

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// MinSize is the smallest image: ext4 needs about 32 KiB of its own, and
// mkfs.ext4 refuses less.
const MinSize = 256 << 10

// SizeClass rounds n down to a size images are made in: MinSize, or a
// multiple of an eighth of n's power of two (1, 1.125, ... 1.875 times
// it), so at most 8 templates per doubling ever exist and an image is
// never more than an eighth smaller than asked.
func SizeClass(n int64) int64 {
	if n <= MinSize {
		return MinSize
	}
	step := int64(1) << (bits.Len64(uint64(n)) - 1 - 3)
	return n / step * step
}

// Maker makes images from templates it keeps in Dir.
type Maker struct {
	// Dir holds one formatted, empty, sparse template per size.
	Dir string

	mu     sync.Mutex
	making map[int64]*sync.Mutex // one formatting per size at a time
}

// Create makes an image of size bytes (a SizeClass) at path, which must
// not exist: its blocks are allocated first, so a full disk fails here
// (with ENOSPC) rather than under a writer later.
func (m *Maker) Create(path string, size int64) (err error) {
	if size != SizeClass(size) {
		return fmt.Errorf("loopfs: image of %d bytes: not a size class", size)
	}
	tpl, err := m.template(size)
	if err != nil {
		return err
	}
	defer tpl.Close()
	img, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("loopfs: %w", err)
	}
	defer func() {
		if cerr := img.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("loopfs: %w", cerr)
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	if err := unix.Fallocate(int(img.Fd()), 0, 0, size); err != nil {
		return fmt.Errorf("loopfs: allocate %d bytes for %s: %w", size, path, err)
	}
	return copyData(img, tpl, size)
}

// copyData copies the data extents of src (the metadata of a template;
// its holes read as zeros, as the new image's unwritten blocks do).
func copyData(dst, src *os.File, size int64) error {
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // no data past off
		} else if err != nil {
			return fmt.Errorf("loopfs: template: %w", err)
		}
		hole, err := unix.Seek(int(src.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("loopfs: template: %w", err)
		}
		// A template lives on the data disk, an image maybe not (and
		// copy_file_range refuses to cross file systems): plain copies.
		if _, err := io.Copy(io.NewOffsetWriter(dst, data), io.NewSectionReader(src, data, hole-data)); err != nil {
			return fmt.Errorf("loopfs: copy template: %w", err)
		}
		off = hole
	}
	return nil
}

// template opens the template of size, formatting it if it is not there.
func (m *Maker) template(size int64) (*os.File, error) {
	path := filepath.Join(m.Dir, strconv.FormatInt(size, 10)+".img")
	if f, err := os.Open(path); err == nil {
		return f, nil
	}
	m.mu.Lock()
	if m.making == nil {
		m.making = map[int64]*sync.Mutex{}
	}
	mu := m.making[size]
	if mu == nil {
		mu = &sync.Mutex{}
		m.making[size] = mu
	}
	m.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if f, err := os.Open(path); err == nil {
		return f, nil // made while this waited
	}
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("loopfs: %w", err)
	}
	tmp := path + ".new"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		return nil, fmt.Errorf("loopfs: %w", err)
	}
	if err := os.Truncate(tmp, size); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("loopfs: %w", err)
	}
	// No journal: an image lives as long as one exec, and what a crash
	// of the machine leaves in it is read back as far as it goes. No
	// reserved blocks: the limit is the image. Inode tables are not
	// zeroed ahead (lazy_itable_init), nor by the kernel after mounting
	// (noinit_itable): an image that starts empty never reads them.
	out, err := exec.Command(mkfsPath(), "-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard",
		"-m", "0", "-L", "computerd-layer", tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("loopfs: mkfs.ext4 (e2fsprogs) for a %d-byte image: %v: %s", size, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("loopfs: %w", err)
	}
	return os.Open(path)
}

// mkfsPath finds mkfs.ext4: on the PATH, or where Debian puts it (an
// unprivileged user's PATH may lack the sbin directories).
func mkfsPath() string {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "mkfs.ext4"
}

// Mount attaches image to a free loop device and mounts its file system
// at dir. The loop device lets go of the image by itself once the file
// system is unmounted (LO_FLAGS_AUTOCLEAR).
func Mount(image, dir string) error {
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loopfs: %w", err)
	}
	defer img.Close()
	dev, err := attach(img)
	if err != nil {
		return err
	}
	// Until the mount holds the device, this descriptor is what keeps
	// the autoclearing device attached.
	defer dev.Close()
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable,nodiscard"); err != nil {
		return fmt.Errorf("loopfs: mount %s at %s: %w", image, dir, err)
	}
	return nil
}

// attach binds img to a free loop device and returns the device, open.
func attach(img *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loopfs: %w", err)
	}
	defer ctl.Close()
	for range 100 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("loopfs: find a free loop device: %w", err)
		}
		name := "/dev/loop" + strconv.Itoa(n)
		if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
			// No devtmpfs or udev made the node: make it.
			if err := unix.Mknod(name, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("loopfs: %w", err)
			}
		}
		dev, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("loopfs: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		// Direct I/O: the image's blocks are not cached twice (in the
		// file system inside and in the file beneath).
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		copy(cfg.Info.File_name[:], img.Name())
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) {
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		}
		if errors.Is(err, unix.EBUSY) {
			dev.Close() // taken meanwhile by someone else
			continue
		}
		if err != nil {
			dev.Close()
			return nil, fmt.Errorf("loopfs: attach %s to %s: %w", img.Name(), name, err)
		}
		return dev, nil
	}
	return nil, fmt.Errorf("loopfs: no free loop device for %s", img.Name())
}

// Unmount detaches the file system mounted at dir (lazily: a process
// still holding it keeps it until it lets go, then its loop device
// detaches too). A dir where nothing is mounted is no error.
func Unmount(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("loopfs: unmount %s: %w", dir, err)
	}
	return nil
}

// Mounted reports whether a file system other than its parent's is
// mounted at dir.
func Mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// A volume is a directory holding an image (VolumeImage) and the
// directory it is mounted at (VolumeFS): the unit Pool hands out, which
// a rename moves with its mount.
const (
	VolumeImage = "image"
	VolumeFS    = "fs"
)

// MakeVolume makes dir (which must not exist) with a new image of size
// mounted at dir/VolumeFS.
func (m *Maker) MakeVolume(dir string, size int64) (err error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("loopfs: %w", err)
	}
	defer func() {
		if err != nil {
			RemoveVolume(dir)
		}
	}()
	if err := m.Create(filepath.Join(dir, VolumeImage), size); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, VolumeFS), 0o755); err != nil {
		return fmt.Errorf("loopfs: %w", err)
	}
	return Mount(filepath.Join(dir, VolumeImage), filepath.Join(dir, VolumeFS))
}

// MountVolume mounts the image of volume dir again, unless it is mounted
// (after a crash of the process that made it, its mount may be left).
func MountVolume(dir string) error {
	fs := filepath.Join(dir, VolumeFS)
	if Mounted(fs) {
		return nil
	}
	return Mount(filepath.Join(dir, VolumeImage), fs)
}

// Check makes and removes a volume of MinSize in dir (which must not
// exist): whether this host can make volumes at all (mkfs.ext4, loop
// devices, mounting ext4), said once at start-up rather than by every
// exec. A disk too full to tell passes.
func (m *Maker) Check(dir string) error {
	err := m.MakeVolume(dir, MinSize)
	if errors.Is(err, unix.ENOSPC) {
		return nil // a full disk says nothing of the host; execs will say it
	}
	if err != nil {
		return fmt.Errorf("%w (an exec's writes go to a volume: the host needs mkfs.ext4 from e2fsprogs, /dev/loop-control and ext4)", err)
	}
	return RemoveVolume(dir)
}

// RemoveVolume unmounts volume dir's file system and removes dir; the
// image's blocks go back to the disk once nothing holds the file system.
func RemoveVolume(dir string) error {
	if err := Unmount(filepath.Join(dir, VolumeFS)); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// IsVolume reports whether dir holds an image.
func IsVolume(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, VolumeImage))
	return err == nil
}

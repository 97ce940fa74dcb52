// Package powercut emulates a machine losing its power, for tests of what
// survives that: a disk with a volatile write cache, which keeps a write
// only once a flush has followed it.
//
// The disk is an image file served over FUSE (Disk). Its writes go to a
// cache in memory; an fsync of the file (which is what a loop device does
// for a flush, and for a write with FUA) copies the cache to the image.
// Cut drops the cache, as a power loss does, keeping at most a random
// part of it (a disk may have written any of its cache by then), and from
// then on nothing written reaches the image. A Machine puts an ext4 file
// system on a loop device over the disk and mounts it: the code under test
// works in Machine.Root, writes and fsyncs as on any disk, and after a Cut
// the image holds what a real disk would have held; Mount mounts it again
// (ext4 replays its journal), as a machine that boots after the cut would.
//
// It needs root, /dev/fuse, loop devices and mkfs.ext4 (e2fsprogs).
package powercut

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// blockSize is the unit the cache keeps: ext4's block, and the page.
const blockSize = 4096

// Format makes image, a new ext4 file system of size bytes (sparse, a
// multiple of 4 KiB).
func Format(image string, size int64) error {
	if size <= 0 || size%blockSize != 0 {
		return fmt.Errorf("powercut: image of %d bytes: want a multiple of %d", size, blockSize)
	}
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("powercut: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("powercut: %w", err)
	}
	out, err := exec.Command(mkfsPath(), "-q", "-F", "-E", "nodiscard", "-L", "powercut", image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("powercut: mkfs.ext4 (e2fsprogs) %s: %v: %s", image, err, out)
	}
	return nil
}

// mkfsPath finds mkfs.ext4, on the PATH or where Debian puts it.
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

// Disk serves an image as the file Path over FUSE, caching its writes
// until a flush.
type Disk struct {
	// Path is the disk as a file: give it to a loop device.
	Path string

	image  *os.File
	size   int64
	server *fuse.Server
	mnt    string

	mu      sync.Mutex
	cache   map[int64][]byte // block number -> contents not yet flushed
	cut     bool             // the power is off: nothing reaches the image
	flushes int
}

// diskFile is the one file of a Disk's file system.
type diskFile struct {
	fs.Inode
	d *Disk
}

var (
	_ fs.NodeOpener    = (*diskFile)(nil)
	_ fs.NodeGetattrer = (*diskFile)(nil)
	_ fs.NodeSetattrer = (*diskFile)(nil)
	_ fs.NodeReader    = (*diskFile)(nil)
	_ fs.NodeWriter    = (*diskFile)(nil)
	_ fs.NodeFsyncer   = (*diskFile)(nil)
	_ fs.NodeFlusher   = (*diskFile)(nil)
)

// ServeDisk serves image (of a fixed size) as dir/disk; dir must exist.
func ServeDisk(image, dir string) (*Disk, error) {
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("powercut: %w", err)
	}
	if fi.Size()%blockSize != 0 {
		f.Close()
		return nil, fmt.Errorf("powercut: %s: %d bytes, not a multiple of %d", image, fi.Size(), blockSize)
	}
	d := &Disk{Path: filepath.Join(dir, "disk"), image: f, size: fi.Size(), mnt: dir, cache: map[int64][]byte{}}
	root := &fs.Inode{}
	d.server, err = fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMount: true, FsName: "powercut", Name: "powercut"},
		OnAdd: func(ctx context.Context) {
			ch := root.NewPersistentInode(ctx, &diskFile{d: d}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
			root.AddChild("disk", ch, true)
		},
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("powercut: serve %s: %w", image, err)
	}
	return d, nil
}

// Open gives no page cache: every read and write of the loop device
// comes here.
func (n *diskFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (n *diskFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o600
	out.Size = uint64(n.d.size)
	out.Nlink = 1
	return 0
}

// Setattr takes nothing: the disk's size is fixed (a loop device opening
// it with O_TRUNC does not happen, but a truncate must not pass).
func (n *diskFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok {
		return syscall.EPERM
	}
	return n.Getattr(ctx, fh, out)
}

func (n *diskFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	d := n.d
	if off >= d.size {
		return fuse.ReadResultData(nil), 0
	}
	dest = dest[:min(int64(len(dest)), d.size-off)]
	d.mu.Lock()
	defer d.mu.Unlock()
	for done := 0; done < len(dest); {
		b, in := (off+int64(done))/blockSize, (off+int64(done))%blockSize
		k := min(len(dest)-done, int(blockSize-in))
		if c, ok := d.cache[b]; ok {
			copy(dest[done:done+k], c[in:])
		} else if _, err := d.image.ReadAt(dest[done:done+k], off+int64(done)); err != nil {
			return nil, syscall.EIO
		}
		done += k
	}
	return fuse.ReadResultData(dest), 0
}

// Write puts data in the cache: it reaches the image at the next flush,
// unless the power is cut first.
func (n *diskFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	d := n.d
	if off < 0 || off+int64(len(data)) > d.size {
		return 0, syscall.ENOSPC
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for done := 0; done < len(data); {
		b, in := (off+int64(done))/blockSize, (off+int64(done))%blockSize
		k := min(len(data)-done, int(blockSize-in))
		c, ok := d.cache[b]
		if !ok {
			c = make([]byte, blockSize)
			if k < blockSize {
				if _, err := d.image.ReadAt(c, b*blockSize); err != nil {
					return 0, syscall.EIO
				}
			}
			d.cache[b] = c
		}
		copy(c[in:], data[done:done+k])
		done += k
	}
	return uint32(len(data)), 0
}

// Fsync is the disk's flush: the cache goes to the image.
func (n *diskFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	d := n.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return 0 // the power is off: the cache is lost, whatever is asked
	}
	for b, c := range d.cache {
		if _, err := d.image.WriteAt(c, b*blockSize); err != nil {
			return syscall.EIO
		}
	}
	clear(d.cache)
	d.flushes++
	return 0
}

// Flush (a close of the file) flushes nothing: a disk has no such thing.
func (n *diskFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

// Flushes counts the flushes that reached the image.
func (d *Disk) Flushes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flushes
}

// Cut cuts the power: what was written since the last flush is lost but
// for a part keep (0 to 1) of its blocks, chosen at random, which the disk
// had written by then; whatever is written or flushed afterwards never
// reaches the image (reads still see it, so that what the kernel does
// until it lets go of the disk stays consistent). It returns how many
// unflushed blocks were lost.
func (d *Disk) Cut(rng *rand.Rand, keep float64) (lost int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return 0, nil
	}
	d.cut = true
	for b, c := range d.cache {
		if keep > 0 && rng.Float64() < keep {
			if _, werr := d.image.WriteAt(c, b*blockSize); werr != nil {
				err = werr
			}
			continue
		}
		lost++
	}
	return lost, err
}

// Close stops serving the disk; call it once nothing holds Path open (the
// loop device is detached).
func (d *Disk) Close() error {
	err := d.server.Unmount()
	if err != nil {
		// A lazy unmount lets go once the last holder does.
		err = unix.Unmount(d.mnt, unix.MNT_DETACH)
	}
	d.server.Wait()
	return errors.Join(err, d.image.Close())
}

// Machine is an ext4 file system on a Disk, mounted at Root.
type Machine struct {
	// Root is where the file system is mounted.
	Root string
	// Disk is the disk beneath.
	Disk *Disk

	loop   string // the loop device, /dev/loopN
	closed bool
}

// Start serves image (an ext4 file system, Format) as a Disk beneath
// dir/disk, attaches a loop device to it and mounts its file system at
// dir/root. dir must exist.
func Start(image, dir string) (m *Machine, err error) {
	m = &Machine{Root: filepath.Join(dir, "root")}
	for _, p := range []string{filepath.Join(dir, "disk"), m.Root} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("powercut: %w", err)
		}
	}
	if m.Disk, err = ServeDisk(image, filepath.Join(dir, "disk")); err != nil {
		return nil, err
	}
	if m.loop, err = mount(m.Disk.Path, m.Root); err != nil {
		m.Disk.Close()
		return nil, err
	}
	return m, nil
}

// Cut cuts the power of the machine's disk (Disk.Cut). Stop what works in
// Root first (SIGSTOP, then SIGKILL once cut): anything it does after the
// cut counts for nothing.
func (m *Machine) Cut(rng *rand.Rand, keep float64) (int, error) { return m.Disk.Cut(rng, keep) }

// Close unmounts the file system, waits for its loop device to let go of
// the disk and stops serving the disk. Processes using Root must be gone.
// Closing again does nothing.
func (m *Machine) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	err := unmount(m.Root, m.loop)
	return errors.Join(err, m.Disk.Close())
}

// Mount mounts image's file system at dir straight from the image (no
// cache: nothing more is cut), as a machine booting after a cut does. The
// function it returns unmounts it and waits for the loop device to go.
func Mount(image, dir string) (unmountFn func() error, err error) {
	loop, err := mount(image, dir)
	if err != nil {
		return nil, err
	}
	return func() error { return unmount(dir, loop) }, nil
}

// mount attaches file to a free loop device (buffered: its flushes become
// fsyncs of file) and mounts its ext4 file system at dir. The device goes
// by itself once the file system is unmounted (LO_FLAGS_AUTOCLEAR).
func mount(file, dir string) (string, error) {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("powercut: %w", err)
	}
	defer f.Close()
	dev, err := attach(f)
	if err != nil {
		return "", err
	}
	defer dev.Close() // the mount holds the device from here
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return "", fmt.Errorf("powercut: mount %s (%s) at %s: %w", dev.Name(), file, dir, err)
	}
	return dev.Name(), nil
}

// attach binds f to a free loop device and returns the device, open.
func attach(f *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	defer ctl.Close()
	for range 100 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("powercut: find a free loop device: %w", err)
		}
		name := "/dev/loop" + strconv.Itoa(n)
		if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
			if err := unix.Mknod(name, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("powercut: %w", err)
			}
		}
		dev, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("powercut: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], f.Name())
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			dev.Close() // taken meanwhile
			continue
		}
		if err != nil {
			dev.Close()
			return nil, fmt.Errorf("powercut: attach %s to %s: %w", f.Name(), name, err)
		}
		return dev, nil
	}
	return nil, fmt.Errorf("powercut: no free loop device for %s", f.Name())
}

// unmount unmounts dir and waits (up to 10 s) until loop, the device
// beneath, has let go of its file.
func unmount(dir, loop string) error {
	var err error
	for range 50 {
		if err = unix.Unmount(dir, 0); !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("powercut: unmount %s: %w", dir, err)
	}
	backing := "/sys/block/" + filepath.Base(loop) + "/loop/backing_file"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return fmt.Errorf("powercut: %s still attached 10 s after unmounting %s", loop, dir)
}

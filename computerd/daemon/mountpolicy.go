package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/computerd/mountinfo"
	"computerd/core"
)

// mountPolicy decides where host mounts may go: beneath the roots the
// operator configured (computerd serve --mount-root), reached from a root
// without a symlink, never on a system directory, a directory on
// computerd's PATH (or one that holds such a directory), the data
// directory, a FUSE file system, or a mount point of any file system.
// docs/SECURITY.md ("Host mounts") has the rules.
type mountPolicy struct {
	roots   []string // absolute, symlinks resolved
	dataDir string
	path    []string // computerd's PATH: absolute entries, cleaned, with their resolved forms
}

// systemTrees are the host directories no mount may go on or beneath,
// besides every top-level directory whose name starts with "lib".
var systemTrees = []string{
	"/bin", "/boot", "/dev", "/etc", "/proc", "/root", "/run", "/sbin", "/snap", "/sys", "/usr",
	"/var/cache", "/var/lib", "/var/log", "/var/mail", "/var/run", "/var/spool",
}

// systemDirs are host directories no mount may cover (beneath them a
// root may allow mounts).
var systemDirs = []string{"/", "/home", "/media", "/mnt", "/opt", "/srv", "/tmp", "/var", "/var/tmp"}

// newMountPolicy checks the roots (each an existing directory) and takes
// computerd's PATH as it is now. With roots, the kernel must give unique
// mount ids: they are how computerd knows its mounts from others'.
func newMountPolicy(roots []string, dataDir string) (*mountPolicy, error) {
	p := &mountPolicy{dataDir: dataDir}
	if abs, err := filepath.Abs(dataDir); err == nil {
		p.dataDir = resolved(abs)
	}
	for _, r := range roots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("mount root %q: want an absolute path", r)
		}
		real, err := filepath.EvalSymlinks(r)
		if err != nil {
			return nil, fmt.Errorf("mount root: %w", err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("mount root %s: not a directory", r)
		}
		if len(p.roots) == 0 {
			if err := probeUniqueID(real); err != nil {
				return nil, fmt.Errorf("mount root %s: %w", r, err)
			}
		}
		p.roots = append(p.roots, real)
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		p.path = append(p.path, d)
		if real := resolved(d); real != d {
			p.path = append(p.path, real)
		}
	}
	return p, nil
}

// probeUniqueID fails if the kernel gives no unique mount ids.
func probeUniqueID(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := mountinfo.UniqueID(int(f.Fd())); err != nil {
		return fmt.Errorf("host mounts need Linux 6.8 or later: %w", err)
	}
	return nil
}

// resolved is p with its symlinks resolved, or p itself when that fails.
func resolved(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

// forbidden is a refusal by the policy: 403, code forbidden.
func forbidden(format string, args ...any) error {
	return fmt.Errorf("mount %s: %w", fmt.Sprintf(format, args...), core.ErrForbidden)
}

// mountPointRefused refuses dir, a mount point.
func mountPointRefused(dir string) error {
	return forbidden("%s: a mount point (another file system is mounted there)", dir)
}

// within reports whether p is dir or beneath it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// check is the policy's verdict on the clean, absolute dir by its name
// alone, before the file system is asked anything (so that a refusal
// tells nothing about what is there); it returns the root dir is under.
func (p *mountPolicy) check(dir string) (string, error) {
	if len(p.roots) == 0 {
		return "", forbidden("%s: host mounts are off (computerd serve has no --mount-root)", dir)
	}
	root := ""
	for _, r := range p.roots {
		if dir != r && within(dir, r) {
			root = r
			break
		}
	}
	if root == "" {
		return "", forbidden("%s: not beneath a mount root (%s)", dir, strings.Join(p.roots, ", "))
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(dir, "/"), "/")
	if strings.HasPrefix(first, "lib") || slices.ContainsFunc(systemTrees, func(t string) bool { return within(dir, t) }) ||
		slices.Contains(systemDirs, dir) {
		return "", forbidden("%s: a system directory", dir)
	}
	for _, d := range p.path {
		if within(d, dir) {
			return "", forbidden("%s: on computerd's PATH (%s)", dir, d)
		}
	}
	if within(dir, p.dataDir) || within(p.dataDir, dir) {
		return "", forbidden("%s: holds or is inside the data directory", dir)
	}
	return root, nil
}

// open checks dir and opens it for fusefs.Options.At: each component
// beneath the root is resolved in turn, refusing symlinks and escapes
// (openat2 with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS), then the
// directory found must be empty, on no FUSE file system, no mount point,
// and none of the directories the names check refuses (a bind mount of
// one, say).
func (p *mountPolicy) open(dir string) (*fusefs.MountPoint, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("mount dir %q: want an absolute path: %w", dir, core.ErrInvalidArgument)
	}
	dir = filepath.Clean(dir)
	root, err := p.check(dir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return nil, err
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mount root %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	parent, err := openBeneath(rootFD, filepath.Dir(rel), unix.O_PATH)
	if err != nil {
		return nil, resolveError(dir, err)
	}
	d, err := openBeneath(int(parent.Fd()), filepath.Base(rel), unix.O_RDONLY)
	if err != nil {
		parent.Close()
		return nil, resolveError(dir, err)
	}
	at := &fusefs.MountPoint{Dir: d, Parent: parent, Name: filepath.Base(rel)}
	if err := p.checkOpen(dir, at); err != nil {
		at.Close()
		return nil, err
	}
	return at, nil
}

// openBeneath opens the directory rel beneath dirFD without following a
// symlink or leaving dirFD. (Not O_NOFOLLOW: with it a symlink as the last
// component would fail as "not a directory" instead of ELOOP.)
func openBeneath(dirFD int, rel string, mode int) (*os.File, error) {
	fd, err := unix.Openat2(dirFD, rel, &unix.OpenHow{
		Flags:   uint64(mode | unix.O_DIRECTORY | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// resolveError says why dir could not be opened beneath its root.
func resolveError(dir string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return forbidden("%s: a symlink on the way (no component beneath the mount root may be one)", dir)
	case errors.Is(err, unix.EXDEV):
		return forbidden("%s: leaves the mount root", dir)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("mount dir %s: not an existing directory: %w", dir, core.ErrInvalidArgument)
	}
	return fmt.Errorf("mount dir %s: %w", dir, err)
}

// checkOpen checks the opened directory at.Dir (named dir).
func (p *mountPolicy) checkOpen(dir string, at *fusefs.MountPoint) error {
	d := at.Dir
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &fs); err != nil {
		return fmt.Errorf("mount dir %s: %w", dir, err)
	}
	if fs.Type == unix.FUSE_SUPER_MAGIC {
		return forbidden("%s: on a FUSE file system (inside or on another mount)", dir)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return fmt.Errorf("mount dir %s: %w", dir, err)
	}
	for _, other := range slices.Concat(systemTrees, systemDirs, p.path, []string{p.dataDir}) {
		var ost unix.Stat_t
		if unix.Stat(other, &ost) == nil && ost.Dev == st.Dev && ost.Ino == st.Ino {
			return forbidden("%s: is %s", dir, other)
		}
	}
	// The name was looked up in the parent, crossing onto what is mounted
	// there: the directory is a mount point if it is on another mount than
	// its parent. Both are held open, so the answer holds for the very
	// directory the mount is made on (and fusefs checks that none was made
	// there since).
	dirID, err := mountinfo.UniqueID(int(d.Fd()))
	if err != nil {
		return fmt.Errorf("mount dir %s: %w", dir, err)
	}
	parentID, err := mountinfo.UniqueID(int(at.Parent.Fd()))
	if err != nil {
		return fmt.Errorf("mount dir %s: %w", dir, err)
	}
	if dirID != parentID {
		return mountPointRefused(dir)
	}
	if _, err := d.Readdirnames(1); !errors.Is(err, io.EOF) {
		if err != nil {
			return fmt.Errorf("mount dir %s: %w", dir, err)
		}
		return fmt.Errorf("mount dir %s is not empty: %w", dir, core.ErrInvalidArgument)
	}
	return nil
}

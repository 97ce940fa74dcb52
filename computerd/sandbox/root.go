package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"computerd/computerd/idmap"
)

// RootsDir holds the default roots of every Manager on the host, one
// directory per content (the hash of its tree), shared by Managers that
// make the same one and never changed once made. A container's init
// mounts its root by path from inside the container's user namespace,
// where host root's directories are searchable only if they are
// searchable by others; a data directory is usually not (0700), so the
// roots live here, in a directory every id can search, like runc's
// /run/runc. A root holds no secret: mount points, the host's top-level
// links, and the files of the container's /etc.
const RootsDir = "/run/computerd/roots"

// prepareRoot makes the default root once and returns its path: a
// directory under RootsDir with the mount points of the container's
// mounts and the host's top-level links (merged /usr).
func (m *Manager) prepareRoot() (string, error) {
	m.prepMu.Lock()
	defer m.prepMu.Unlock()
	if m.root != "" {
		return m.root, nil
	}
	if err := os.MkdirAll(RootsDir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %w", ErrStart, err)
	}
	removeStaleRoots()
	tmp, err := os.MkdirTemp(RootsDir, ".new-")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrStart, err)
	}
	defer os.RemoveAll(tmp) // gone once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("%w: %w", ErrStart, err)
	}
	if err := m.buildRoot(tmp); err != nil {
		return "", fmt.Errorf("%w: default root: %w", ErrStart, err)
	}
	sum, err := hashTree(tmp)
	if err != nil {
		return "", fmt.Errorf("%w: default root: %w", ErrStart, err)
	}
	root := filepath.Join(RootsDir, sum)
	if _, err := os.Lstat(root); err != nil {
		// Another Manager may make the same root at the same time: the
		// rename of one wins, and the other's fails on a full directory.
		if err := os.Rename(tmp, root); err != nil {
			if _, serr := os.Lstat(root); serr != nil {
				return "", fmt.Errorf("%w: default root: %w", ErrStart, err)
			}
		}
	}
	if err := searchable(root, m.ids()); err != nil {
		return "", fmt.Errorf("%w: default root: %w", ErrStart, err)
	}
	m.root = root
	return root, nil
}

// buildRoot makes the default root's contents in dir.
func (m *Manager) buildRoot(dir string) error {
	for _, d := range []string{"proc", "dev", "sys", "tmp", "workspace"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}

	for _, hd := range m.hostDirs() {
		fi, err := os.Lstat(hd)
		if err != nil {
			continue
		}
		dst := filepath.Join(dir, hd)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(hd)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeStaleRoots removes the half-made roots that a process which died
// while making one left (a live one finishes its own within milliseconds).
func removeStaleRoots() {
	ents, _ := os.ReadDir(RootsDir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".new-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.RemoveAll(filepath.Join(RootsDir, e.Name()))
		}
	}
}

// hashTree is a short hash of the names, kinds, modes, link targets and
// contents of the tree under dir.
func hashTree(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%q %o\n", rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "-> %q\n", target)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%d\n", fi.Size())
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// searchable checks that the root of a container whose ids are ids can
// reach dir: that it may search dir and every directory above it. Host
// root's capabilities do not extend to files whose owner the container's
// user namespace does not map, so only the permission bits count.
func searchable(dir string, ids idmap.Range) error {
	root, _ := ids.Host(0)
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner", p)
		}
		perm := fi.Mode().Perm()
		switch {
		case st.Uid == root && perm&0o100 != 0:
		case st.Uid != root && st.Gid == root && perm&0o010 != 0:
		case st.Uid != root && st.Gid != root && perm&0o001 != 0:
		default:
			return fmt.Errorf("%s (mode %o, owner %d:%d) is not searchable by the container's root (host id %d)", p, perm, st.Uid, st.Gid, root)
		}
		if p == "/" {
			return nil
		}
	}
}

func (m *Manager) ids() idmap.Range { return m.IDs.Or(idmap.Default) }

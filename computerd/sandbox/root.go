package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
// mounts, the host's top-level links (merged /usr), and the container's
// /etc (etc.go). The root is named by the hash of what it would hold, so
// that it is written only when no Manager has made the same one before
// (writing and removing its thousand entries costs a second here).
func (m *Manager) prepareRoot() (string, error) {
	m.prepMu.Lock()
	defer m.prepMu.Unlock()
	if m.root != "" {
		return m.root, nil
	}
	fail := func(err error) (string, error) { return "", fmt.Errorf("%w: default root: %w", ErrStart, err) }
	plan, err := m.rootPlan()
	if err != nil {
		return fail(err)
	}
	sum, err := plan.hash()
	if err != nil {
		return fail(err)
	}
	root := filepath.Join(RootsDir, sum)
	if _, err := os.Lstat(root); err != nil {
		if err := os.MkdirAll(RootsDir, 0o755); err != nil {
			return fail(err)
		}
		removeStaleRoots()
		tmp, err := os.MkdirTemp(RootsDir, ".new-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(tmp) // gone once renamed
		if err := plan.build(tmp); err != nil {
			return fail(err)
		}
		// Another Manager may make the same root at the same time: the
		// rename of one wins, and the other's fails on a full directory.
		if err := os.Rename(tmp, root); err != nil {
			if _, serr := os.Lstat(root); serr != nil {
				return fail(err)
			}
		}
	}
	if err := searchable(root, m.ids()); err != nil {
		return fail(err)
	}
	m.root = root
	return root, nil
}

// rootEntry is one entry of a root to be made.
type rootEntry struct {
	rel    string      // its path in the root
	mode   fs.FileMode // type and permissions
	target string      // a symbolic link's
	data   []byte      // a file's contents, or
	src    string      // the host file to copy them from
}

// rootPlan is what a root holds, parents before children.
type rootPlan []rootEntry

// rootPlan is the default root of m.
func (m *Manager) rootPlan() (rootPlan, error) {
	plan := rootPlan{{rel: ".", mode: fs.ModeDir | 0o755}}
	for _, d := range []string{"proc", "dev", "sys", "tmp", "workspace"} {
		plan = append(plan, rootEntry{rel: d, mode: fs.ModeDir | 0o755})
	}
	etc, err := etcPlan("/etc")
	if err != nil {
		return nil, err
	}
	plan = append(plan, etc...)
	for _, hd := range m.hostDirs() {
		fi, err := os.Lstat(hd)
		if err != nil {
			continue
		}
		rel := strings.TrimPrefix(filepath.Clean(hd), "/")
		for dir := filepath.Dir(rel); dir != "."; dir = filepath.Dir(dir) {
			plan = append(plan, rootEntry{rel: dir, mode: fs.ModeDir | 0o755})
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(hd)
			if err != nil {
				return nil, err
			}
			plan = append(plan, rootEntry{rel: rel, mode: fs.ModeSymlink | 0o777, target: target})
		case fi.IsDir():
			plan = append(plan, rootEntry{rel: rel, mode: fs.ModeDir | 0o755})
		}
	}
	// Sorted by path, a directory comes before what it holds; an entry
	// listed twice (a host directory also made for a mount) is kept once.
	slices.SortStableFunc(plan, func(a, b rootEntry) int { return strings.Compare(a.rel, b.rel) })
	return slices.CompactFunc(plan, func(a, b rootEntry) bool { return a.rel == b.rel }), nil
}

// hash is a short hash of the plan: names, kinds, modes, link targets
// and contents.
func (p rootPlan) hash() (string, error) {
	h := sha256.New()
	for _, e := range p {
		fmt.Fprintf(h, "%q %o %q %d\n", e.rel, uint32(e.mode), e.target, len(e.data))
		h.Write(e.data)
		if e.src != "" {
			f, err := os.Open(e.src)
			if err != nil {
				return "", err
			}
			n, err := io.Copy(h, f)
			f.Close()
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "\n%d\n", n)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// build makes the plan's entries under dir, which exists.
func (p rootPlan) build(dir string) error {
	for _, e := range p {
		path := filepath.Join(dir, e.rel)
		var err error
		switch {
		case e.rel == ".":
			err = os.Chmod(dir, e.mode.Perm())
		case e.mode.IsDir():
			if err = os.Mkdir(path, e.mode.Perm()); err == nil {
				err = os.Chmod(path, e.mode.Perm()) // the umask's share
			}
		case e.mode&fs.ModeSymlink != 0:
			err = os.Symlink(e.target, path)
		case e.src != "":
			err = copyFile(e.src, path, e.mode.Perm())
		default:
			if err = os.WriteFile(path, e.data, e.mode.Perm()); err == nil {
				err = os.Chmod(path, e.mode.Perm())
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// removeStaleRoots removes the half-made roots that a process which died
// while making one left (a live one finishes its own within a second).
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

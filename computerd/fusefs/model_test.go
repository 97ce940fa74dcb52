package fusefs_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/computerd/fusefs/treetest"
	"computerd/core"
	"computerd/fsstore"
)

// TestRandomOps applies the same random operations to a mount and to a
// plain directory, compares the two trees after every step, and compares
// the store's committed tree with the directory after every commit.
func TestRandomOps(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FUSEFS_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (rerun with FUSEFS_SEED=%d)", seed, seed)
	for round := range 4 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			runRandomOps(t, seed+uint64(round), 300)
		})
	}
}

func runRandomOps(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, mnt := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	ref := t.TempDir()
	dirs := []string{"", "a", "b", "a/c", "b/d"}
	names := []string{"f", "g", "h", "a", "b", "c", "d"}
	pick := func() string {
		d := dirs[rng.IntN(len(dirs))]
		return filepath.Join(d, names[rng.IntN(len(names))])
	}
	data := func() []byte {
		n := rng.IntN(64)
		switch rng.IntN(6) {
		case 0:
			n = rng.IntN(700 << 10) // spans chunks
		case 1:
			n = 0
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(3))
		}
		if rng.IntN(4) == 0 && n > 10 {
			clear(b[rng.IntN(n):]) // zeros, maybe whole chunks
		}
		return b
	}
	type op struct {
		desc string
		fn   func(root string) error
	}
	h := head(t, st, w.ID)
	for step := 0; step < steps; step++ {
		var o op
		p, q := pick(), pick()
		switch k := rng.IntN(15); k {
		case 14:
			// Someone else writes through the store; Refresh shows it.
			if _, _, err := m.Commit(bg); err != nil {
				t.Fatalf("step %d: commit: %v", step, err)
			}
			h = head(t, st, w.ID)
			pfi, perr := os.Lstat(filepath.Join(ref, filepath.Dir(p)))
			fi, err := os.Lstat(filepath.Join(ref, p))
			if perr != nil || !pfi.IsDir() || err == nil && !fi.Mode().IsRegular() {
				continue
			}
			b := data()
			if _, err := st.Commit(bg, w.ID, new(core.Batch).WriteFile(p, b, 0), fsstore.CommitInfo{}); err != nil {
				t.Fatalf("step %d: api write %s: %v", step, p, err)
			}
			if err := os.WriteFile(filepath.Join(ref, p), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := m.Refresh(bg); err != nil {
				t.Fatalf("step %d: refresh: %v", step, err)
			}
			h = head(t, st, w.ID)
			if got, want := treetest.Dir(t, mnt), treetest.Dir(t, ref); got != want {
				t.Fatalf("step %d: after api write %s + refresh: mount differs from reference:\n%s", step, p, treetest.Diff(got, want))
			}
			continue
		case 0, 1:
			b := data()
			o = op{"write " + p, func(r string) error { return os.WriteFile(filepath.Join(r, p), b, 0o644) }}
		case 2:
			b, off := data(), int64(rng.IntN(300<<10))
			o = op{fmt.Sprintf("pwrite %s@%d+%d", p, off, len(b)), func(r string) error {
				f, err := os.OpenFile(filepath.Join(r, p), os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				_, err = f.WriteAt(b, off)
				return errors.Join(err, f.Close())
			}}
		case 3:
			size := int64(rng.IntN(600 << 10))
			o = op{fmt.Sprintf("truncate %s %d", p, size), func(r string) error { return os.Truncate(filepath.Join(r, p), size) }}
		case 4:
			b := data()
			o = op{"append " + p, func(r string) error {
				f, err := os.OpenFile(filepath.Join(r, p), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return err
				}
				_, err = f.Write(b)
				return errors.Join(err, f.Close())
			}}
		case 5:
			o = op{"mkdir " + p, func(r string) error { return os.Mkdir(filepath.Join(r, p), 0o755) }}
		case 6:
			o = op{"rmdir " + p, func(r string) error { return unix.Rmdir(filepath.Join(r, p)) }}
		case 7:
			o = op{"unlink " + p, func(r string) error { return unix.Unlink(filepath.Join(r, p)) }}
		case 8, 9:
			flags := []uint{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}[rng.IntN(4)]
			o = op{fmt.Sprintf("rename %s %s %d", p, q, flags), func(r string) error {
				return unix.Renameat2(unix.AT_FDCWD, filepath.Join(r, p), unix.AT_FDCWD, filepath.Join(r, q), flags)
			}}
		case 10:
			o = op{"link " + p + " " + q, func(r string) error { return unix.Link(filepath.Join(r, p), filepath.Join(r, q)) }}
		case 11:
			target := names[rng.IntN(len(names))]
			o = op{"symlink " + p + " -> " + target, func(r string) error { return os.Symlink(target, filepath.Join(r, p)) }}
		case 12:
			mode := uint32(0o600 + rng.IntN(0o200))
			o = op{fmt.Sprintf("chmod %s %o", p, mode), func(r string) error { return unix.Fchmodat(unix.AT_FDCWD, filepath.Join(r, p), mode, 0) }}
		case 13:
			o = op{"commit", nil}
		}
		if o.fn == nil {
			rev, changed, err := m.Commit(bg)
			if err != nil {
				t.Fatalf("step %d: commit: %v", step, err)
			}
			if changed && rev.Rev != h+1 || !changed && head(t, st, w.ID) != h {
				t.Fatalf("step %d: commit made revision %d (changed %v) after %d, head %d", step, rev.Rev, changed, h, head(t, st, w.ID))
			}
			h = head(t, st, w.ID)
			if got, want := treetest.Store(t, st, w.ID), treetest.Dir(t, ref); got != want {
				t.Fatalf("step %d: store differs from reference:\n%s", step, treetest.Diff(got, want))
			}
			continue
		}
		errRef, errMnt := o.fn(ref), o.fn(mnt)
		if errno(errRef) != errno(errMnt) {
			t.Fatalf("step %d: %s: reference %v, mount %v", step, o.desc, errRef, errMnt)
		}
		if got, want := treetest.Dir(t, mnt), treetest.Dir(t, ref); got != want {
			t.Fatalf("step %d: after %s: mount differs from reference:\n%s", step, o.desc, treetest.Diff(got, want))
		}
	}
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatal(err)
	}
	if got, want := treetest.Store(t, st, w.ID), treetest.Dir(t, ref); got != want {
		t.Fatalf("end: store differs from reference:\n%s", treetest.Diff(got, want))
	}
}

func errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	if err != nil {
		return syscall.Errno(1 << 20)
	}
	return 0
}

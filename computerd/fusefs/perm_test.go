package fusefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/core"
	"computerd/fsstore"
)

// user is the credentials a permission check runs with.
type user struct {
	uid, gid uint32
	groups   []uint32
}

var (
	alice  = user{uid: 1000, gid: 1000}
	bob    = user{uid: 2000, gid: 2000, groups: []uint32{1000}} // in alice's group
	carol  = user{uid: 3000, gid: 3000}                         // in none
	owner5 = user{uid: 1000, gid: 1000, groups: []uint32{1000, 5000}}
)

// as runs fn on an OS thread of its own that has u's real, effective and
// filesystem ids and supplementary groups (and, unless u is root, no
// capabilities). The thread ends with fn: the runtime never hands it to
// another goroutine.
func as(t *testing.T, u user, fn func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked, so the thread dies with this goroutine
		if u.uid != 0 {
			// Raw system calls change this thread only (the syscall
			// package's Setresuid changes every thread of the process).
			var list unsafe.Pointer
			if len(u.groups) > 0 {
				list = unsafe.Pointer(&u.groups[0])
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(u.groups)), uintptr(list), 0); e != 0 {
				done <- e
				return
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(u.gid), uintptr(u.gid), uintptr(u.gid)); e != 0 {
				done <- e
				return
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(u.uid), uintptr(u.uid), uintptr(u.uid)); e != 0 {
				done <- e
				return
			}
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("switch to uid %d: %v", u.uid, err)
	}
}

// wantErrno checks the outcome of an operation against an errno (0: success).
func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	var got syscall.Errno
	if err != nil && !errors.As(err, &got) {
		t.Errorf("%s: %v, want errno %v", what, err, want)
		return
	}
	if got != want {
		t.Errorf("%s: errno %d (%v), want %d (%v)", what, got, err, want, want)
	}
}

func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func touch(p string, mode uint32) error {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, mode)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// setup makes p (a file, or a directory if dir) owned by uid:gid with mode perm.
func setup(t *testing.T, p string, dir bool, uid, gid int, perm uint32) {
	t.Helper()
	var err error
	if dir {
		err = unix.Mkdir(p, 0o700)
	} else {
		err = touch(p, 0o600)
	}
	if err == nil {
		err = unix.Lchown(p, uid, gid)
	}
	if err == nil {
		err = unix.Chmod(p, perm)
	}
	if err != nil {
		t.Fatalf("setup %s: %v", p, err)
	}
}

// wantMode checks the permission and special bits (and the group, if gid >= 0) of p.
func wantMode(t *testing.T, p string, perm uint32, gid int) {
	t.Helper()
	st := lstat(t, p)
	if got := st.Mode & 0o7777; got != perm {
		t.Errorf("%s: mode %04o, want %04o", filepath.Base(p), got, perm)
	}
	if gid >= 0 && st.Gid != uint32(gid) {
		t.Errorf("%s: gid %d, want %d", filepath.Base(p), st.Gid, gid)
	}
}

// permRules are the permission rules of a local file system that the
// mount must keep for callers other than root, each checked on a fresh
// directory d (mode 0777) of the file system under test.
var permRules = []struct {
	name string
	run  func(t *testing.T, d string)
}{
	{"access", func(t *testing.T, d string) {
		f := filepath.Join(d, "f")
		setup(t, f, false, 1000, 1000, 0o640)
		as(t, alice, func() {
			wantErrno(t, "owner R_OK", unix.Access(f, unix.R_OK), 0)
			wantErrno(t, "owner W_OK", unix.Access(f, unix.W_OK), 0)
			wantErrno(t, "owner X_OK", unix.Access(f, unix.X_OK), unix.EACCES)
		})
		as(t, bob, func() {
			wantErrno(t, "group R_OK", unix.Access(f, unix.R_OK), 0)
			wantErrno(t, "group W_OK", unix.Access(f, unix.W_OK), unix.EACCES)
			_, err := unix.Open(f, unix.O_WRONLY, 0)
			wantErrno(t, "group open for writing", err, unix.EACCES)
		})
		as(t, carol, func() {
			wantErrno(t, "other R_OK", unix.Access(f, unix.R_OK), unix.EACCES)
		})
		wantErrno(t, "root X_OK of a file no one may execute", unix.Access(f, unix.X_OK), unix.EACCES)
		sub := filepath.Join(d, "private")
		setup(t, sub, true, 1000, 1000, 0o700)
		setup(t, filepath.Join(sub, "x"), false, 1000, 1000, 0o644)
		as(t, carol, func() {
			var st unix.Stat_t
			wantErrno(t, "lookup in a directory without x", unix.Lstat(filepath.Join(sub, "x"), &st), unix.EACCES)
			wantErrno(t, "create in a directory without w", touch(filepath.Join(d, "private", "y"), 0o644), unix.EACCES)
		})
	}},
	{"sticky", func(t *testing.T, d string) {
		s := filepath.Join(d, "tmp")
		setup(t, s, true, 0, 0, 0o1777)
		a, b := filepath.Join(s, "a"), filepath.Join(s, "b")
		as(t, alice, func() { wantErrno(t, "alice creates", touch(a, 0o666), 0) })
		as(t, bob, func() {
			wantErrno(t, "bob creates", touch(b, 0o666), 0)
			wantErrno(t, "bob unlinks alice's", unix.Unlink(a), unix.EPERM)
			wantErrno(t, "bob renames alice's", unix.Rename(a, filepath.Join(s, "c")), unix.EPERM)
			wantErrno(t, "bob renames over alice's", unix.Rename(b, a), unix.EPERM)
			wantErrno(t, "bob unlinks his own", unix.Unlink(b), 0)
		})
		if err := unix.Lchown(s, 3000, 3000); err != nil {
			t.Fatal(err)
		}
		as(t, carol, func() { wantErrno(t, "the directory's owner unlinks alice's", unix.Unlink(a), 0) })
	}},
	{"setgid-dir", func(t *testing.T, d string) {
		g := filepath.Join(d, "shared")
		setup(t, g, true, 1000, 1000, 0o2777)
		as(t, bob, func() {
			wantErrno(t, "mkdir", unix.Mkdir(filepath.Join(g, "sub"), 0o755), 0)
			wantErrno(t, "create", touch(filepath.Join(g, "f"), 0o644), 0)
		})
		wantMode(t, filepath.Join(g, "sub"), 0o2755, 1000) // the group and the setgid bit
		wantMode(t, filepath.Join(g, "f"), 0o644, 1000)    // the group only
		as(t, carol, func() {
			// Not in the group the file gets: no setgid bit for her.
			wantErrno(t, "create setgid", touch(filepath.Join(g, "g"), 0o2755), 0)
			wantErrno(t, "mkdir", unix.Mkdir(filepath.Join(g, "sub2"), 0o700), 0)
		})
		wantMode(t, filepath.Join(g, "g"), 0o755, 1000)
		wantMode(t, filepath.Join(g, "sub2"), 0o2700, 1000)
	}},
	{"chmod", func(t *testing.T, d string) {
		f := filepath.Join(d, "f")
		setup(t, f, false, 1000, 5000, 0o644)
		as(t, bob, func() { wantErrno(t, "chmod by another", unix.Chmod(f, 0o600), unix.EPERM) })
		wantMode(t, f, 0o644, -1)
		as(t, alice, func() { wantErrno(t, "chmod g+s outside the group", unix.Chmod(f, 0o2755), 0) })
		wantMode(t, f, 0o755, -1) // the setgid bit is dropped
		as(t, owner5, func() { wantErrno(t, "chmod g+s inside the group", unix.Chmod(f, 0o2755), 0) })
		wantMode(t, f, 0o2755, -1)
		wantErrno(t, "chmod by root", unix.Chmod(f, 0o4711), 0)
		wantMode(t, f, 0o4711, -1)
	}},
	{"chown", func(t *testing.T, d string) {
		f := filepath.Join(d, "f")
		setup(t, f, false, 1000, 1000, 0o644)
		as(t, owner5, func() {
			wantErrno(t, "give the file away", unix.Lchown(f, 2000, -1), unix.EPERM)
			wantErrno(t, "chgrp to a group of one's own", unix.Lchown(f, -1, 5000), 0)
			wantErrno(t, "chgrp to another group", unix.Lchown(f, -1, 6000), unix.EPERM)
			wantErrno(t, "chown to oneself", unix.Lchown(f, 1000, -1), 0)
		})
		as(t, bob, func() { wantErrno(t, "chgrp by another", unix.Lchown(f, -1, 1000), unix.EPERM) })
		wantMode(t, f, 0o644, 5000)
		// chown clears setuid, and setgid with group execute, even by root.
		if err := unix.Chmod(f, 0o6755); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "chown by root", unix.Lchown(f, 1001, -1), 0)
		wantMode(t, f, 0o755, -1)
		if err := unix.Chmod(f, 0o2745); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "chown by root", unix.Lchown(f, 1000, -1), 0)
		wantMode(t, f, 0o2745, -1) // setgid without group execute stays
		if err := unix.Chmod(f, 0o6755); err != nil {
			t.Fatal(err)
		}
		as(t, owner5, func() { wantErrno(t, "chgrp by the owner", unix.Lchown(f, -1, 1000), 0) })
		wantMode(t, f, 0o755, 1000)
		// Directories keep theirs.
		sub := filepath.Join(d, "sub")
		setup(t, sub, true, 0, 0, 0o2755)
		wantErrno(t, "chown of a directory", unix.Lchown(sub, 1000, 1000), 0)
		wantMode(t, sub, 0o2755, 1000)
	}},
	{"write-clears-setid", func(t *testing.T, d string) {
		f := filepath.Join(d, "f")
		setup(t, f, false, 1000, 1000, 0o6777)
		write := func() error {
			fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.Write(fd, []byte("x"))
			return err
		}
		wantErrno(t, "write by root", write(), 0)
		wantMode(t, f, 0o6777, -1) // root keeps them (CAP_FSETID)
		as(t, bob, func() { wantErrno(t, "write by another", write(), 0) })
		wantMode(t, f, 0o777, -1)
		if err := unix.Chmod(f, 0o6777); err != nil {
			t.Fatal(err)
		}
		as(t, alice, func() { wantErrno(t, "truncate by the owner", unix.Truncate(f, 0), 0) })
		wantMode(t, f, 0o777, -1)
	}},
	{"ctime", func(t *testing.T, d string) {
		f := filepath.Join(d, "f")
		setup(t, f, false, 1000, 1000, 0o644)
		last := lstat(t, f).Ctim
		step := func(what string, err error, p string) {
			t.Helper()
			wantErrno(t, what, err, 0)
			now := lstat(t, p).Ctim
			if now.Nano() <= last.Nano() {
				t.Errorf("%s did not move the ctime: %d, was %d", what, now.Nano(), last.Nano())
			}
			last = now
			time.Sleep(20 * time.Millisecond) // past the clock's granularity
		}
		time.Sleep(20 * time.Millisecond)
		step("chown", unix.Lchown(f, 1001, 1001), f)
		step("chmod", unix.Chmod(f, 0o600), f)
		step("link", unix.Link(f, filepath.Join(d, "f2")), f)
		step("rename", unix.Rename(f, filepath.Join(d, "f3")), filepath.Join(d, "f3"))
		step("unlink of another name", unix.Unlink(filepath.Join(d, "f2")), filepath.Join(d, "f3"))
		step("truncate", unix.Truncate(filepath.Join(d, "f3"), 5), filepath.Join(d, "f3"))
	}},
}

// TestPermissions checks each rule of permRules on a local directory
// (which holds the expectations to account) and on a mount, as callers
// other than root: the kernel checks modes (default_permissions), and the
// mount keeps what the checks need (owners, modes, setgid inheritance, the
// setuid and setgid bits it is told to clear, ctime).
func TestPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (switches users) and /dev/fuse")
	}
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, mnt := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	local := t.TempDir()
	for _, dir := range []string{filepath.Dir(mnt), filepath.Dir(local), local} {
		// Test directories are private to root: let the others through.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, target := range []struct{ name, dir string }{{"local", local}, {"mount", mnt}} {
		for _, r := range permRules {
			t.Run(target.name+"/"+r.name, func(t *testing.T) {
				d := filepath.Join(target.dir, r.name)
				setup(t, d, true, 0, 0, 0o777)
				r.run(t, d)
			})
		}
	}
	// What the mount showed is what it commits: owners, modes and ctimes.
	shown := map[string]unix.Stat_t{}
	err := filepath.WalkDir(mnt, func(p string, _ os.DirEntry, err error) error {
		if err == nil && p != mnt {
			rel, _ := filepath.Rel(mnt, p)
			shown[rel] = lstat(t, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, m)
	sn, err := st.Snapshot(bg, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range shown {
		got, err := sn.Stat(bg, p)
		if err != nil {
			t.Errorf("store: %s: %v", p, err)
			continue
		}
		if fsstore.UnixMode(got.Mode) != want.Mode || got.UID != want.Uid || got.GID != want.Gid {
			t.Errorf("store: %s: mode %o owner %d:%d, the mount showed %o %d:%d", p, fsstore.UnixMode(got.Mode), got.UID, got.GID, want.Mode, want.Uid, want.Gid)
		}
		if got.Ctime.UnixNano() != want.Ctim.Nano() {
			t.Errorf("store: %s: ctime %v, the mount showed %v", p, got.Ctime, time.Unix(want.Ctim.Unix()))
		}
	}
}

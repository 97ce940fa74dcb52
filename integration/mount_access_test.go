package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"computerd/client"
	"computerd/computerd/api"
	daemoncmd "computerd/computerd/command"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// startRoots starts a daemon whose mount roots are roots, with a
// workspace w of alice's and alice's token given the mount scope.
func startRoots(t *testing.T, roots ...string) *env {
	t.Helper()
	needExec(t)
	e := startWith(t, daemon.Config{MountRoots: roots})
	e.token = e.newToken("alice", fsstore.ScopeMount)
	e.ok("ws", "create", "w")
	e.write("w", "a.txt", "one\n")
	return e
}

// mountInfoLine is the last line of /proc/self/mountinfo whose mount
// point is dir, split into fields (nil: none).
func mountInfoLine(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var last []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			last = f
		}
	}
	return last
}

// refused mounts w at dir as token, expects 403 forbidden with a message
// holding want, and checks that nothing was made: no mount at dir, no
// record of it, no mount listed, and no directory where there was none.
func (e *env) refused(token, dir, want string) {
	e.t.Helper()
	_, existed := os.Lstat(dir)
	cl := client.New(e.d.URL(), token)
	_, err := cl.Mount(context.Background(), "w", dir)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeForbidden || we.Status != http.StatusForbidden {
		e.t.Fatalf("mount at %s: %v, want 403 forbidden", dir, err)
	}
	if !strings.Contains(err.Error(), want) {
		e.t.Fatalf("mount at %s: %q, want it to say %q", dir, err, want)
	}
	e.nothingAt(dir, existed == nil)
}

// nothingAt checks that no mount is at dir, recorded or listed, and that
// dir exists only if it did before.
func (e *env) nothingAt(dir string, existed bool) {
	e.t.Helper()
	if f := mountInfoLine(e.t, filepath.Clean(dir)); f != nil && strings.HasPrefix(f[len(f)-3], "fuse") {
		e.t.Fatalf("a mount at %s: %v", dir, f)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "run", "mounts.json")); err == nil && strings.Contains(string(b), filepath.Clean(dir)) {
		e.t.Fatalf("the mount record names %s: %s", dir, b)
	}
	if list, err := client.New(e.d.URL(), e.token).Mounts(context.Background()); err != nil || len(list) != 0 {
		e.t.Fatalf("mounts: %v, %v; want none", list, err)
	}
	if _, err := os.Lstat(dir); (err == nil) != existed {
		e.t.Fatalf("%s exists: %v, before: %v", dir, err == nil, existed)
	}
}

// Outside the roots (and with no roots at all) a mount is refused with
// 403, by agentctl too, which then leaves no directory behind.
func TestMountOutsideRootsRefused(t *testing.T) {
	root := t.TempDir()
	e := startRoots(t, root)
	outside := t.TempDir()
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	for _, dir := range []string{
		outside,
		filepath.Join(outside, "missing"),
		root, // the root itself: mounts go beneath it
		root + "/sub/../../" + filepath.Base(outside), // leaves the root by name
		"/usr/local/sbin",
	} {
		e.refused(e.token, dir, "not beneath a mount root")
	}
	deep := filepath.Join(outside, "new", "deeper")
	e.failsAs(e.token, "w", "not beneath a mount root", nil, "mount", "w", deep)
	e.nothingAt(filepath.Join(outside, "new"), false)

	off := startRoots(t)
	off.refused(off.token, filepath.Join(t.TempDir()), "host mounts are off")
}

// System directories and directories on computerd's PATH are refused even
// beneath a root, by name and, through a bind mount, by identity.
func TestMountSystemAndPathDirsRefused(t *testing.T) {
	extra := t.TempDir()
	bin := filepath.Join(extra, "bin")
	for _, d := range []string{bin, filepath.Join(extra, "opt"), filepath.Join(extra, "alias"), filepath.Join(extra, "etc")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// bin is on the PATH; extra/opt holds a PATH entry that does not exist yet.
	t.Setenv("PATH", os.Getenv("PATH")+":"+bin+":"+filepath.Join(extra, "opt", "tools", "bin"))
	e := startRoots(t, "/usr/local", extra)
	for _, tc := range []struct{ dir, want string }{
		{"/usr/local/sbin", "a system directory"},
		{"/usr/local/bin", "a system directory"},
		{"/usr/local/share/computerd-test", "a system directory"},
		{bin, "on computerd's PATH"},
		{filepath.Join(extra, "opt"), "on computerd's PATH"},
	} {
		e.refused(e.token, tc.dir, tc.want)
	}
	for _, b := range []struct{ from, to, want string }{
		{bin, filepath.Join(extra, "alias"), "is " + bin},
		{"/etc", filepath.Join(extra, "etc"), "is /etc"},
	} {
		if err := unix.Mount(b.from, b.to, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(b.to, unix.MNT_DETACH) })
		e.refused(e.token, b.to, b.want)
	}
}

// No component beneath the root may be a symlink: one that points out of
// the root is refused, and so is one that stays inside it.
func TestMountSymlinkInRootRefused(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	e := startRoots(t, root)
	os.Mkdir(filepath.Join(outside, "sub"), 0o755)
	os.Mkdir(filepath.Join(root, "real"), 0o755)
	for name, target := range map[string]string{"out": outside, "sbin": "/usr/local/sbin", "up": "..", "in": "real"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"out", "out/sub", "sbin", "up", "in"} {
		e.refused(e.token, filepath.Join(root, dir), "a symlink on the way")
	}
	for _, dir := range []string{outside, filepath.Join(outside, "sub"), "/usr/local/sbin"} {
		e.nothingAt(dir, true)
	}
	// The real directory itself is fine.
	real := filepath.Join(root, "real")
	e.ok("mount", "w", real)
	if got := sh(t, "cat "+real+"/a.txt"); got != "one\n" {
		t.Fatalf("read through the mount: %q", got)
	}
	e.ok("umount", real)
}

// Only a token with the mount scope may mount or unmount.
func TestMountNeedsScope(t *testing.T) {
	root := t.TempDir()
	e := startRoots(t, root)
	plain := e.newToken("alice")
	dir := filepath.Join(root, "m")
	os.Mkdir(dir, 0o755)
	e.refused(plain, dir, "needs a token with the mount scope")
	e.ok("mount", "w", dir)
	e.failsAs(plain, "w", "needs a token with the mount scope", nil, "umount", dir)
	if mountInfoLine(t, dir) == nil {
		t.Fatal("a refused unmount unmounted")
	}
	e.ok("umount", dir)
}

// computerd runs the computerd command line and returns its stdout.
func computerd(t *testing.T, args ...string) string {
	t.Helper()
	var out, errs strings.Builder
	if err := daemoncmd.Run(context.Background(), append([]string{"computerd"}, args...), &out, &errs); err != nil {
		t.Fatalf("computerd %s: %v\n%s", strings.Join(args, " "), err, errs.String())
	}
	return out.String()
}

// An allowed mount works and is nosuid and nodev.
func TestMountNosuidNodev(t *testing.T) {
	root := t.TempDir()
	e := startRoots(t, root)
	dir := filepath.Join(root, "m")
	out := e.ok("mount", "w", dir)
	defer e.run(nil, "umount", dir)
	if !strings.Contains(out, "mounted w at "+dir) {
		t.Fatalf("mount: %q", out)
	}
	f := mountInfoLine(t, dir)
	if f == nil {
		t.Fatalf("no mount at %s in /proc/self/mountinfo", dir)
	}
	opts := strings.Split(f[5], ",")
	if !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") || !slices.Contains(opts, "rw") {
		t.Fatalf("mount options %v, want rw, nosuid and nodev", opts)
	}
	if i := slices.Index(f, "-"); i < 0 || f[i+1] != "fuse.computerd" {
		t.Fatalf("mountinfo line %v: want a fuse.computerd mount", f)
	}
	sh(t, "echo two > "+dir+"/b.txt && sync "+dir+"/b.txt")
	if got := e.tree("w")["b.txt"]; got != "two\n" {
		t.Fatalf("write through the mount: %q", got)
	}
}

// A token's id is random, not the start of its secret; ls shows it with
// the token's scopes, and revoke takes it.
func TestTokenIDIndependentOfSecret(t *testing.T) {
	e := start(t, api.Limits{})
	var made struct {
		Token, ID string
		Scopes    []string
	}
	if err := json.Unmarshal([]byte(computerd(t, "token", "create", "--json", "--data", e.dir, "--scope", "mount", "bob")), &made); err != nil {
		t.Fatal(err)
	}
	raw := strings.TrimPrefix(made.Token, fsstore.TokenPrefix)
	if len(made.ID) != 16 || strings.HasPrefix(raw, made.ID[:8]) || strings.Contains(made.Token, made.ID) {
		t.Fatalf("token id %q is part of its secret %q", made.ID, made.Token)
	}
	if !slices.Equal(made.Scopes, []string{"mount"}) {
		t.Fatalf("scopes %v, want [mount]", made.Scopes)
	}
	if ls := computerd(t, "token", "ls", "--data", e.dir); !strings.Contains(ls, made.ID+"\tbob\tmount\t") || strings.Contains(ls, raw[:8]) {
		t.Fatalf("token ls:\n%s", ls)
	}
	if _, err := client.New(e.d.URL(), made.Token).Workspaces(context.Background()); err != nil {
		t.Fatal(err)
	}
	computerd(t, "token", "revoke", "--data", e.dir, made.ID)
	if _, err := client.New(e.d.URL(), made.Token).Workspaces(context.Background()); !errors.Is(err, core.ErrBadToken) {
		t.Fatalf("revoked token: %v, want unauthorized", err)
	}
}

// mountForTest mounts source at target (a test's own directory) and
// unmounts it when the test ends.
func mountForTest(t *testing.T, source, target, fstype string, flags uintptr) {
	t.Helper()
	if err := unix.Mount(source, target, fstype, flags, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
}

// A directory that another file system is mounted on is refused (403)
// and left as it was, be it an empty tmpfs or a bind mount of an empty
// directory of the same file system (whose device number is its
// parent's). A directory inside such a mount is no mount point.
func TestMountOnAMountPointRefused(t *testing.T) {
	root := t.TempDir()
	e := startRoots(t, root)
	tmp, bind, src := filepath.Join(root, "tmp"), filepath.Join(root, "bind"), filepath.Join(root, "src")
	for _, d := range []string{tmp, bind, src} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mountForTest(t, "tmpfs", tmp, "tmpfs", 0)
	mountForTest(t, src, bind, "", unix.MS_BIND)
	for _, dir := range []string{tmp, bind} {
		before := mountInfoLine(t, dir)
		e.refused(e.token, dir, "a mount point")
		if after := mountInfoLine(t, dir); !slices.Equal(after, before) {
			t.Fatalf("the mount at %s was %v, is %v", dir, before, after)
		}
	}
	inner := filepath.Join(tmp, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	e.ok("mount", "w", inner)
	e.ok("umount", inner)
}

// computerd unmounts only the mount it made. When root has unmounted it
// and mounted a tmpfs in its place, or mounted a tmpfs over it, the
// tenant's unmount leaves the tmpfs alone, answers 404 not_found saying
// so, commits what the mount held, and forgets the mount.
func TestUnmountLeavesAnotherMount(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace bool // unmount computerd's mount before mounting the tmpfs
	}{
		{"replaced", true},
		{"covered", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			e := startRoots(t, root)
			dir := filepath.Join(root, "m")
			e.ok("mount", "w", dir)
			// Runs after the tmpfs's cleanup: a covered mount is left
			// beneath it (its connection aborted).
			t.Cleanup(func() {
				if f := mountInfoLine(t, dir); f != nil && strings.HasPrefix(f[len(f)-3], "fuse") {
					unix.Unmount(dir, unix.MNT_DETACH)
				}
			})
			sh(t, "echo two > "+dir+"/b.txt")
			if tc.replace {
				if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
					t.Fatal(err)
				}
			}
			mountForTest(t, "tmpfs", dir, "tmpfs", 0)
			tmpfs := mountInfoLine(t, dir)

			err := client.New(e.d.URL(), e.token).Unmount(context.Background(), dir)
			if got := mountInfoLine(t, dir); !slices.Equal(got, tmpfs) {
				t.Fatalf("the tmpfs at %s was %v, is %v", dir, tmpfs, got)
			}
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeNotFound || we.Status != http.StatusNotFound ||
				!strings.Contains(err.Error(), "nothing was unmounted") {
				t.Fatalf("unmount: %v, want 404 not_found saying nothing was unmounted", err)
			}
			e.nothingAt(dir, true)
			if got := e.tree("w")["b.txt"]; got != "two\n" {
				t.Fatalf("what the mount held: b.txt %q, want it committed", got)
			}
			e.failsAs(e.token, "w", "not a mount of yours", nil, "umount", dir)
		})
	}
}

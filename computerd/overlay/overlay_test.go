package overlay_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/computerd/fusefs/treetest"
	"computerd/computerd/idmap"
	"computerd/computerd/loopfs"
	"computerd/computerd/overlay"
	"computerd/core"
	"computerd/fsstore"
)

var bg = context.Background()

// fixture is a store with a workspace, a revision view and a way to open layers.
type fixture struct {
	st   *fsstore.Store
	view *fusefs.View
	ws   core.Workspace
	dir  string
}

func newFixture(t *testing.T) *fixture { return newFixtureNamed(t, "w") }

func newFixtureNamed(t *testing.T, name string) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE and overlayfs)")
	}
	dir := t.TempDir()
	st := fsstore.New(filepath.Join(dir, "data"))
	if err := st.Open(bg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	vdir := filepath.Join(dir, "view")
	os.Mkdir(vdir, 0o700)
	view, err := fusefs.OpenView(vdir, fusefs.ViewOptions{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		view.Close(ctx)
		fusefs.CleanupStale(vdir)
	})
	ws, err := st.CreateWorkspace(bg, "t", name)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{st: st, view: view, ws: ws, dir: dir}
}

func (f *fixture) commit(t *testing.T, b *core.Batch) core.Revision {
	t.Helper()
	rev, err := f.st.Commit(bg, f.ws.ID, b, fsstore.CommitInfo{Source: core.SourceAPI, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func (f *fixture) open(t *testing.T, id string, base int64) *overlay.Layer {
	t.Helper()
	l, err := overlay.Open(bg, overlay.Options{Store: f.st, View: f.view, Workspace: f.ws.ID, BaseRev: base,
		Dir: filepath.Join(f.dir, "layer-"+id), Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: id}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unmount(bg) })
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestChanges makes every kind of change through an overlay and checks
// that the committed revision is the merged tree the command saw, and
// that copies-up that changed nothing make no change.
func TestChanges(t *testing.T) {
	f := newFixture(t)
	b := &core.Batch{}
	b.Mkdir("d", 0o755).Mkdir("d/e", 0o755).Mkdir("gone", 0o755).Mkdir("gone/sub", 0o700).Mkdir("todir", 0o755).Mkdir("tofile", 0o755)
	b.WriteFile("a.txt", []byte("a"), 0o644).WriteFile("d/b.txt", []byte("b"), 0o644).WriteFile("d/e/c.txt", []byte("c"), 0o600)
	b.WriteFile("gone/sub/x", []byte("x"), 0o644).WriteFile("same.txt", []byte("same"), 0o644).WriteFile("mode.txt", []byte("m"), 0o644)
	b.WriteFile("tofile/inner", []byte("i"), 0o644).WriteFile("todir/f", []byte("f"), 0o644).WriteFile("touch.txt", []byte("t"), 0o644)
	b.Add(core.Op{Kind: core.OpSymlink, Path: "ln", Target: "a.txt"})
	base := f.commit(t, b)
	l := f.open(t, "x1", base.Rev)
	m := l.Mountpoint()
	p := func(rel string) string { return filepath.Join(m, rel) }
	must(t, os.WriteFile(p("a.txt"), []byte("changed"), 0o644))
	must(t, os.Remove(p("d/b.txt")))
	must(t, os.RemoveAll(p("gone")))
	must(t, os.RemoveAll(p("d/e")))
	must(t, os.Mkdir(p("d/e"), 0o750)) // opaque: c.txt must not come back
	must(t, os.WriteFile(p("d/e/new.txt"), []byte("new"), 0o640))
	must(t, os.WriteFile(p("same.txt"), []byte("same"), 0o644)) // copied up, same bytes
	must(t, os.Chmod(p("mode.txt"), 0o600))
	must(t, os.Chtimes(p("touch.txt"), time.Unix(1e9, 0), time.Unix(1e9, 0)))
	must(t, os.RemoveAll(p("tofile")))
	must(t, os.WriteFile(p("tofile"), []byte("now a file"), 0o644))
	must(t, os.RemoveAll(p("todir")))
	must(t, os.MkdirAll(p("todir/x/y"), 0o755))
	must(t, os.Remove(p("ln")))
	must(t, os.Symlink("d/e/new.txt", p("ln")))
	must(t, os.MkdirAll(p("n1/n2"), 0o700))
	must(t, os.WriteFile(p("n1/n2/h"), []byte("hard"), 0o644))
	must(t, os.Link(p("n1/n2/h"), p("n1/h2")))
	must(t, os.WriteFile(p("zero"), nil, 0))
	must(t, os.WriteFile(p("owned"), []byte("o"), 0o644))
	must(t, os.Lchown(p("owned"), 1234, 5678))
	want := treetest.Dir(t, m)

	rev, changed, err := l.Commit(bg)
	if err != nil || !changed {
		t.Fatalf("commit: %v %v", changed, err)
	}
	if rev.Rev != base.Rev+1 || rev.Source != core.SourceExec || rev.ExecID != "x1" {
		t.Fatalf("revision: %+v", rev)
	}
	if got := treetest.Store(t, f.st, f.ws.ID); got != want {
		t.Fatalf("committed tree differs from what the command saw:\n%s", treetest.Diff(got, want))
	}
	sn, err := f.st.Snapshot(bg, f.ws.ID, 0)
	must(t, err)
	if st, err := sn.Stat(bg, "owned"); err != nil || st.UID != 1234 || st.GID != 5678 {
		t.Fatalf("owner: %+v %v", st, err)
	}
	cs, err := f.st.Diff(bg, f.ws.ID, base.Rev, rev.Rev)
	must(t, err)
	for _, op := range cs.Ops {
		if op.Path == "same.txt" && op.Kind != core.OpUtimes {
			t.Fatalf("a rewrite with the same bytes changed more than the time: %v", op)
		}
	}
	must(t, l.Unmount(bg))
	if _, err := os.Stat(filepath.Join(f.dir, "layer-x1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the layer's directory is still there: %v", err)
	}
}

// TestSpecialFileChanges: FIFOs, sockets and device nodes in the base
// revision show through the overlay as they are stored (devices never
// open: the overlay is nodev), and those an exec makes, changes or
// removes commit as such; a copy-up of one only changes its attributes.
func TestSpecialFileChanges(t *testing.T) {
	f := newFixture(t)
	b := (&core.Batch{}).Add(
		core.Op{Kind: core.OpMknod, Path: "fifo", Mode: fs.ModeNamedPipe | 0o644},
		core.Op{Kind: core.OpMknod, Path: "chmod-fifo", Mode: fs.ModeNamedPipe | 0o644},
		core.Op{Kind: core.OpMknod, Path: "sock", Mode: fs.ModeSocket | 0o755},
		core.Op{Kind: core.OpMknod, Path: "null", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666, Rdev: core.MakeDev(1, 3)},
		core.Op{Kind: core.OpMknod, Path: "loop", Mode: fs.ModeDevice | 0o660, Rdev: core.MakeDev(7, 0)},
		core.Op{Kind: core.OpMknod, Path: "to-file", Mode: fs.ModeNamedPipe | 0o600})
	base := f.commit(t, b)
	l := f.open(t, "x", base.Rev)
	m := l.Mountpoint()
	p := func(rel string) string { return filepath.Join(m, rel) }
	var st unix.Stat_t
	must(t, unix.Lstat(p("null"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) {
		t.Fatalf("null through the overlay: mode %o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	if _, err := os.Open(p("null")); !errors.Is(err, unix.EACCES) {
		t.Fatalf("open of a device node: %v, want EACCES (nodev)", err)
	}
	must(t, os.Chmod(p("chmod-fifo"), 0o600))
	must(t, os.Remove(p("sock")))
	must(t, os.Remove(p("to-file")))
	must(t, os.WriteFile(p("to-file"), []byte("a file now"), 0o644))
	must(t, unix.Mkfifo(p("new-fifo"), 0o640))
	must(t, os.Link(p("new-fifo"), p("new-fifo-2")))
	must(t, unix.Mknod(p("new-chr"), unix.S_IFCHR|0o600, int(unix.Mkdev(10, 200))))
	must(t, unix.Mknod(p("new-blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(259, 1<<19))))
	must(t, bindSocket(p("new-sock")))
	want := treetest.Dir(t, m)

	rev, changed, err := l.Commit(bg)
	if err != nil || !changed {
		t.Fatalf("commit: %v %v", changed, err)
	}
	if got := treetest.Store(t, f.st, f.ws.ID); got != want {
		t.Fatalf("committed tree differs from what the command saw:\n%s", treetest.Diff(got, want))
	}
	cs, err := f.st.Diff(bg, f.ws.ID, base.Rev, rev.Rev)
	must(t, err)
	for _, op := range cs.Ops {
		if op.Path == "chmod-fifo" && op.Kind != core.OpChmod && op.Kind != core.OpUtimes {
			t.Errorf("a chmod of a FIFO committed %v", op)
		}
	}
}

// bindSocket leaves a unix socket at p.
func bindSocket(p string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Bind(fd, &unix.SockaddrUnix{Name: p})
}

// TestNothingChanged: an exec that reads only makes no revision.
func TestNothingChanged(t *testing.T) {
	f := newFixture(t)
	base := f.commit(t, (&core.Batch{}).WriteFile("a", []byte("a"), 0o644))
	l := f.open(t, "x", base.Rev)
	if _, err := os.ReadFile(filepath.Join(l.Mountpoint(), "a")); err != nil {
		t.Fatal(err)
	}
	if _, changed, err := l.Commit(bg); err != nil || changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	w, _ := f.st.WorkspaceByID(bg, f.ws.ID)
	if w.Head != base.Rev {
		t.Fatalf("head %d, want %d", w.Head, base.Rev)
	}
}

// TestBaseNotHead: an exec sees its base revision, not what was committed
// after it, and its changes land on top of those when they do not touch
// the same paths.
func TestBaseNotHead(t *testing.T) {
	f := newFixture(t)
	base := f.commit(t, (&core.Batch{}).WriteFile("keep", []byte("k"), 0o644).WriteFile("edit", []byte("old"), 0o644))
	l := f.open(t, "x", base.Rev)
	later := f.commit(t, (&core.Batch{}).WriteFile("other", []byte("o"), 0o644))
	if _, err := os.Stat(filepath.Join(l.Mountpoint(), "other")); !os.IsNotExist(err) {
		t.Fatalf("the exec sees a file newer than its base: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(l.Mountpoint(), "edit"), []byte("new"), 0o644))
	rev, changed, err := l.Commit(bg)
	if err != nil || !changed || rev.Rev != later.Rev+1 {
		t.Fatalf("commit: %+v %v %v", rev, changed, err)
	}
	sn, _ := f.st.Snapshot(bg, f.ws.ID, 0)
	for p, want := range map[string]string{"keep": "k", "edit": "new", "other": "o"} {
		if b, err := sn.ReadFile(bg, p); err != nil || string(b) != want {
			t.Fatalf("%s: %q %v, want %q", p, b, err, want)
		}
	}
}

// TestConflict: a path the workspace changed after the exec's base is a
// conflict; the exec's version is kept in a copy, the workspace's stays;
// also for a workspace whose name is as long as names go.
func TestConflict(t *testing.T) {
	t.Run("short", func(t *testing.T) { testConflict(t, "w") })
	t.Run("long", func(t *testing.T) { testConflict(t, strings.Repeat("n", 128)) })
}

func testConflict(t *testing.T, name string) {
	f := newFixtureNamed(t, name)
	base := f.commit(t, (&core.Batch{}).WriteFile("f", []byte("base"), 0o644))
	l := f.open(t, "x", base.Rev)
	must(t, os.WriteFile(filepath.Join(l.Mountpoint(), "f"), []byte("exec"), 0o644))
	f.commit(t, (&core.Batch{}).WriteFile("f", []byte("api"), 0o644))
	_, _, err := l.Commit(bg)
	var ce *fusefs.ConflictError
	var sce *core.ConflictError
	if !errors.As(err, &ce) || !errors.As(err, &sce) || len(sce.Paths) != 1 || sce.Paths[0] != "f" {
		t.Fatalf("commit: %v", err)
	}
	copySn, err := f.st.Snapshot(bg, ce.ID, 0)
	must(t, err)
	if b, err := copySn.ReadFile(bg, "f"); err != nil || string(b) != "exec" {
		t.Fatalf("copy %s holds %q %v", ce.Name, b, err)
	}
	sn, _ := f.st.Snapshot(bg, f.ws.ID, 0)
	if b, err := sn.ReadFile(bg, "f"); err != nil || string(b) != "api" {
		t.Fatalf("workspace holds %q %v", b, err)
	}
}

// TestRecover: what a layer held when its process died reaches the
// exec's draft, and fusefs.Recover commits it as an interrupted revision.
// The upper layer in the layer's directory, or on a volume of its own
// (which Recover mounts again).
func TestRecover(t *testing.T) {
	for _, upper := range []int64{0, loopfs.SizeClass(4 << 20)} {
		t.Run(fmt.Sprint(upper), func(t *testing.T) { testRecover(t, upper) })
	}
}

func testRecover(t *testing.T, upper int64) {
	f := newFixture(t)
	base := f.commit(t, (&core.Batch{}).WriteFile("f", []byte("base"), 0o644))
	dir := filepath.Join(f.dir, "layers")
	os.Mkdir(dir, 0o700)
	l, err := overlay.Open(bg, overlay.Options{Store: f.st, View: f.view, Workspace: f.ws.ID, BaseRev: base.Rev,
		Dir: filepath.Join(dir, "x9"), Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: "x9"},
		UpperSize: upper, Volumes: &loopfs.Maker{Dir: filepath.Join(f.dir, "templates")}})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(l.Mountpoint(), "new"), []byte("kept"), 0o644))
	// The process dies here: no Commit, no Unmount; the overlay (and the
	// volume beneath it) stay mounted.
	must(t, overlay.Recover(bg, f.st, dir))
	if _, err := os.Stat(filepath.Join(dir, "x9")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("layer left after Recover: %v", err)
	}
	rec, err := overlay.RecoverDrafts(bg, f.st)
	if err != nil || len(rec) != 1 || rec[0].Revision.Source != core.SourceInterrupted || rec[0].Revision.ExecID != "x9" {
		t.Fatalf("recover: %+v %v", rec, err)
	}
	sn, _ := f.st.Snapshot(bg, f.ws.ID, 0)
	if b, err := sn.ReadFile(bg, "new"); err != nil || string(b) != "kept" {
		t.Fatalf("interrupted write: %q %v", b, err)
	}
}

// A layer whose removal a kill cut short (its record left, its upper
// layer gone) does not stop recovery: it was done with.
func TestRecoverCutRemoval(t *testing.T) {
	f := newFixture(t)
	base := f.commit(t, (&core.Batch{}).WriteFile("f", []byte("base"), 0o644))
	dir := filepath.Join(f.dir, "layers")
	os.Mkdir(dir, 0o700)
	l, err := overlay.Open(bg, overlay.Options{Store: f.st, View: f.view, Workspace: f.ws.ID, BaseRev: base.Rev,
		Dir: filepath.Join(dir, "x7"), Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: "x7"}})
	must(t, err)
	must(t, unix.Unmount(l.Mountpoint(), unix.MNT_DETACH))
	must(t, os.RemoveAll(filepath.Join(dir, "x7", "upper")))
	must(t, overlay.Recover(bg, f.st, dir))
	if _, err := os.Stat(filepath.Join(dir, "x7")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("layer left after Recover: %v", err)
	}
}

// A layer whose record a kill cut short (as a build that wrote it in
// place could leave) was never mounted: recovery removes it and goes on.
func TestRecoverPartialRecord(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(f.dir, "layers")
	for name, rec := range map[string]string{"empty": "", "cut": `{"workspace":1,"ba`} {
		must(t, os.MkdirAll(filepath.Join(dir, name, "upper"), 0o700))
		must(t, os.WriteFile(filepath.Join(dir, name, "layer.json"), []byte(rec), 0o600))
	}
	must(t, overlay.Recover(bg, f.st, dir))
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("layers left after Recover: %v", left)
	}
}

// TestRandomChanges applies random operations through an overlay and
// checks, for every seed, that the committed tree is what the command saw.
func TestRandomChanges(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f := newFixture(t)
			r := rand.New(rand.NewPCG(seed, seed))
			b := &core.Batch{}
			names := []string{"a", "b", "c"}
			for _, d := range names {
				b.Mkdir(d, 0o755)
				for _, e := range names {
					b.Mkdir(d+"/"+e, 0o755)
					b.WriteFile(d+"/"+e+"/f", []byte(d+e), 0o644)
				}
				b.WriteFile(d+"/g", []byte(d), 0o644)
			}
			base := f.commit(t, b)
			l := f.open(t, fmt.Sprint("r", seed), base.Rev)
			m := l.Mountpoint()
			pick := func() string {
				p := names[r.IntN(3)]
				for r.IntN(2) == 0 && len(p) < 12 {
					p += "/" + []string{"a", "b", "c", "f", "g"}[r.IntN(5)]
				}
				return filepath.Join(m, p)
			}
			for range 40 {
				p := pick()
				switch r.IntN(9) {
				case 0:
					os.RemoveAll(p)
				case 1:
					os.MkdirAll(p, 0o755)
				case 2:
					os.WriteFile(p, []byte(fmt.Sprint(r.Int())), 0o644)
				case 3:
					os.Chmod(p, os.FileMode(0o600+r.IntN(0o100)))
				case 4:
					os.Symlink("target", p)
				case 5:
					os.Link(pick(), p)
				case 6:
					os.Rename(pick(), p) // directories: EXDEV, as in Docker
				case 7:
					if fh, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0); err == nil {
						fh.WriteString("more")
						fh.Close()
					}
				case 8:
					// A socket or a device: no FIFOs, which an open (of a
					// path through one, too) would wait on for a writer.
					if r.IntN(2) == 0 {
						bindSocket(p)
					} else {
						unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, uint32(r.IntN(9)))))
					}
				}
			}
			want := treetest.Dir(t, m)
			if _, _, err := l.Commit(bg); err != nil {
				t.Fatal(err)
			}
			if got := treetest.Store(t, f.st, f.ws.ID); got != want {
				t.Fatalf("seed %d: committed tree differs from what the command saw:\n%s", seed, treetest.Diff(got, want))
			}
		})
	}
}

// asContainerRoot runs script in sh as root of a user namespace that maps
// ids, with the capabilities a sandbox's root has over files, in dir
// (passed as a descriptor: the container's root may not search the
// directories above it). It returns the output.
func asContainerRoot(t *testing.T, ids idmap.Range, dir, script string) string {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(ids.Base), Size: int(ids.Size)}}
	cmd := exec.Command("/bin/sh", "-c", "cd /proc/self/fd/3 && "+script)
	cmd.ExtraFiles = []*os.File{d}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m,
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
		AmbientCaps: []uintptr{unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// TestIDMappedLayers opens a layer with IDs, as an exec's is, and writes
// through it as a container's root: the overlay shows the store's ids as
// the container's, what root makes is stored as owned by 0, a chown to
// 1000 is stored as 1000, root may write a file root owns (a copy-up), an
// id beyond the range shows as nobody; and the mount table names no
// directory of the host. The upper layer in the layers directory, or on
// a volume of its own (a mount the Mounts' copy of the layers directory
// does not show).
func TestIDMappedLayers(t *testing.T) {
	for _, upper := range []int64{0, loopfs.SizeClass(4 << 20)} {
		t.Run(fmt.Sprint(upper), func(t *testing.T) { testIDMappedLayers(t, upper) })
	}
}

func testIDMappedLayers(t *testing.T, upper int64) {
	f := newFixture(t)
	ids := idmap.Default
	b := &core.Batch{}
	b.WriteFile("root.txt", []byte("r\n"), 0o644).WriteFile("ro.txt", []byte("ro\n"), 0o444)
	b.WriteFile("user.txt", []byte("u\n"), 0o600).WriteFile("far.txt", []byte("f\n"), 0o644)
	b.Add(core.Op{Kind: core.OpChown, Path: "user.txt", UID: 1000, GID: 1000}, core.Op{Kind: core.OpChown, Path: "far.txt", UID: 70000, GID: 70000})
	base := f.commit(t, b)
	layers := filepath.Join(f.dir, "layers")
	must(t, os.Mkdir(layers, 0o700))
	ms, err := overlay.OpenMounts(f.view.Dir(), layers, ids)
	must(t, err)
	l, err := overlay.Open(bg, overlay.Options{Store: f.st, View: f.view, Workspace: f.ws.ID, BaseRev: base.Rev, Mounts: ms,
		Dir: filepath.Join(layers, "ids"), Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: "ids"},
		UpperSize: upper, Volumes: &loopfs.Maker{Dir: filepath.Join(f.dir, "templates")}})
	must(t, err)
	t.Cleanup(func() { l.Unmount(bg) })
	ms.Close() // the layer keeps what it uses

	got := asContainerRoot(t, ids, l.Mountpoint(), `stat -c '%n %u:%g' root.txt user.txt far.txt
echo more >> root.txt && echo more >> ro.txt && echo more >> user.txt
echo new > new.txt && mkdir newdir && echo g > given.txt && chown 1000:1000 given.txt newdir`)
	if want := "root.txt 0:0\nuser.txt 1000:1000\nfar.txt 65534:65534\n"; got != want {
		t.Errorf("the container sees %q, want %q", got, want)
	}
	mi, err := os.ReadFile("/proc/thread-self/mountinfo")
	must(t, err)
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, l.Mountpoint()) && strings.Contains(line[strings.Index(line, " - "):], f.dir) {
			t.Errorf("the overlay's options name a host directory: %s", line)
		}
	}

	rev, changed, err := l.Commit(bg)
	if err != nil || !changed {
		t.Fatalf("commit: %v %v", changed, err)
	}
	sn, err := f.st.Snapshot(bg, f.ws.ID, rev.Rev)
	must(t, err)
	for p, want := range map[string]string{"root.txt": "0:0 r\nmore\n", "ro.txt": "0:0 ro\nmore\n", "user.txt": "1000:1000 u\nmore\n",
		"new.txt": "0:0 new\n", "given.txt": "1000:1000 g\n", "newdir": "1000:1000 ", "far.txt": "70000:70000 f\n"} {
		st, err := sn.Stat(bg, p)
		must(t, err)
		var data []byte
		if !st.Mode.IsDir() {
			data, err = sn.ReadFile(bg, p)
			must(t, err)
		}
		if got := fmt.Sprintf("%d:%d %s", st.UID, st.GID, data); got != want {
			t.Errorf("%s in the store: %q, want %q", p, got, want)
		}
	}
}

// An Open that fails once its draft exists (here: its volume cannot be
// made) removes the draft and what it made, and returns the error.
func TestOpenFailureCleansUp(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(f.dir, "layers")
	os.Mkdir(dir, 0o700)
	notADir := filepath.Join(f.dir, "file")
	must(t, os.WriteFile(notADir, nil, 0o600))
	_, err := overlay.Open(bg, overlay.Options{Store: f.st, View: f.view, Workspace: f.ws.ID,
		Dir: filepath.Join(dir, "x1"), Info: fsstore.CommitInfo{Source: core.SourceExec, Tenant: "t", ExecID: "x1"},
		UpperSize: loopfs.MinSize, Volumes: &loopfs.Maker{Dir: filepath.Join(notADir, "templates")}})
	if err == nil {
		t.Fatal("Open with volumes that cannot be made: no error")
	}
	if drafts, err := f.st.Drafts(bg); err != nil || len(drafts) != 0 {
		t.Fatalf("drafts after a failed Open: %v %v", drafts, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("layer directory after a failed Open: %v", err)
	}
}

// MountPlain puts an overlay over a plain directory, as Open puts one over
// a revision: a container's root sees the lower files as its own, and what
// it writes lands in the upper layer, never in the lower directory.
func TestMountPlain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (overlayfs, idmapped mounts)")
	}
	dir := t.TempDir()
	lower, layers := filepath.Join(dir, "lower"), filepath.Join(dir, "layers")
	must(t, os.MkdirAll(filepath.Join(lower, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(lower, "sub", "a.txt"), []byte("a\n"), 0o644))
	must(t, os.Mkdir(layers, 0o700))
	ids := idmap.Default // the copies show on-disk id i as the container's i
	ms, err := overlay.OpenMounts(dir, layers, ids)
	must(t, err)
	defer ms.Close()
	layer := filepath.Join(layers, "run")
	must(t, overlay.MountPlain(lower, layer, ms))
	mnt := filepath.Join(layer, "mnt")
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := overlay.MountPlain(lower, layer, ms); err == nil {
		t.Error("a second MountPlain into the same directory succeeded")
	}

	got := asContainerRoot(t, ids, mnt, `cat sub/a.txt && stat -c '%u:%g' sub/a.txt && echo b >> sub/a.txt && echo new > new.txt`)
	if want := "a\n0:0\n"; got != want {
		t.Errorf("the container sees %q, want %q", got, want)
	}
	if data, err := os.ReadFile(filepath.Join(lower, "sub", "a.txt")); err != nil || string(data) != "a\n" {
		t.Errorf("the lower file is %q (%v), want it untouched", data, err)
	}
	if _, err := os.Stat(filepath.Join(lower, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("new.txt reached the lower directory: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(layer, "upper", "sub", "a.txt")); err != nil || string(data) != "a\nb\n" {
		t.Errorf("the upper layer holds %q (%v), want the written file", data, err)
	}
}

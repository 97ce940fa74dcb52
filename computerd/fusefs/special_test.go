package fusefs_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/computerd/fusefs/treetest"
)

// TestSpecialFiles makes FIFOs, sockets and device nodes on a mount,
// uses them (a FIFO passes bytes, a socket takes connections, a device
// never opens: the mount is nodev), commits them, and finds them again on
// a fresh mount and in the revision view.
func TestSpecialFiles(t *testing.T) {
	st, w, m, dir := mount(t)
	p := func(rel string) string { return filepath.Join(dir, rel) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(p("d"), 0o755))
	must(unix.Mkfifo(p("d/fifo"), 0o640))
	must(unix.Mknod(p("d/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mknod(p("d/disk"), unix.S_IFBLK|0o660, int(unix.Mkdev(259, 70000))))
	must(unix.Mknod(p("d/sock0"), unix.S_IFSOCK|0o755, 0))
	must(unix.Mkfifo(p("d/moved"), 0o600))
	must(os.Rename(p("d/moved"), p("moved")))
	must(os.Link(p("d/fifo"), p("fifo-link")))
	must(unix.Mkfifo(p("gone"), 0o600))
	must(os.Remove(p("gone")))
	must(unix.Chmod(p("d/null"), 0o600))
	must(os.Lchown(p("d/disk"), 7, 8))

	// A FIFO on the mount is a pipe.
	fd, err := unix.Open(p("d/fifo"), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(err)
	if _, err := unix.Write(fd, []byte("through")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil || string(buf[:n]) != "through" {
		t.Fatalf("read from the FIFO: %q %v", buf[:n], err)
	}
	// A socket bound on the mount takes connections through its path.
	l, err := net.Listen("unix", p("d/sock"))
	must(err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	c, err := net.Dial("unix", p("d/sock"))
	must(err)
	n, _ = c.Read(buf)
	c.Close()
	l.Close()
	if string(buf[:n]) != "hello" {
		t.Fatalf("read from the socket: %q", buf[:n])
	}
	// Devices are names with numbers: nodev.
	if _, err := os.Open(p("d/null")); !errors.Is(err, unix.EACCES) {
		t.Fatalf("open of a device node on the mount: %v, want EACCES", err)
	}
	if st := lstat(t, p("d/disk")); st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != unix.Mkdev(259, 70000) || st.Uid != 7 || st.Gid != 8 {
		t.Fatalf("d/disk: mode %o rdev %d:%d owner %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Uid, st.Gid)
	}

	want := treetest.Dir(t, dir)
	commit(t, m)
	if got := treetest.Store(t, st, w.ID); got != want {
		t.Fatalf("committed tree differs from the mount:\n%s", treetest.Diff(got, want))
	}
	_, again := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID})
	if got := treetest.Dir(t, again); got != want {
		t.Fatalf("a fresh mount differs:\n%s", treetest.Diff(got, want))
	}
	v := mustView(t, st)
	vdir, release, err := v.Acquire(bg, w.ID, 0)
	must(err)
	defer release()
	if got := treetest.Dir(t, vdir); got != want {
		t.Fatalf("the revision view differs:\n%s", treetest.Diff(got, want))
	}
	if _, err := os.Open(filepath.Join(vdir, "d/null")); !errors.Is(err, unix.EACCES) {
		t.Fatalf("open of a device node in the view: %v, want EACCES", err)
	}
}

package mountinfo

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:             "/a/b",
		`/a\040b`:          "/a b",
		`/x\011y\012z\134`: "/x\ty\nz\\",
		`/trailing\04`:     `/trailing\04`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadAndUnder(t *testing.T) {
	mounts, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Point == "/" && m.FSType != "" }) {
		t.Fatalf("no root mount in %v", mounts)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := filepath.Join(t.TempDir(), "with space")
	inner := filepath.Join(dir, "inner")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(inner, unix.MNT_DETACH)
	got, err := Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(inner, &st); err != nil {
		t.Fatal(err)
	}
	if mounts, _ = Read(); !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Point == inner && m.Dev == st.Dev }) {
		t.Fatalf("no mount at %s with device %d:%d in %v", inner, unix.Major(st.Dev), unix.Minor(st.Dev), mounts)
	}
	of := func(p string) Mount {
		t.Helper()
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := Of(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := of(inner); m.Point != inner || m.FSType != "tmpfs" || m.Parent != of(dir).ID {
		t.Fatalf("Of(%s) = %+v, want the tmpfs at %s on %+v", inner, m, inner, of(dir))
	}
	if want := []string{inner, dir}; !slices.Equal(got, want) {
		t.Fatalf("Under(%q) = %q, want %q (deepest first)", dir, got, want)
	}
	if got, _ := Under(dir + "x"); len(got) != 0 {
		t.Fatalf("Under of a sibling prefix = %q", got)
	}
}

// A mount made where another was, after it is gone, may get its id in
// the table and its device number again, never its unique id.
func TestUniqueIDNotGivenAgain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	const n = 20
	ids, devs, unique := map[int]bool{}, map[uint64]bool{}, map[uint64]bool{}
	for range n {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(dir)
		if err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
			t.Fatal(err)
		}
		m, err := Of(int(f.Fd()))
		u, uerr := UniqueID(int(f.Fd()))
		f.Close()
		unix.Unmount(dir, unix.MNT_DETACH)
		if err != nil || uerr != nil {
			t.Fatal(err, uerr)
		}
		if unique[u] {
			t.Fatalf("unique id %d given again", u)
		}
		ids[m.ID], devs[m.Dev], unique[u] = true, true, true
	}
	t.Logf("%d mounts in turn at one directory: %d distinct table ids, %d distinct device numbers, %d distinct unique ids",
		n, len(ids), len(devs), len(unique))
}

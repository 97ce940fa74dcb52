package idmap_test

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"computerd/computerd/idmap"
)

func TestRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    idmap.Range
		ok   bool
	}{
		{"default", idmap.Default, true},
		{"host root", idmap.Range{Base: 0, Size: 65536}, false},
		{"empty", idmap.Range{Base: 100000, Size: 0}, false},
		{"last", idmap.Range{Base: 1<<32 - 1 - 65536, Size: 65536}, true},
		{"past the last id", idmap.Range{Base: 1<<32 - 65536, Size: 65536}, false},
	} {
		if err := tc.r.Validate(); (err == nil) != tc.ok || err != nil && !errors.Is(err, idmap.ErrInvalid) {
			t.Errorf("%s: Validate %v", tc.name, err)
		}
	}
	r := idmap.Default
	if h, ok := r.Host(0); !ok || h != idmap.DefaultBase {
		t.Errorf("Host(0) = %d %v", h, ok)
	}
	if h, ok := r.Host(65535); !ok || h != idmap.DefaultBase+65535 {
		t.Errorf("Host(65535) = %d %v", h, ok)
	}
	if _, ok := r.Host(65536); ok {
		t.Error("Host(65536) is mapped")
	}
	if got := (idmap.Range{}).Or(r); got != r {
		t.Errorf("zero Or default = %v", got)
	}
}

// TestUserns: the namespace is a user namespace, made once per range.
func TestUserns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to map host ids")
	}
	f, err := idmap.Default.Userns()
	if err != nil {
		t.Fatal(err)
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil || typ != unix.CLONE_NEWUSER {
		t.Fatalf("namespace type %#x %v", typ, err)
	}
	again, err := idmap.Default.Userns()
	if err != nil || again != f {
		t.Errorf("a second Userns made another: %v", err)
	}
	if _, err := (idmap.Range{}).Userns(); !errors.Is(err, idmap.ErrInvalid) {
		t.Errorf("Userns of the zero range: %v", err)
	}
}

func TestOverlaps(t *testing.T) {
	a := idmap.Range{Base: 100000, Size: 65536}
	for _, tc := range []struct {
		name string
		b    idmap.Range
		want bool
	}{
		{"same", a, true},
		{"inside", idmap.Range{Base: 100001, Size: 1}, true},
		{"last id", idmap.Range{Base: 165535, Size: 10}, true},
		{"first id", idmap.Range{Base: 90000, Size: 10001}, true},
		{"after", idmap.Range{Base: 165536, Size: 65536}, false},
		{"before", idmap.Range{Base: 34464, Size: 65536}, false},
		{"around", idmap.Range{Base: 1, Size: 1 << 20}, true},
	} {
		if got := a.Overlaps(tc.b); got != tc.want || tc.b.Overlaps(a) != got {
			t.Errorf("%s: %v overlaps %v = %v, want %v", tc.name, a, tc.b, got, tc.want)
		}
	}
}

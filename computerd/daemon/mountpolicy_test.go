package daemon

import (
	"errors"
	"testing"

	"computerd/core"
)

// The policy's verdict by name: beneath a root, and never a system
// directory, a directory on PATH or one that holds a PATH entry, or the
// data directory.
func TestMountPolicyByName(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin:/home/alice/bin:/opt/tools/bin:relative/bin")
	p, err := newMountPolicy([]string{"/"}, "/srv/computerd")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"/home/alice/work", true},
		{"/srv/mnt/w", true},
		{"/tmp/w", true},
		{"/var/tmp/w", true},
		{"/mnt/w", true},
		{"/", false},
		{"/tmp", false},
		{"/home", false},
		{"/var", false},
		{"/usr/local/sbin", false},
		{"/usr/share/x", false},
		{"/etc/x", false},
		{"/lib64/x", false},
		{"/libexec", false},
		{"/var/lib/x", false},
		{"/run/user/0/x", false},
		{"/proc/1", false},
		{"/root/x", false},
		{"/home/alice/bin", false},  // on PATH
		{"/home/alice", false},      // holds a PATH entry
		{"/opt/tools", false},       // holds a PATH entry (missing or not)
		{"/opt/other", true},        //
		{"/srv/computerd", false},   // the data directory
		{"/srv/computerd/x", false}, // inside it
	} {
		_, err := p.check(tc.dir)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, core.ErrForbidden)) {
			t.Errorf("check(%s) = %v, want allowed %v", tc.dir, err, tc.ok)
		}
	}
	none, err := newMountPolicy(nil, "/srv/computerd")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.check("/tmp/w"); !errors.Is(err, core.ErrForbidden) {
		t.Errorf("no roots: %v, want forbidden", err)
	}
	if _, err := newMountPolicy([]string{"relative"}, "/srv/computerd"); err == nil {
		t.Error("a relative root: accepted")
	}
	if _, err := newMountPolicy([]string{"/nonexistent-root"}, "/srv/computerd"); err == nil {
		t.Error("a missing root: accepted")
	}
}

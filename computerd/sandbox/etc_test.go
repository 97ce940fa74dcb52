package sandbox_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"computerd/computerd/sandbox"
)

// hostCanary creates a file only host root may read in the host's
// directory dir, removed at the end of the test, and returns its name.
func hostCanary(t *testing.T, dir string) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "computerd-canary-" + hex.EncodeToString(b[:])
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("host secret\n"), 0o600); err != nil {
		t.Skipf("cannot write in the host's %s: %v", dir, err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return name
}

// TestEtc checks the container's /etc: its own accounts and name service,
// the host's public files that tools need, and nothing else of the
// host's: a file only host root may read, in /etc or in a directory the
// container's /etc copies, is not there.
func TestEtc(t *testing.T) {
	canary := hostCanary(t, "/etc")
	if _, err := os.Stat("/etc/ssl/certs"); err == nil {
		hostCanary(t, "/etc/ssl/certs")
	}
	m := MustManager(t) // its root is made after the canaries
	script := `if cat /etc/` + canary + ` >/dev/null 2>&1; then echo read; elif test -e /etc/` + canary + `; then echo there; else echo absent; fi
ls -A /etc /etc/ssl/certs 2>/dev/null | grep -c computerd-canary
cut -d: -f1 /etc/passwd | tr '\n' ' '; echo
id -un; getent hosts 127.0.0.1 | tr -s ' \t' ' '; hostname
test -e /etc/shadow || echo no-shadow
test -e /etc/machine-id || echo no-machine-id
readlink /etc/mtab`
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(script)})
	want := "absent\n0\nroot user nobody \nroot\n127.0.0.1 localhost\nsandbox\nno-shadow\nno-machine-id\n../proc/self/mounts\n"
	if got := o.stream(sandbox.Stdout); got != want {
		t.Errorf("stdout %q (exit %d, stderr %q), want %q", got, res.ExitCode, o.stream(sandbox.Stderr), want)
	}

	// Tools that read /etc: an alternative (Debian's awk is one), TLS
	// certificates through Python's ssl.
	checks := []struct{ name, path, script, want string }{
		{"alternatives", "/etc/alternatives/awk", `awk 'BEGIN { print "awk ok" }'`, "awk ok"},
		{"certificates", "/usr/bin/python3", `python3 -c 'import ssl; print(len(ssl.create_default_context().get_ca_certs()) > 10)'`, "True"},
		{"ld.so.cache", "/etc/ld.so.cache", `test -s /etc/ld.so.cache && echo cached`, "cached"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			needHost(t, c.path)
			res, o := MustRun(t, m, sandbox.Spec{Argv: sh(c.script)})
			if got := strings.TrimSpace(o.stream(sandbox.Stdout)); res.ExitCode != 0 || got != c.want {
				t.Errorf("%s: %q (exit %d, stderr %q), want %q", c.script, got, res.ExitCode, o.stream(sandbox.Stderr), c.want)
			}
		})
	}
}

// TestHostEtcBound: a Manager told to bind the host's /etc shows it, but
// what only host root may read there stays unreadable: the container's
// root is not the host's.
func TestHostEtcBound(t *testing.T) {
	canary := hostCanary(t, "/etc")
	m := MustManager(t, func(m *sandbox.Manager) {
		m.HostDirs = append(append([]string(nil), sandbox.DefaultHostDirs...), "/etc")
	})
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(`ls /etc | grep -c ` + canary + `; cat /etc/` + canary + ` >/dev/null 2>&1 || echo unreadable`)})
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != "1\nunreadable\n" {
		t.Errorf("stdout %q (exit %d, stderr %q), want the canary listed and unreadable", got, res.ExitCode, o.stream(sandbox.Stderr))
	}
}

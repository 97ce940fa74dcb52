package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/computerd/idmap"
)

// TestSandboxIDs: an exec's root is root only in its user namespace, and
// /workspace keeps the store's ids: what root creates is owned by 0 in
// the store, a chown to 1000 inside is stored as 1000, root may rewrite a
// file the store has as root's, and a file the store has as 1000's shows
// as 1000's.
func TestSandboxIDs(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "existing.txt", "old\n")
	out, errs, code := e.exec("w", "--shell", `grep -E '^Uid:' /proc/self/status | tr -s '\t' ' '; cat /proc/self/uid_map | tr -s ' '
stat -c '%u:%g' existing.txt && echo new >> existing.txt
echo a > rootmade && echo b > given && mkdir d && chown 1000:1000 given d`)
	ids := e.d.SandboxIDs() // the default range, unless another daemon on the host holds it
	if ids.Size != idmap.DefaultSize || ids.Base < idmap.DefaultBase {
		t.Fatalf("daemon's ids %v", ids)
	}
	want := fmt.Sprintf("Uid: 0 0 0 0\n 0 %d %d\n0:0\n", ids.Base, ids.Size)
	if code != 0 || out != want {
		t.Fatalf("exec: status %d, %q (stderr %q), want %q", code, out, errs, want)
	}
	cl := client.New(e.d.URL(), e.token)
	owners := func(paths ...string) string {
		var got []string
		for _, p := range paths {
			st, err := cl.Stat(context.Background(), "w", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s %d:%d", p, st.UID, st.GID))
		}
		return strings.Join(got, ", ")
	}
	if got, want := owners("existing.txt", "rootmade", "given", "d"), "existing.txt 0:0, rootmade 0:0, given 1000:1000, d 1000:1000"; got != want {
		t.Errorf("owners in the store: %s, want %s", got, want)
	}
	if tree := e.tree("w"); tree["existing.txt"] != "old\nnew\n" {
		t.Errorf("existing.txt: %q", tree["existing.txt"])
	}
	// A later exec sees the stored owners as its own ids.
	out, _, code = e.exec("w", "--shell", "stat -c '%n %u:%g' rootmade given")
	if code != 0 || out != "rootmade 0:0\ngiven 1000:1000\n" {
		t.Errorf("second exec sees %q", out)
	}
}

// TestSandboxHidesHost: nothing of the host is within an exec's reach:
// not computerd's API or metrics port, not a socket the host listens on
// in the abstract namespace, not a host process, not a root-only file
// put in the host's /etc, not the data directory's path (the mount table
// shows the workspace's overlay without its layers' host paths), and no
// AF_VSOCK socket.
func TestSandboxHidesHost(t *testing.T) {
	needExec(t)
	var b [6]byte
	rand.Read(b[:])
	canary := "computerd-canary-" + hex.EncodeToString(b[:])
	if err := os.WriteFile("/etc/"+canary, []byte("host secret\n"), 0o600); err != nil {
		t.Skipf("cannot write the host's /etc: %v", err)
	}
	t.Cleanup(func() { os.Remove("/etc/" + canary) })
	abstract := "computerd-test-" + hex.EncodeToString(b[:])
	ln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	e := start(t, api.Limits{}) // after the canary: its sandboxes' /etc is made now
	e.ok("ws", "create", "w")
	hostPort := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	apiAddr, metricsAddr := hostPort(e.d.URL()), hostPort(e.d.MetricsURL())
	script := fmt.Sprintf(`import os, socket
def attempt(name, family, addr):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(addr)
        print(name, "reached")
    except OSError as e:
        print(name, "unreachable")
host, port = %q.rsplit(":", 1)
attempt("api", socket.AF_INET, (host, int(port)))
host, port = %q.rsplit(":", 1)
attempt("metrics", socket.AF_INET, (host, int(port)))
attempt("abstract", socket.AF_UNIX, "\0%s")
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    print("vsock opened")
except OSError as e:
    print("vsock", e.strerror)
print("canary", "present" if os.path.lexists("/etc/%s") else "absent")
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("processes", "few" if len(pids) <= 4 else pids)
print("host pid", "visible" if os.path.exists("/proc/%d/cmdline") and %d > 4 else "hidden")
`, apiAddr, metricsAddr, abstract, canary, os.Getpid(), os.Getpid())
	out, errs, code := e.exec("w", "--", "python3", "-c", script)
	want := "api unreachable\nmetrics unreachable\nabstract unreachable\nvsock Address family not supported by protocol\ncanary absent\nprocesses few\nhost pid hidden\n"
	if code != 0 || out != want {
		t.Errorf("exec: status %d, %q (stderr %q), want %q", code, out, errs, want)
	}
	// The daemon's ports do answer from the host.
	if c, err := net.Dial("tcp", apiAddr); err != nil {
		t.Errorf("the API port does not answer on the host: %v", err)
	} else {
		c.Close()
	}

	out, errs, code = e.exec("w", "--", "cat", "/proc/self/mountinfo")
	if code != 0 || !strings.Contains(out, " /workspace ") {
		t.Fatalf("mountinfo: status %d %q %q", code, out, errs)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, e.dir) {
			t.Errorf("the mount table names the data directory %s: %s", e.dir, line)
		}
		// The layers by their paths in the copies of the view's and the
		// layers directory's mounts: /W-L1, /EXEC/upper, /EXEC/work.
		if strings.Contains(line, " /workspace ") && !regexp.MustCompile(`lowerdir\+=/([0-9]+-L[0-9]+)?,upperdir=/([^/,]+/)?upper,workdir=/([^/,]+/)?work`).MatchString(line) {
			t.Errorf("the workspace's overlay: %s", line)
		}
	}
}

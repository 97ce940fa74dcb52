package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"computerd/computerd/idmap"
	"computerd/computerd/sandbox"
)

// TestUserNamespace checks that root in a container is root only there:
// the container's processes have uid 0 in a user namespace that maps it
// to the first id of the Manager's range, which is what the host sees.
func TestUserNamespace(t *testing.T) {
	m := MustManager(t)
	base := idmap.DefaultBase
	script := `grep -E '^(Uid|Gid):' /proc/self/status | tr -s '\t' ' '; cat /proc/self/uid_map /proc/self/gid_map | tr -s ' '; exec sleep 987.654`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &output{}
	printed := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(ctx, sandbox.Spec{Argv: sh(script)}, func(e sandbox.Event) {
			out.add(e)
			if strings.Count(out.stream(sandbox.Stdout), "\n") >= 4 {
				select {
				case printed <- struct{}{}:
				default:
				}
			}
		})
		done <- err
	}()
	select {
	case <-printed:
	case err := <-done:
		t.Fatalf("run ended early: %v %q", err, out.stream(sandbox.Stderr))
	case <-time.After(20 * time.Second):
		t.Fatal("no output in 20 s")
	}
	want := fmt.Sprintf("Uid: 0 0 0 0\nGid: 0 0 0 0\n 0 %d 65536\n 0 %d 65536\n", base, base)
	if got := out.stream(sandbox.Stdout); got != want {
		t.Errorf("inside: %q, want %q", got, want)
	}
	// The same process, seen from the host.
	pid := findProcess(t, "sleep\x00987.654\x00")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	wantUid := fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d\n", base, base, base, base)
	if !bytes.Contains(status, []byte(wantUid)) {
		t.Errorf("host sees %s", bytes.SplitAfter(status, []byte("\n"))[8])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// findProcess returns the host pid of the process whose command line is
// cmdline (its arguments, each ended by NUL), waiting up to 10 s for it.
func findProcess(t *testing.T, cmdline string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == cmdline {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no process %q on the host", cmdline)
	return 0
}

// TestWorkspaceIDs checks the idmapped bind of a workspace directory: the
// container sees the host's ids as its own, what its root creates is
// owned by 0 on the host and a chown inside is a chown outside, root may
// write files root owns, and an id beyond the range shows as nobody.
func TestWorkspaceIDs(t *testing.T) {
	m := MustManager(t)
	ws := t.TempDir()
	for _, f := range []struct {
		name     string
		mode     os.FileMode
		uid, gid int
	}{
		{"rootfile", 0o644, 0, 0},
		{"readonly", 0o444, 0, 0},
		{"userfile", 0o600, 1000, 1000},
		{"farfile", 0o644, 70000, 70000},
	} {
		p := filepath.Join(ws, f.name)
		if err := os.WriteFile(p, []byte("x\n"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, f.uid, f.gid); err != nil {
			t.Fatal(err)
		}
	}
	script := `stat -c '%n %u:%g' rootfile userfile farfile
echo y >> rootfile && echo y >> readonly && echo y >> userfile && echo wrote
echo new > new && mkdir newdir && touch given && chown 1000:1000 given && echo made
chown 70000 new 2>/dev/null || echo no-far-chown`
	res, o := MustRun(t, m, sandbox.Spec{Argv: sh(script), WorkspaceDir: ws})
	want := "rootfile 0:0\nuserfile 1000:1000\nfarfile 65534:65534\nwrote\nmade\nno-far-chown\n"
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != want {
		t.Errorf("inside: %q (exit %d, stderr %q), want %q", got, res.ExitCode, o.stream(sandbox.Stderr), want)
	}
	for name, want := range map[string]string{"rootfile": "0:0", "readonly": "0:0", "new": "0:0", "newdir": "0:0", "given": "1000:1000", "farfile": "70000:70000"} {
		fi, err := os.Lstat(filepath.Join(ws, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if got := fmt.Sprintf("%d:%d", st.Uid, st.Gid); got != want {
			t.Errorf("%s is owned by %s on the host, want %s", name, got, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "readonly")); string(b) != "x\ny\n" {
		t.Errorf("readonly: %q", b)
	}
}

package integration

import (
	"context"
	"fmt"
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
	want := fmt.Sprintf("Uid: 0 0 0 0\n 0 %d %d\n0:0\n", idmap.DefaultBase, idmap.DefaultSize)
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

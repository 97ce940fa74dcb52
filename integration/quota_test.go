package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"computerd/client"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// randomBytes returns n bytes no other call returns.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// tarOf is a tar archive holding name with data.
func tarOf(t *testing.T, name string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()
	return buf.Bytes()
}

// wantQuota checks err is the API's quota_exceeded (403).
func wantQuota(t *testing.T, what string, err error) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeQuota || we.Status != http.StatusForbidden || !errors.Is(err, core.ErrQuota) {
		t.Fatalf("%s: %v, want 403 quota_exceeded", what, err)
	}
}

// checkStore runs the store's fsck (integrity_check included) on a
// running daemon's store and fails on any problem.
func checkStore(t *testing.T, s *fsstore.Store) {
	t.Helper()
	rep, err := s.Check(context.Background(), fsstore.CheckOptions{AllRevisions: true, Hashes: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck: %s", strings.Join(rep.Problems, "\n"))
	}
}

// A tenant's byte quota refuses writes, attaches and edits that would add
// bytes past it (403 quota_exceeded, nothing changed), while bytes it
// stores already cost nothing, deletes go through, another tenant is not
// affected, and deleting a workspace makes room at once.
func TestQuotaBytes(t *testing.T) {
	e := startWith(t, daemon.Config{Quota: fsstore.Quota{MaxBytes: 1 << 20}})
	ctx := context.Background()
	cl := client.New(e.d.URL(), e.token)
	for _, ws := range []string{"w", "scratch"} {
		if _, err := cl.CreateWorkspace(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	first := randomBytes(600 << 10)
	if _, err := cl.Write(ctx, "w", "first", bytes.NewReader(first), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.write("w", "text", "hello\n")
	head := e.head("w")
	over := randomBytes(600 << 10)
	_, err := cl.Write(ctx, "w", "over", bytes.NewReader(over), client.WriteOptions{})
	wantQuota(t, "write over the quota", err)
	_, err = cl.Attach(ctx, "w", bytes.NewReader(tarOf(t, "over", over)), client.AttachOptions{Merge: true})
	wantQuota(t, "attach over the quota", err)
	_, err = cl.Edit(ctx, "w", wire.Edit{Path: "text", Old: "hello", New: hex.EncodeToString(over)})
	wantQuota(t, "edit over the quota", err)
	if got := e.head("w"); got != head {
		t.Fatalf("refused calls moved the head from %d to %d", head, got)
	}
	if got := metric(t, e.d.MetricsURL(), `computerd_http_errors_total{code="quota_exceeded"}`); got != 3 {
		t.Fatalf("computerd_http_errors_total{code=\"quota_exceeded\"} = %v after 3 refusals", got)
	}
	if _, ok := e.tree("w")["over"]; ok {
		t.Fatal("a refused write left its file")
	}
	// Bytes the tenant stores already cost nothing.
	if _, err := cl.Write(ctx, "scratch", "copy", bytes.NewReader(first), client.WriteOptions{}); err != nil {
		t.Fatalf("a copy of stored bytes: %v", err)
	}
	// Another tenant has a quota of its own.
	bob := client.New(e.d.URL(), e.newToken("bob"))
	if _, err := bob.CreateWorkspace(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Write(ctx, "b", "over", bytes.NewReader(over), client.WriteOptions{}); err != nil {
		t.Fatalf("bob: %v", err)
	}
	u, err := e.d.Store.Usage(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(first) + len("hello\n")); u.Bytes != want {
		t.Fatalf("alice stores %d bytes, want %d", u.Bytes, want)
	}
	// A delete goes through over the quota; deleting the workspace that
	// holds the bytes frees them.
	if _, err := cl.Ops(ctx, "w", wire.Ops{Ops: []core.Op{{Kind: core.OpDelete, Path: "first"}}}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for _, ws := range []string{"w", "scratch"} {
		if err := cl.DeleteWorkspace(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.CreateWorkspace(ctx, "w2"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Write(ctx, "w2", "over", bytes.NewReader(over), client.WriteOptions{}); err != nil {
		t.Fatalf("write after the bytes were freed: %v", err)
	}
	checkStore(t, e.d.Store)
}

// The workspace quota counts conflict copies: a tenant at its quota
// cannot create or fork, until it removes one.
func TestQuotaWorkspaces(t *testing.T) {
	e := startWith(t, daemon.Config{Quota: fsstore.Quota{MaxWorkspaces: 2}})
	ctx := context.Background()
	cl := client.New(e.d.URL(), e.token)
	if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	e.write("w", "f", "one")
	base := e.head("w")
	e.write("w", "f", "two")
	// A commit based on an older revision that conflicts keeps its
	// changes in a copy, which counts.
	w, err := e.d.Store.Workspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.d.Store.ApplyOrKeep(ctx, w.ID, &core.Changeset{From: base, Ops: []core.Op{{Kind: core.OpCreate, Path: "f", Content: &core.Content{}}}},
		fsstore.CommitInfo{Base: base, ExecID: "x1"}, fsstore.CopyName("w", "conflict", "x1"))
	if err != nil || res.Copy.Name == "" {
		t.Fatalf("conflict copy: %+v %v", res, err)
	}
	_, err = cl.CreateWorkspace(ctx, "third")
	wantQuota(t, "create with a conflict copy at the quota", err)
	_, err = cl.Fork(ctx, "w", "third", 0)
	wantQuota(t, "fork at the quota", err)
	if err := cl.DeleteWorkspace(ctx, res.Copy.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateWorkspace(ctx, "third"); err != nil {
		t.Fatalf("create after removing the copy: %v", err)
	}
	checkStore(t, e.d.Store)
}

// A command that fills /workspace gets ENOSPC at its write bound (the
// per-exec cap, then what the tenant's quota leaves), not a kill; what
// it wrote is committed and computerd goes on answering.
func TestExecWriteBound(t *testing.T) {
	needExec(t)
	e := startWith(t, daemon.Config{ExecMaxWrite: 16 << 20, Quota: fsstore.Quota{MaxBytes: 48 << 20}})
	ctx := context.Background()
	e.ok("ws", "create", "w")
	fill := func(name string) (size int64, stderr string) {
		t.Helper()
		out, errs, code := e.exec("w", "--", "sh", "-c", "head -c 100M /dev/urandom > "+name+"; echo status $?; wc -c < "+name)
		if code != 0 || !strings.Contains(errs, "No space left on device") || !strings.HasPrefix(out, "status 1\n") {
			t.Fatalf("exec filling /workspace: status %d, stdout %q, stderr %q", code, out, errs)
		}
		st, err := e.d.Store.Workspace(ctx, "alice", "w")
		if err != nil {
			t.Fatal(err)
		}
		sn, err := e.d.Store.Snapshot(ctx, st.ID, core.Head)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := sn.Stat(ctx, name)
		if err != nil {
			t.Fatalf("what %s wrote was not committed: %v", name, err)
		}
		if want := strings.TrimSpace(strings.TrimPrefix(out, "status 1\n")); want != fmt.Sprint(fi.Size) {
			t.Fatalf("%s: the command saw %s bytes, %d committed", name, want, fi.Size)
		}
		return fi.Size, errs
	}
	// The per-exec cap: 16 MiB, less the volume's own metadata; df
	// inside shows it.
	if out, _, code := e.exec("w", "--", "sh", "-c", "df -P -k /workspace | tail -1 | awk '{print $2}'"); code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("df: %q, status %d", out, code)
	} else if kib, _ := strconv.Atoi(strings.TrimSpace(out)); kib > 16<<10 || kib < 12<<10 {
		t.Fatalf("df /workspace says %d KiB, want about 16 MiB", kib)
	}
	if n, _ := fill("first"); n > 16<<20 || n < 12<<20 {
		t.Fatalf("first exec wrote %d bytes, want a little under 16 MiB", n)
	}
	// The tenant's quota: 48 MiB, of which the first exec and a write
	// took about 36: the next exec gets what is left, rounded down.
	if _, err := client.New(e.d.URL(), e.token).Write(ctx, "w", "api", bytes.NewReader(randomBytes(20<<20)), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := e.d.Store.Usage(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	left := 48<<20 - u.Bytes
	if n, _ := fill("second"); n > left || n < left/2 {
		t.Fatalf("second exec wrote %d bytes, the quota left %d", n, left)
	}
	// At its quota the tenant's execs still run, with writes of what is
	// left, or a quarter MiB at least.
	for _, name := range []string{"third", "fourth"} {
		if u, err = e.d.Store.Usage(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		left = max(48<<20-u.Bytes, 256<<10)
		if n, _ := fill(name); n > left {
			t.Fatalf("%s exec wrote %d bytes, the quota left %d", name, n, left)
		}
	}
	if out := e.ok("read", "w", "api"); len(out) != 20<<20 {
		t.Fatalf("reading after the bound: %d bytes", len(out))
	}
	// An exec's output counts too: at the quota, none is kept.
	if out, errs, code := e.exec("w", "--", "cat", "api"); code != 0 || len(out) != 0 || !strings.Contains(errs, "quota") {
		t.Fatalf("an exec's output at the quota: status %d, %d bytes, stderr %q", code, len(out), errs)
	}
	checkStore(t, e.d.Store)
}

// shErr runs a shell command in another process and returns its combined
// output and error.
func shErr(script string) (string, error) {
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	return string(out), err
}

// Writes through a host mount that would take the tenant over its byte
// quota fail with EDQUOT as they are made; what was written before is
// committed, and the mount goes on working.
func TestQuotaHostMount(t *testing.T) {
	needExec(t)
	e := startMountsIn(t, t.TempDir(), daemon.Config{Quota: fsstore.Quota{MaxBytes: 4 << 20}})
	e.ok("ws", "create", "w")
	dir := filepath.Join(t.TempDir(), "mnt")
	e.ok("mount", "w", dir)
	defer e.run(nil, "umount", dir)
	sh(t, "head -c 1M /dev/urandom > "+dir+"/small && sync "+dir+"/small")
	out, err := shErr("head -c 8M /dev/urandom > " + dir + "/big")
	if err == nil || !strings.Contains(out, "quota exceeded") {
		t.Fatalf("8 MiB through the mount with 3 MiB of quota left: %v %q, want EDQUOT", err, out)
	}
	if got := e.tree("w")["small"]; len(got) != 1<<20 {
		t.Fatalf("small: %d bytes committed", len(got))
	}
	// Uncommitted writes count until the next commit (here an fsync),
	// even those of a file since deleted, which then never are stored.
	sh(t, "rm -f "+dir+"/big && sync "+dir+" && echo fine > "+dir+"/after && sync "+dir+"/after")
	eventually(t, "the write after the refusal is committed", func() bool { return e.tree("w")["after"] == "fine\n" })
	checkStore(t, e.d.Store)
}

// A tenant's own quota, set with `computerd tenant set` while the daemon
// runs, applies at the next call; a push over it is refused like a write.
func TestQuotaTenantSetting(t *testing.T) {
	e := startWith(t, daemon.Config{})
	ctx := context.Background()
	cl := client.New(e.d.URL(), e.token)
	if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	e.write("w", "f", "x")
	m := newMirror(t, e)
	pulled, err := m.Pull(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	computerd(t, "tenant", "set", "--data", e.dir, "--quota-bytes", "1M", "alice")
	_, err = cl.Write(ctx, "w", "big", bytes.NewReader(randomBytes(2<<20)), client.WriteOptions{})
	wantQuota(t, "write over the tenant's own quota", err)
	after, err := m.Store.Commit(ctx, pulled.Local.ID, (&core.Batch{}).WriteFile("pushed", randomBytes(2<<20), 0o644),
		fsstore.CommitInfo{Source: core.SourceExec, Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.Store.Diff(ctx, pulled.Local.ID, pulled.Local.Head, after.Rev)
	if err != nil {
		t.Fatal(err)
	}
	push := func() error {
		_, err := m.Push(ctx, "w", pulled.Local.ID, cs, syncproto.PushHeader{PushID: "p1", Base: pulled.HomeRev})
		return err
	}
	wantQuota(t, "push over the quota", push())
	var ls []struct {
		Tenant  string               `json:"tenant"`
		Usage   fsstore.Usage        `json:"usage"`
		Setting fsstore.QuotaSetting `json:"setting"`
	}
	if err := json.Unmarshal([]byte(computerd(t, "tenant", "ls", "--data", e.dir, "--json")), &ls); err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Tenant != "alice" || ls[0].Usage.Bytes != 1 || ls[0].Usage.Workspaces != 1 ||
		ls[0].Setting.MaxBytes == nil || *ls[0].Setting.MaxBytes != 1<<20 || ls[0].Setting.MaxWorkspaces != nil {
		t.Fatalf("tenant ls: %+v", ls)
	}
	if out := computerd(t, "tenant", "ls", "--data", e.dir); !strings.Contains(out, "alice") || !strings.Contains(out, "1M") {
		t.Fatalf("tenant ls:\n%s", out)
	}
	computerd(t, "tenant", "set", "--data", e.dir, "--quota-bytes", "default", "alice")
	if _, err := cl.Write(ctx, "w", "big", bytes.NewReader(randomBytes(2<<20)), client.WriteOptions{}); err != nil {
		t.Fatalf("write under the default quota again: %v", err)
	}
	if err := push(); err != nil {
		t.Fatalf("push under the default quota: %v", err)
	}
	checkStore(t, e.d.Store)
}

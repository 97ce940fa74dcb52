package integration

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"computerd/computerd/api"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
)

// newMirror opens a local store playing an executor's, mirroring e's home.
func newMirror(t *testing.T, e *env) *syncproto.Mirror {
	t.Helper()
	s := fsstore.New(filepath.Join(t.TempDir(), "exec"))
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &syncproto.Mirror{Client: &syncproto.Client{URL: e.d.URL(), Token: e.token}, Store: s, Tenant: "alice", InlineMax: 64 << 10}
}

// localTree reads a workspace head of any store like env.tree.
func localTree(t *testing.T, s *fsstore.Store, ws int64) map[string]string {
	t.Helper()
	e := &env{t: t}
	return e.treeOf(s, ws)
}

func TestSyncPullPush(t *testing.T) {
	ctx := context.Background()
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "src/a.txt", "alpha\n")
	e.write("w", "src/big.bin", strings.Repeat("0123456789abcdef", 40<<10)) // 640 KiB: three chunks
	e.ok("mkdir", "-p", "w", "empty/dir")
	m := newMirror(t, e)

	if _, err := m.Client.Hello(ctx); err != nil {
		t.Fatal(err)
	}
	// First pull: the whole tree.
	st, err := m.Pull(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := localTree(t, m.Store, st.Local.ID), e.tree("w"); !reflect.DeepEqual(got, want) {
		t.Fatalf("mirror after the first pull:\n%v\nwant\n%v", got, want)
	}
	if st.HomeRev != e.head("w") {
		t.Fatalf("mirror equals home@%d, head is %d", st.HomeRev, e.head("w"))
	}
	// The store records which home revision the mirror's head equals.
	if rev, home, err := m.Store.Mirror(ctx, st.Local.ID); err != nil || rev != st.Local.Head || home != st.HomeRev {
		t.Fatalf("mirror state after the first pull: local@%d = home@%d %v, want local@%d = home@%d", rev, home, err, st.Local.Head, st.HomeRev)
	}
	// A second pull with nothing new moves nothing and commits nothing.
	if st2, err := m.Pull(ctx, "w"); err != nil || st2.Bytes != 0 || st2.Requests != 1 || st2.Local.Head != st.Local.Head || st2.HomeRev != st.HomeRev {
		t.Fatalf("idle pull: %+v %v", st2, err)
	}
	// Home revisions that leave the tree as the mirror has it (a change,
	// then a restore) move the mirror's home revision, not its head: no
	// made-up revision records it.
	pulledAt := e.head("w")
	e.write("w", "src/a.txt", "alpha, for a moment\n")
	e.ok("restore", "w", "--rev", strconv.FormatInt(pulledAt, 10))
	st2, err := m.Pull(ctx, "w")
	if err != nil || st2.HomeRev != e.head("w") {
		t.Fatalf("pull of an unchanged tree: %+v %v, home head %d", st2, err, e.head("w"))
	}
	if st2.Local.Head != st.Local.Head {
		revs, _ := m.Store.Log(ctx, st.Local.ID, 1)
		t.Fatalf("pull of an unchanged tree committed local@%d: %+v", st2.Local.Head, revs)
	}
	if _, have, err := m.State(ctx, "w"); err != nil || have != e.head("w") {
		t.Fatalf("mirror state: home@%d %v, want home@%d", have, err, e.head("w"))
	}
	// A one-file change transfers only that file's bytes, in one round trip.
	e.write("w", "src/a.txt", "alpha, changed\n")
	st3, err := m.Pull(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if st3.Bytes != int64(len("alpha, changed\n")) || st3.Requests != 1 {
		t.Fatalf("incremental pull moved %d bytes in %d requests", st3.Bytes, st3.Requests)
	}
	// A big change goes over the inline limit: the changeset first, then only missing chunks.
	e.write("w", "src/big2.bin", strings.Repeat("fedcba9876543210", 40<<10)+"tail")
	st4, err := m.Pull(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if st4.Requests != 2 || st4.Bytes != int64(256<<10+128<<10+4) { // two equal 256 KiB chunks travel once
		t.Fatalf("big pull: %d bytes in %d requests", st4.Bytes, st4.Requests)
	}
	if got, want := localTree(t, m.Store, st4.Local.ID), e.tree("w"); !reflect.DeepEqual(got, want) {
		t.Fatalf("mirror after pulls differs from home")
	}

	// Push: a change made on the mirror lands at the home as one revision.
	local := st4.Local
	b := (&core.Batch{}).WriteFile("src/new.txt", []byte("from the executor\n"), 0o644)
	b.Add(core.Op{Kind: core.OpRename, From: "src/a.txt", Path: "src/renamed.txt"})
	after, err := m.Store.Commit(ctx, local.ID, b, fsstore.CommitInfo{Source: core.SourceExec, Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.Store.Diff(ctx, local.ID, local.Head, after.Rev)
	if err != nil {
		t.Fatal(err)
	}
	before := e.head("w")
	res, err := m.Push(ctx, "w", local.ID, cs, syncproto.PushHeader{PushID: "push-1", Base: st4.HomeRev})
	if err != nil || res.Duplicate || res.Revision.Rev != before+1 {
		t.Fatalf("push: %+v %v (head was %d)", res, err, before)
	}
	home := e.tree("w")
	if home["src/new.txt"] != "from the executor\n" || home["src/renamed.txt"] != "alpha, changed\n" || home["src/a.txt"] != "" {
		t.Fatalf("home after push: %v", home)
	}
	// The same push again (a retry) applies nothing.
	res, err = m.Push(ctx, "w", local.ID, cs, syncproto.PushHeader{PushID: "push-1", Base: st4.HomeRev})
	if err != nil || !res.Duplicate || res.Revision.Rev != before+1 || e.head("w") != before+1 {
		t.Fatalf("retried push: %+v %v, head %d", res, err, e.head("w"))
	}

	// A conflicting push: the home changed the same path after the base.
	e.write("w", "src/new.txt", "home's version\n")
	b2 := (&core.Batch{}).WriteFile("src/new.txt", []byte("executor's version\n"), 0o644)
	after2, err := m.Store.Commit(ctx, local.ID, b2, fsstore.CommitInfo{Source: core.SourceExec, Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	cs2, _ := m.Store.Diff(ctx, local.ID, after.Rev, after2.Rev)
	head := e.head("w")
	_, err = m.Push(ctx, "w", local.ID, cs2, syncproto.PushHeader{PushID: "push-2", Base: before + 1})
	var ce *core.ConflictError
	if !errors.As(err, &ce) || !reflect.DeepEqual(ce.Paths, []string{"src/new.txt"}) {
		t.Fatalf("conflicting push: %v", err)
	}
	if e.head("w") != head || e.tree("w")["src/new.txt"] != "home's version\n" {
		t.Fatal("a conflicting push changed the home")
	}
}

func TestSyncVersionAndTenant(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	req, _ := http.NewRequest("GET", e.d.URL()+"/v1/sync/hello", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set(syncproto.HeaderVersion, "99")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("version 99: status %d", resp.StatusCode)
	}
	// Another tenant cannot pull alice's workspace.
	m := newMirror(t, e)
	m.Client.Token = e.newToken("bob")
	m.Tenant = "bob"
	if _, err := m.Pull(context.Background(), "w"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("bob pulls alice's workspace: %v", err)
	}
}

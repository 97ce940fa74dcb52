package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	if rec, err := m.Store.Mirror(ctx, st.Local.ID); err != nil || rec.Rev != st.Local.Head || rec.HomeRev != st.HomeRev || rec.HomeWS != st.HomeWS || st.HomeWS == 0 {
		t.Fatalf("mirror state after the first pull: %+v %v, want local@%d = home %d@%d", rec, err, st.Local.Head, st.HomeWS, st.HomeRev)
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
	if _, have, err := m.State(ctx, "w"); err != nil || have.HomeRev != e.head("w") {
		t.Fatalf("mirror state: %+v %v, want home@%d", have, err, e.head("w"))
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

	baseTree := e.tree("w") // w@before+1
	// A conflicting push: the home changed the same path after the base.
	e.write("w", "src/new.txt", "home's version\n")
	b2 := (&core.Batch{}).WriteFile("src/new.txt", []byte("executor's version\n"), 0o644)
	var after2 core.Revision
	b2.WriteFile("src/only-here.txt", []byte("executor's too\n"), 0o644)
	after2, err = m.Store.Commit(ctx, local.ID, b2, fsstore.CommitInfo{Source: core.SourceExec, Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	cs2, _ := m.Store.Diff(ctx, local.ID, after.Rev, after2.Rev)
	head := e.head("w")
	res, err = m.Push(ctx, "w", local.ID, cs2, syncproto.PushHeader{PushID: "push-2", Base: before + 1, Source: core.SourceExec, Message: "make"})
	if err != nil || !reflect.DeepEqual(res.Conflict, []string{"src/new.txt"}) || res.KeptAs != "w.conflict-push-2" || res.Duplicate {
		t.Fatalf("conflicting push: %+v %v", res, err)
	}
	if e.head("w") != head || e.tree("w")["src/new.txt"] != "home's version\n" {
		t.Fatal("a conflicting push changed the home")
	}
	// The home kept the push whole: a fork of w at the push's base, plus
	// one revision holding exactly the push's changes.
	copyWS, err := e.d.Store.Workspace(ctx, "alice", res.KeptAs)
	if err != nil || copyWS.BaseRev != before+1 || copyWS.Head != 2 || res.Revision.Rev != 2 {
		t.Fatalf("conflict copy %s: %+v %v (push result %+v)", res.KeptAs, copyWS, err, res)
	}
	want := baseTree
	want["src/new.txt"], want["src/only-here.txt"] = "executor's version\n", "executor's too\n"
	if got := e.tree(res.KeptAs); !reflect.DeepEqual(got, want) {
		t.Fatalf("conflict copy's tree:\n%v\nwant\n%v", got, want)
	}
	revs, _ := e.d.Store.Log(ctx, copyWS.ID, 1)
	if r := revs[0]; r.ExecID != "push-2" || r.Source != core.SourceExec || r.Message != "make" {
		t.Fatalf("conflict copy's revision: %+v", r)
	}
	// The same conflicting push again (a retry) finds that copy and makes no other.
	again, err := m.Push(ctx, "w", local.ID, cs2, syncproto.PushHeader{PushID: "push-2", Base: before + 1, Source: core.SourceExec, Message: "make"})
	if err != nil || !again.Duplicate || again.KeptAs != res.KeptAs || again.Revision.Rev != res.Revision.Rev ||
		!reflect.DeepEqual(again.Conflict, res.Conflict) {
		t.Fatalf("retried conflicting push: %+v %v, first %+v", again, err, res)
	}
	if n := conflictCopies(t, e, "w"); n != 1 || e.head("w") != head {
		t.Fatalf("after a retried conflicting push: %d conflict copies, head %d (was %d)", n, e.head("w"), head)
	}
	// Another conflicting push whose copy's name is taken gets the next name.
	if _, err := e.d.Store.CreateWorkspace(ctx, "alice", "w.conflict-push-3"); err != nil {
		t.Fatal(err)
	}
	res3, err := m.Push(ctx, "w", local.ID, cs2, syncproto.PushHeader{PushID: "push-3", Base: before + 1})
	if err != nil || res3.KeptAs != "w.conflict-push-3-2" || res3.Duplicate {
		t.Fatalf("conflicting push whose copy name is taken: %+v %v", res3, err)
	}
}

// conflictCopies counts the workspaces named as conflict copies of ws.
func conflictCopies(t *testing.T, e *env, ws string) int {
	t.Helper()
	list, err := e.d.Store.Workspaces(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range list {
		if strings.HasPrefix(w.Name, ws+".conflict-") {
			n++
		}
	}
	return n
}

func TestSyncConflictCopyName(t *testing.T) {
	long := strings.Repeat("a", 128)
	tests := []struct {
		name, ws, pushID, want string
	}{
		{"exec id", "w", "x0123456789abcdef", "w.conflict-x0123456789abcdef"},
		{"characters no name takes", "w", "a/b c", "w.conflict-" + hashTag("a/b c")},
		{"long workspace", long, "x1", long[:128-4-len(".conflict-x1")-17] + "-" + hashTag(long) + ".conflict-x1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := syncproto.ConflictCopyName(tt.ws, tt.pushID); got != tt.want {
				t.Fatalf("ConflictCopyName(%q, %q) = %q, want %q", tt.ws, tt.pushID, got, tt.want)
			}
		})
	}
}

func hashTag(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
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

package fsstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// usage reads tenant's usage or fails the test.
func usage(tb testing.TB, s *fsstore.Store, tenant string) fsstore.Usage {
	tb.Helper()
	u, err := s.Usage(context.Background(), tenant)
	if err != nil {
		tb.Fatal(err)
	}
	if u.Total != u.Bytes+u.Records {
		tb.Fatalf("usage of %s: total %d, bytes %d and records %d", tenant, u.Total, u.Bytes, u.Records)
	}
	u.Total = 0 // checked: the cases compare the parts
	return u
}

// tenants lists the store's tenants and their names, or fails the test.
func tenants(tb testing.TB, s *fsstore.Store) ([]fsstore.Tenant, []string) {
	tb.Helper()
	ts, err := s.Tenants(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, tn := range ts {
		names = append(names, tn.Name)
	}
	return ts, names
}

// distinct returns n bytes whose 16-byte chunks differ from each other
// and from those of any other seed.
func distinct(seed, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%07d-%07d|", seed, i)
	}
	return b.Bytes()[:n]
}

// A tenant's stored bytes are its distinct chunks, each counted once
// whatever holds it (files, revisions, forks, copies, drafts), and in full
// for every tenant holding it; they go when the last row naming them goes.
func TestUsageCountsDistinctChunks(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t) // 16-byte chunks
	a, err := s.CreateWorkspace(ctx, "alice", "a")
	if err != nil {
		t.Fatal(err)
	}
	commit := func(ws int64, b *core.Batch) {
		t.Helper()
		if _, err := s.Commit(ctx, ws, b, fsstore.CommitInfo{}); err != nil {
			t.Fatal(err)
		}
	}
	// 64 bytes = 4 distinct chunks, written twice in one workspace.
	data := distinct(1, 64)
	commit(a.ID, (&core.Batch{}).WriteFile("x", data, 0o644).WriteFile("copy-of-x", data, 0o644))
	want := fsstore.Usage{Bytes: 64, Chunks: 4, Workspaces: 1}
	if got := usage(t, s, "alice"); got != want {
		t.Fatalf("after writing x twice: %+v, want %+v", got, want)
	}
	// A fork and a draft hold the same chunks: nothing more, but the fork
	// counts as a workspace.
	f, err := s.Fork(ctx, a.ID, core.Head, "fork")
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.CreateDraft(ctx, a.ID, core.Head, "d")
	if err != nil {
		t.Fatal(err)
	}
	commit(d.ID, (&core.Batch{}).WriteFile("in-draft", data, 0o644))
	want.Workspaces = 2
	if got := usage(t, s, "alice"); got != want {
		t.Fatalf("after a fork and a draft of the same bytes: %+v, want %+v", got, want)
	}
	// New bytes in the draft are the owner's.
	commit(d.ID, (&core.Batch{}).WriteFile("new", distinct(2, 32), 0o644))
	want.Bytes, want.Chunks = 96, 6
	if got := usage(t, s, "alice"); got != want {
		t.Fatalf("after new bytes in a draft: %+v, want %+v", got, want)
	}
	// Another tenant holding the same bytes is charged in full; alice's
	// usage does not move.
	b, err := s.CreateWorkspace(ctx, "bob", "b")
	if err != nil {
		t.Fatal(err)
	}
	commit(b.ID, (&core.Batch{}).WriteFile("x", data, 0o644))
	if got := usage(t, s, "bob"); got != (fsstore.Usage{Bytes: 64, Chunks: 4, Workspaces: 1}) {
		t.Fatalf("bob: %+v", got)
	}
	if got := usage(t, s, "alice"); got != want {
		t.Fatalf("alice after bob wrote the same bytes: %+v, want %+v", got, want)
	}
	// Deleting the file keeps its bytes while a revision holds them;
	// deleting the draft frees its own bytes; deleting every workspace of
	// bob's frees all of his.
	commit(a.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpDelete, Path: "x"}, core.Op{Kind: core.OpDelete, Path: "copy-of-x"}))
	if got := usage(t, s, "alice"); got != want {
		t.Fatalf("after a delete (history holds the bytes): %+v, want %+v", got, want)
	}
	if err := s.DeleteWorkspace(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	want.Bytes, want.Chunks = 64, 4
	if got := usage(t, s, "alice"); got != want {
		t.Fatalf("after the draft went: %+v, want %+v", got, want)
	}
	if err := s.DeleteWorkspace(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if got := usage(t, s, "bob"); got != (fsstore.Usage{}) {
		t.Fatalf("bob after deleting his workspace: %+v", got)
	}
	// Pruning every revision but the head frees the deleted files' bytes,
	// except what the fork still reads.
	if _, err := s.Prune(ctx, a.ID, fsstore.Policy{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	if got := usage(t, s, "alice"); got != want {
		t.Fatalf("after pruning (the fork reads the old rows): %+v, want %+v", got, want)
	}
	if err := s.DeleteWorkspace(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, a.ID, fsstore.Policy{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	if got := usage(t, s, "alice"); got != (fsstore.Usage{Workspaces: 1}) {
		t.Fatalf("after the fork went and history was pruned: %+v", got)
	}
	bbCheck(t, s)
}

// A metered commit that would take its tenant over the byte quota fails
// with ErrQuota and changes nothing; one that adds nothing goes through
// even over the quota; an unmetered one is never refused.
func TestQuotaRefusesMeteredCommit(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	s.DefaultQuota = fsstore.Quota{MaxBytes: 100}
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	metered := fsstore.CommitInfo{Metered: true}
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("a", distinct(1, 96), 0o644), metered); err != nil {
		t.Fatal(err)
	}
	head := w.Head + 1
	_, err = s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("b", distinct(2, 16), 0o644), metered)
	if !errors.Is(err, core.ErrQuota) {
		t.Fatalf("commit over the quota: %v, want ErrQuota", err)
	}
	if got, _ := s.WorkspaceByID(ctx, w.ID); got.Head != head {
		t.Fatalf("refused commit moved the head to %d", got.Head)
	}
	if got := usage(t, s, "alice"); got.Bytes != 96 {
		t.Fatalf("refused commit left usage %d, want 96", got.Bytes)
	}
	// The same bytes again cost nothing: allowed at the quota.
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("a2", distinct(1, 96), 0o644), metered); err != nil {
		t.Fatalf("copy of stored bytes: %v", err)
	}
	// Unmetered (an exec's or a mount's accepted writes) goes over.
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("c", distinct(3, 32), 0o644), fsstore.CommitInfo{}); err != nil {
		t.Fatalf("unmetered commit: %v", err)
	}
	// Over the quota a delete still goes through.
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpDelete, Path: "c"}), metered); err != nil {
		t.Fatalf("delete over the quota: %v", err)
	}
	// A setting of the tenant's own replaces the default, and lifts it.
	big := int64(1000)
	if err := s.SetQuota(ctx, "alice", fsstore.QuotaSetting{MaxBytes: &big}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("b", distinct(2, 16), 0o644), metered); err != nil {
		t.Fatalf("commit under the tenant's own quota: %v", err)
	}
	if q, _ := s.QuotaOf(ctx, "alice"); q.MaxBytes != 1000 {
		t.Fatalf("QuotaOf: %+v", q)
	}
	if err := s.SetQuota(ctx, "alice", fsstore.QuotaSetting{}); err != nil {
		t.Fatal(err)
	}
	if q, _ := s.QuotaOf(ctx, "alice"); q.MaxBytes != 100 {
		t.Fatalf("QuotaOf after the setting was cleared: %+v", q)
	}
	bbCheck(t, s)
}

// An upload metered with what the quota leaves stops once its new chunks
// pass it, before any commit.
func TestUploaderMeter(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	up := s.NewUploader()
	defer up.Close()
	up.Meter(64)
	if _, err := up.Put(ctx, bytes.NewReader(distinct(1, 64))); err != nil {
		t.Fatal(err)
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatalf("64 bytes within a budget of 64: %v", err)
	}
	// Chunks the store holds already cost nothing.
	if _, err := up.Put(ctx, bytes.NewReader(distinct(1, 64))); err != nil {
		t.Fatal(err)
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatalf("the same bytes again: %v", err)
	}
	if _, err := up.Put(ctx, bytes.NewReader(distinct(2, 16))); err != nil {
		t.Fatal(err)
	}
	if err := up.Flush(ctx); !errors.Is(err, core.ErrQuota) {
		t.Fatalf("16 new bytes over the budget: %v, want ErrQuota", err)
	}
}

func TestTenants(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	s.DefaultQuota = fsstore.Quota{MaxBytes: 1 << 20, MaxWorkspaces: 10}
	if _, _, err := s.CreateToken(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("a", distinct(1, 32), 0o644), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	two := int64(2)
	if err := s.SetQuota(ctx, "bob", fsstore.QuotaSetting{MaxWorkspaces: &two}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetQuota(ctx, "no/such", fsstore.QuotaSetting{MaxWorkspaces: &two}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("bad tenant name: %v", err)
	}
	ts, names := tenants(t, s)
	if fmt.Sprint(names) != "[alice bob carol]" {
		t.Fatalf("tenants %v", names)
	}
	if ts[0].Usage != (fsstore.Usage{Bytes: 32, Chunks: 2, Total: 32, Workspaces: 1}) || ts[0].Quota != s.DefaultQuota {
		t.Fatalf("alice: %+v", ts[0])
	}
	if ts[1].Quota != (fsstore.Quota{MaxBytes: 1 << 20, MaxWorkspaces: 2}) || *ts[1].Setting.MaxWorkspaces != 2 {
		t.Fatalf("bob: %+v", ts[1])
	}
	for range 2 {
		if _, err := s.CreateWorkspace(ctx, "bob", fmt.Sprint("w", len(names))); err != nil {
			t.Fatal(err)
		}
		names = append(names, "")
	}
	if err := s.CheckWorkspaceQuota(ctx, "bob"); !errors.Is(err, core.ErrQuota) {
		t.Fatalf("bob at 2 of 2 workspaces: %v", err)
	}
	if err := s.CheckWorkspaceQuota(ctx, "alice"); err != nil {
		t.Fatalf("alice at 1 of 10: %v", err)
	}
}

// A metered import (attach) is refused like a metered commit: its upload
// stops once its new bytes pass what the quota leaves, and moving the
// stage into the workspace counts exactly, so bytes the store holds for
// another tenant cost the importer in full. The stage is no tenant of
// its own.
func TestQuotaStagedImport(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	s.DefaultQuota = fsstore.Quota{MaxBytes: 100}
	bob, err := s.CreateWorkspace(ctx, "bob", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, bob.ID, (&core.Batch{}).WriteFile("x", distinct(5, 64), 0o644), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("a", distinct(1, 48), 0o644), fsstore.CommitInfo{Metered: true}); err != nil {
		t.Fatal(err)
	}
	head := w.Head + 1
	importFile := func(name string, data []byte) (core.Revision, error) {
		t.Helper()
		left, err := s.Remaining(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		up := s.NewUploader()
		up.Meter(left)
		im, err := s.NewImport(ctx, w.ID, false, up)
		if err != nil {
			t.Fatal(err)
		}
		defer im.Close()
		if err := im.File(ctx, name, 0o644, time.Unix(1700000000, 0), bytes.NewReader(data)); err != nil {
			return core.Revision{}, err
		}
		return im.Commit(ctx, fsstore.CommitInfo{Metered: true, Message: "import"})
	}
	if _, err := importFile("dup", distinct(5, 64)); !errors.Is(err, core.ErrQuota) {
		t.Fatalf("import of another tenant's 64 bytes at 48 of 100: %v, want ErrQuota", err)
	}
	if _, err := importFile("new", distinct(2, 64)); !errors.Is(err, core.ErrQuota) {
		t.Fatalf("import of 64 new bytes at 48 of 100: %v, want ErrQuota", err)
	}
	if got, _ := s.WorkspaceByID(ctx, w.ID); got.Head != head {
		t.Fatalf("refused imports moved the head from %d to %d", head, got.Head)
	}
	if got := usage(t, s, "alice"); got.Bytes != 48 {
		t.Fatalf("refused imports left alice's usage at %d, want 48", got.Bytes)
	}
	if _, err := importFile("fits", distinct(3, 32)); err != nil {
		t.Fatalf("import of 32 bytes at 48 of 100: %v", err)
	}
	if got := usage(t, s, "alice"); got.Bytes != 80 {
		t.Fatalf("alice stores %d bytes after the import, want 80", got.Bytes)
	}
	if _, names := tenants(t, s); fmt.Sprint(names) != "[alice bob]" {
		t.Fatalf("tenants %v, want [alice bob]", names)
	}
	bbCheck(t, s)
}

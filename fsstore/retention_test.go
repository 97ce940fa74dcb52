package fsstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

func TestRetentionPolicyParse(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       fsstore.Policy
		str        string
	}{
		{"all", "all", fsstore.Policy{}, "all"},
		{"days and count", "for=7d,last=100", fsstore.Policy{KeepFor: 7 * 24 * time.Hour, KeepLast: 100}, "for=7d,last=100"},
		{"duration", "for=36h", fsstore.Policy{KeepFor: 36 * time.Hour}, "for=36h0m0s"},
		{"count only", " last=3 ", fsstore.Policy{KeepLast: 3}, "last=3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fsstore.ParsePolicy(tc.text)
			if err != nil || got != tc.want {
				t.Fatalf("ParsePolicy(%q) = %+v, %v; want %+v", tc.text, got, err, tc.want)
			}
			if s := got.String(); s != tc.str {
				t.Errorf("String() = %q, want %q", s, tc.str)
			}
			if again, err := fsstore.ParsePolicy(got.String()); err != nil || again != got {
				t.Errorf("round trip of %q: %+v, %v", got.String(), again, err)
			}
		})
	}
	if got := fsstore.DefaultPolicy.String(); got != "for=7d,last=100" {
		t.Errorf("DefaultPolicy = %q", got)
	}
	for _, bad := range []string{"", "last=0", "last=x", "for=0s", "for=-1d", "keep=3", "for=7d,,last=2"} {
		if p, err := fsstore.ParsePolicy(bad); err == nil {
			t.Errorf("ParsePolicy(%q) = %+v, want an error", bad, p)
		}
	}
}

// TestRetainKeepsDrafts: Retain prunes ordinary workspaces by the policy,
// by count and by age, but leaves drafts whole (their changes are read
// from their first revision on when delivered).
func TestRetainKeepsDrafts(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	now := time.Now()
	s.Now = func() time.Time { return now }
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	commit := func(ws int64, i int) {
		t.Helper()
		var b core.Batch
		b.WriteFile("f", []byte(fmt.Sprintf("version %d", i)), 0o644)
		if _, err := s.Commit(ctx, ws, &b, fsstore.CommitInfo{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		commit(w.ID, i)
	}
	d, err := s.CreateDraft(ctx, w.ID, core.Head, "exec-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		commit(d.ID, 10+i)
	}
	now = now.Add(2 * time.Hour) // everything so far is two hours old
	commit(w.ID, 4)

	st, err := s.Retain(ctx, fsstore.Policy{KeepLast: 1, KeepFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if log, _ := s.Log(ctx, w.ID, 0); len(log) != 1 {
		t.Errorf("workspace keeps %d revisions, want 1 (the head; the rest are older than an hour)", len(log))
	}
	if log, _ := s.Log(ctx, d.ID, 0); len(log) != 5 {
		t.Errorf("draft keeps %d revisions, want all 5", len(log))
	}
	if st.Revisions != 5 || st.Chunks == 0 {
		t.Errorf("Retain stats %+v, want 5 revisions pruned and chunks freed", st)
	}
	if _, err := s.Diff(ctx, d.ID, 1, 5); err != nil {
		t.Errorf("draft diff from its first revision after Retain: %v", err)
	}
}

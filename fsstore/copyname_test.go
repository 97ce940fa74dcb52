package fsstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"computerd/fsstore"
)

// Every kind of copy of every valid workspace name is a workspace name with
// room for the store's -2 ... -100, and copies of distinct bases differ,
// even bases that share all but their last byte.
func TestCopyName(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	kinds := []struct{ kind, suffix string }{
		{"conflict", "x0123456789abcdef"},
		{"conflict", "20261202T024904.123456789"},
		{"conflict", "push-2"},
		{"conflict", "a/b c"},
		{"conflict", strings.Repeat("p", 200)},
		{"interrupted", "exec-x0123456789abcdef"},
		{"interrupted", "mount-7"},
	}
	seen := map[string]string{}
	for _, k := range kinds {
		for _, n := range []int{1, 93, 100, 128} {
			for _, last := range []string{"a", "b"} {
				base := strings.Repeat("w", n-1) + last
				t.Run(fmt.Sprintf("%s/%.20s/%d%s", k.kind, k.suffix, n, last), func(t *testing.T) {
					got := fsstore.CopyName(base, k.kind, k.suffix)
					if len(got) > 124 {
						t.Fatalf("CopyName = %q: %d bytes, want at most 124", got, len(got))
					}
					if !strings.Contains(got, "."+k.kind+"-") {
						t.Fatalf("CopyName = %q: no .%s-", got, k.kind)
					}
					if prev, ok := seen[got]; ok {
						t.Fatalf("CopyName(%q) = %q, as for %s", base, got, prev)
					}
					seen[got] = base + " " + k.suffix
					if _, err := s.CreateWorkspace(ctx, "t", got); err != nil {
						t.Fatalf("CreateWorkspace(%q): %v", got, err)
					}
					if _, err := s.CreateWorkspace(ctx, "t", got+"-100"); err != nil {
						t.Fatalf("CreateWorkspace(%q): %v", got+"-100", err)
					}
				})
			}
		}
	}
	// A name that fits is kept as it is.
	if got, want := fsstore.CopyName("w", "conflict", "x1"), "w.conflict-x1"; got != want {
		t.Fatalf("CopyName = %q, want %q", got, want)
	}
}

package fsstore

import (
	"context"
	"strings"
	"testing"
)

// TestReachQueryPlan holds reachQuery to the plan whose work does not
// depend on other tenants' rows: the tenant's workspaces outside, one
// probe of extents_chunk on both its columns per workspace, and the hash
// looked up once, its row id the probes' key.
func TestReachQueryPlan(t *testing.T) {
	ctx := context.Background()
	s := New(t.TempDir())
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.wconn.QueryContext(ctx, `EXPLAIN QUERY PLAN `+reachQuery, "alice", draftTenantPrefix+"alice", make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", strings.Join(plan, "\n"))
	want := []string{
		"SEARCH w USING COVERING INDEX workspaces_tenant (tenant=?)",
		"SEARCH e USING COVERING INDEX extents_ws_chunk (ws=? AND chunk=?)",
		"SCALAR SUBQUERY", // not CORRELATED: run once, its value kept
		"SEARCH chunks USING COVERING INDEX sqlite_autoindex_chunks_1 (hash=?)",
	}
	next := 0
	for _, line := range plan {
		if next < len(want) && strings.HasPrefix(line, want[next]) {
			next++
		}
	}
	if next < len(want) {
		t.Fatalf("plan of reachQuery:\n%s\nwant, in this order, lines starting with:\n%s", strings.Join(plan, "\n"), strings.Join(want, "\n"))
	}
}

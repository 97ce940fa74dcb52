package fsstore

import (
	"math/rand/v2"
	"testing"

	"computerd/core"
)

// conflictRule finds the conflicts the rule it replaced found: each op's
// path (and a rename's or link's source) against each changed path, the
// same path for any op, or one above or beneath it for an op other than
// an attribute's.
func TestConflictRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	names := []string{"a", "b", "a-b", "a.b", "ab"}
	randPath := func() string {
		var p string
		for d := rng.IntN(4); d > 0; d-- {
			p = joinPath(p, names[rng.IntN(len(names))])
		}
		return p
	}
	kinds := []core.OpKind{core.OpCreate, core.OpDelete, core.OpRename, core.OpLink, core.OpWrite,
		core.OpChmod, core.OpChown, core.OpUtimes, core.OpDeleteAll}
	for round := range 2000 {
		var ops sliceOps
		for range rng.IntN(4) {
			op := core.Op{Kind: kinds[rng.IntN(len(kinds))], Path: randPath()}
			if op.Kind == core.OpRename || op.Kind == core.OpLink {
				op.From = randPath()
			}
			ops = append(ops, op)
		}
		hits := conflictRule(ops)
		for range 20 {
			c := randPath()
			want := false
			for _, op := range ops {
				attr := op.Kind == core.OpChmod || op.Kind == core.OpChown || op.Kind == core.OpUtimes
				paths := []string{op.Path}
				if op.Kind == core.OpRename || op.Kind == core.OpLink {
					paths = append(paths, op.From)
				}
				for _, p := range paths {
					want = want || c == p || !attr && (inSubtree(c, p) || inSubtree(p, c))
				}
			}
			if got := hits(c); got != want {
				t.Fatalf("round %d: %q against %v: %v, want %v", round, c, ops, got, want)
			}
		}
	}
}

package fsstore

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"

	"computerd/core"
)

// A spill gives back what it was given, sorted, from memory or merged
// from many runs on disk, as often as it is read.
func TestSpillSorts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		runBytes int
	}{
		{"empty", 0, spillRunBytes},
		{"one run", 1000, spillRunBytes},
		{"many runs", 20000, 4 << 10},
		{"a run a record", 50, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.n)))
			s := newSpill(t.TempDir())
			s.runBytes = tc.runBytes
			defer s.close()
			var want [][]byte
			for range tc.n {
				rec := make([]byte, rng.IntN(40))
				for i := range rec {
					rec[i] = byte(rng.IntN(4)) // many equal prefixes
				}
				want = append(want, rec)
				if err := s.add(rec); err != nil {
					t.Fatal(err)
				}
			}
			slices.SortFunc(want, bytes.Compare)
			for pass := range 2 {
				var got [][]byte
				if err := s.each(func(rec []byte) error {
					got = append(got, bytes.Clone(rec))
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) || (len(got) > 0 && !slices.EqualFunc(got, want, bytes.Equal)) {
					t.Fatalf("pass %d: %d records back of %d, or out of order", pass, len(got), len(want))
				}
			}
			if err := s.add([]byte("late")); err == nil {
				t.Fatal("add after each: no error")
			}
		})
	}
}

// A diff's spool gives its ops back in the order Diff always gave them:
// by phase, then by path (deletes deepest first), then in the order found,
// the order a stable sort by that rule gives.
func TestOpKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	kinds := []core.OpKind{core.OpDelete, core.OpRename, core.OpMkdir, core.OpCreate, core.OpSymlink,
		core.OpLink, core.OpWrite, core.OpTruncate, core.OpChmod, core.OpChown, core.OpUtimes}
	names := []string{"a", "b", "a b", "a-b", "a.b", "ab", "é", "z"}
	var ops []core.Op
	for i := range 5000 {
		var p string
		for d := rng.IntN(4); d >= 0; d-- {
			p = joinPath(p, names[rng.IntN(len(names))])
		}
		if rng.IntN(20) == 0 {
			p = ""
		}
		ops = append(ops, core.Op{Kind: kinds[rng.IntN(len(kinds))], Path: p, Size: int64(i)})
	}
	o := newSortedOpSpool(t.TempDir())
	o.sp.runBytes = 8 << 10
	defer o.Close()
	var key []byte
	for _, op := range ops {
		key = opKey(key, op)
		if err := o.add(key, op); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Clone(ops)
	sort.SliceStable(want, func(i, j int) bool {
		a, b := want[i], want[j]
		if pa, pb := opPhase(a.Kind), opPhase(b.Kind); pa != pb {
			return pa < pb
		}
		if a.Kind == core.OpDelete {
			return a.Path > b.Path
		}
		return a.Path < b.Path
	})
	var got []core.Op
	if err := o.Each(func(op core.Op) error { got = append(got, op); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d ops back, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Kind != want[i].Kind || got[i].Path != want[i].Path || got[i].Size != want[i].Size {
			t.Fatalf("op %d: %s %q (#%d), want %s %q (#%d)", i, got[i].Kind, got[i].Path, got[i].Size, want[i].Kind, want[i].Path, want[i].Size)
		}
	}
}

// A spool of ops added in order gives them back in that order, from
// memory or from many runs on disk, as often as it is read.
func TestOpSpoolInOrder(t *testing.T) {
	for _, runBytes := range []int{spillRunBytes, 4 << 10} {
		s := &Store{Dir: t.TempDir()}
		o := s.NewOpSpool()
		o.sp.runBytes = runBytes
		var want []core.Op
		for i := range 20000 {
			op := core.Op{Kind: core.OpCreate, Path: joinPath("d", string(rune('z'-i%26))), Mtime: int64(i),
				Content: &core.Content{Size: int64(i), Chunks: []core.ChunkRef{{Index: 0, Len: i, Row: int64(i)}}}}
			want = append(want, op)
			if err := o.Add(op); err != nil {
				t.Fatal(err)
			}
		}
		for pass := range 2 {
			i := 0
			err := o.Each(func(op core.Op) error {
				if w := want[i]; op.Path != w.Path || op.Mtime != w.Mtime || op.Content.Size != w.Content.Size || op.Content.Chunks[0] != w.Content.Chunks[0] {
					t.Fatalf("pass %d, op %d: %+v, want %+v", pass, i, op, w)
				}
				i++
				return nil
			})
			if err != nil || i != len(want) {
				t.Fatalf("pass %d: %d ops back of %d (%v)", pass, i, len(want), err)
			}
		}
		if o.sp.file == nil && runBytes < spillRunBytes {
			t.Fatal("no run was written to disk")
		}
		o.Close()
	}
}

// On a full disk a spill keeps what it cannot write in memory, after the
// runs it wrote before, and still gives every record back in order: the
// store's reads work on a full disk, diffs included.
func TestSpillFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name       string
		runsOnDisk int // runs written before the disk is full
		inOrder    bool
	}{
		{"full from the start", 0, false},
		{"full after two runs", 2, false},
		{"in order, full after two runs", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			if err != nil {
				t.Skip(err)
			}
			defer full.Close()
			s := newSpill(t.TempDir())
			s.runBytes, s.inOrder = 1<<10, tc.inOrder
			defer s.close()
			rng := rand.New(rand.NewPCG(4, 5))
			var want [][]byte
			for i := range 2000 {
				if tc.runsOnDisk == 0 && s.file == nil {
					s.file, s.w = full, bufio.NewWriter(full)
				} else if len(s.runs) == tc.runsOnDisk && s.w != nil && !s.noDisk {
					s.w = bufio.NewWriter(full) // runs written so far stay readable
				}
				rec := fmt.Appendf(nil, "%08d", rng.IntN(1e8))
				if tc.inOrder {
					rec = fmt.Appendf(nil, "%08d", i)
				}
				want = append(want, rec)
				if err := s.add(rec); err != nil {
					t.Fatal(err)
				}
			}
			if !s.noDisk || len(s.runs) != tc.runsOnDisk {
				t.Fatalf("noDisk %v after %d runs, want true after %d", s.noDisk, len(s.runs), tc.runsOnDisk)
			}
			slices.SortFunc(want, bytes.Compare)
			var got [][]byte
			if err := s.each(func(rec []byte) error {
				got = append(got, bytes.Clone(rec))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("%d records back of %d, or out of order", len(got), len(want))
			}
		})
	}
}

package fsstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// dumpTree describes every entry of ws's head: kind, mode and content.
func dumpTree(t *testing.T, s *fsstore.Store, ws int64) map[string]string {
	t.Helper()
	ctx := context.Background()
	sn, err := s.Snapshot(ctx, ws, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	err = sn.ReadTree(ctx, "", func(p string, st core.Stat, r io.Reader) error {
		switch {
		case p == "":
		case st.IsDir():
			out[p] = fmt.Sprintf("d %v", st.Mode.Perm())
		case r == nil:
			out[p] = "l " + st.Target
		default:
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			out[p] = fmt.Sprintf("f %v %s", st.Mode.Perm(), b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// entry is one entry an import adds: a directory (content "/"), a
// symlink (content "->target") or a file.
type entry struct{ path, content string }

func runImport(t *testing.T, s *fsstore.Store, ws int64, replace bool, entries []entry) (core.Revision, error) {
	t.Helper()
	ctx := context.Background()
	im, err := s.NewImport(ctx, ws, replace, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	now := time.Unix(1700000000, 0)
	for _, e := range entries {
		if err := im.Parents(ctx, e.path); err != nil {
			return core.Revision{}, err
		}
		switch {
		case e.content == "/":
			err = im.Dir(ctx, e.path, 0o750, now)
		case strings.HasPrefix(e.content, "->"):
			err = im.Symlink(ctx, e.path, e.content[2:], now)
		default:
			err = im.File(ctx, e.path, 0o640, now, strings.NewReader(e.content))
		}
		if err != nil {
			return core.Revision{}, err
		}
	}
	return im.Commit(ctx, fsstore.CommitInfo{Message: "import"})
}

// The tree an import leaves: what the model says, whether it replaces
// or merges, into a workspace or a fork, over several stage batches.
func TestImportStaged(t *testing.T) {
	ctx := context.Background()
	defer fsstore.SetStageChunk(777)() // many ranges, of every table
	for _, tc := range []struct {
		name          string
		fork, replace bool
	}{
		{"merge", false, false},
		{"replace", false, true},
		{"merge into a fork", true, false},
		{"replace a fork", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := MustOpen(t)
			w, err := s.CreateWorkspace(ctx, "alice", "w")
			if err != nil {
				t.Fatal(err)
			}
			var b core.Batch
			b.Mkdir("a", 0o755).WriteFile("a/old", []byte("old a"), 0o644).WriteFile("b", []byte("file b"), 0o644)
			b.Mkdir("c", 0o755).WriteFile("c/inner", []byte("in c, long enough for chunks"), 0o644).WriteFile("keep", []byte("kept unless replaced"), 0o644)
			b.Add(core.Op{Kind: core.OpSymlink, Path: "link", Target: "a/old"})
			if _, err := s.Commit(ctx, w.ID, &b, fsstore.CommitInfo{}); err != nil {
				t.Fatal(err)
			}
			if tc.fork {
				if w, err = s.Fork(ctx, w.ID, core.Head, "f"); err != nil {
					t.Fatal(err)
				}
				var b core.Batch
				b.WriteFile("forked", []byte("only in the fork"), 0o644)
				if _, err := s.Commit(ctx, w.ID, &b, fsstore.CommitInfo{}); err != nil {
					t.Fatal(err)
				}
			}
			model := dumpTree(t, s, w.ID)
			if tc.replace {
				model = map[string]string{}
			}
			add := func(e entry) {
				switch {
				case e.content == "/":
					if !strings.HasPrefix(model[e.path], "d ") {
						for p := range model {
							if p == e.path || strings.HasPrefix(p, e.path+"/") {
								delete(model, p)
							}
						}
					}
					model[e.path] = "d -rwxr-x---"
				case strings.HasPrefix(e.content, "->"):
					for p := range model {
						if p == e.path || strings.HasPrefix(p, e.path+"/") {
							delete(model, p)
						}
					}
					model[e.path] = "l " + e.content[2:]
				default:
					for p := range model {
						if strings.HasPrefix(p, e.path+"/") {
							delete(model, p)
						}
					}
					model[e.path] = "f -rw-r----- " + e.content
				}
			}
			entries := []entry{
				{"a", "/"},            // an existing directory: kept, its mode set
				{"a/new", "new in a"}, // beside a/old
				{"b", "/"},            // a file becomes a directory
				{"b/x", "under b"},
				{"c", "now a file"}, // a directory becomes a file
				{"link", "->b/x"},   // a symlink replaced
				{"deep/er/still/f", "parents made on the way"},
			}
			for i := range 5000 { // several stage batches
				entries = append(entries, entry{fmt.Sprintf("many/d%02d/f%04d", i%37, i), fmt.Sprintf("file %d", i)})
			}
			entries = append(entries, entry{"many/d00/f0000", "written twice"})
			for _, e := range entries {
				for d := parent(e.path); d != ""; d = parent(d) {
					if _, ok := model[d]; !ok {
						model[d] = "d -rwxr-xr-x"
					}
				}
				add(e)
			}
			const before = 2 // created (or forked), then one commit
			rev, err := runImport(t, s, w.ID, tc.replace, entries)
			if err != nil {
				t.Fatal(err)
			}
			if rev.Rev != before+1 {
				t.Fatalf("import made revision %d, want %d (one revision)", rev.Rev, before+1)
			}
			got := dumpTree(t, s, w.ID)
			for p, want := range model {
				if got[p] != want {
					t.Errorf("%s: %q, want %q", p, got[p], want)
				}
			}
			for p := range got {
				if _, ok := model[p]; !ok {
					t.Errorf("%s: %q, not in the model", p, got[p])
				}
			}
			// The revision before is intact, and the diff between them is the import.
			cs, err := s.Diff(ctx, w.ID, before, rev.Rev)
			if err != nil || len(cs.Ops) < 5000 {
				t.Fatalf("diff of the import: %v, %d ops", err, len(cs.Ops))
			}
			rep, err := s.Check(ctx, fsstore.CheckOptions{AllRevisions: true})
			if err != nil || len(rep.Problems) > 0 {
				t.Fatalf("fsck after the import: %v %v", err, rep.Problems)
			}
		})
	}
}

func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// An import whose workspace moved meanwhile commits nothing (409), and an
// import cut short (closed, or its store closed as by a crash) leaves no
// stage behind.
func TestImportConflictAndCut(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := fsstore.New(dir)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	w, _ := s.CreateWorkspace(ctx, "alice", "w")
	workspaces := func() int {
		rep, err := s.Check(ctx, fsstore.CheckOptions{})
		if err != nil || len(rep.Problems) > 0 {
			t.Fatalf("fsck: %v %v", err, rep.Problems)
		}
		return rep.Workspaces
	}
	n := workspaces()
	im, err := s.NewImport(ctx, w.ID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		im.File(ctx, fmt.Sprintf("f%d", i), 0o644, time.Now(), strings.NewReader("x"))
	}
	var b core.Batch
	b.WriteFile("meanwhile", []byte("a write during the import"), 0o644)
	if _, err := s.Commit(ctx, w.ID, &b, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	if _, err := im.Commit(ctx, fsstore.CommitInfo{}); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("import over a moved workspace: %v, want a conflict", err)
	}
	if got := dumpTree(t, s, w.ID); len(got) != 1 {
		t.Fatalf("tree after the refused import: %v", got)
	}
	if got := workspaces(); got != n {
		t.Fatalf("%d workspaces after the refused import, want %d", got, n)
	}
	// Cut: the store closes under an import, as a crash would leave it.
	im, err = s.NewImport(ctx, w.ID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		im.File(ctx, fmt.Sprintf("g%d", i), 0o644, time.Now(), strings.NewReader("y"))
	}
	s.Close()
	s = fsstore.New(dir)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := workspaces(); got != n {
		t.Fatalf("%d workspaces after a reopen, want %d: the cut import's stage stayed", got, n)
	}
	if got := dumpTree(t, s, w.ID); len(got) != 1 {
		t.Fatalf("tree after the cut import: %v", got)
	}
}

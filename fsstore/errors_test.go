package fsstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// ---------------------------------------------------------------------------
// Shared black-box helpers (used by errors_test.go, file_test.go, crash_test.go).

// bbEntry is everything observable about one entry of a tree.
type bbEntry struct {
	Path   string
	Ino    uint64
	Mode   fs.FileMode
	UID    uint32
	GID    uint32
	Nlink  uint32
	Size   int64
	Mtime  int64
	Ctime  int64
	Target string
	Sum    [32]byte // sha256 of a regular file's bytes
}

// bbTree lists every entry of workspace ws at rev, with file contents hashed.
func bbTree(tb testing.TB, s *fsstore.Store, ws, rev int64) []bbEntry {
	tb.Helper()
	ctx := context.Background()
	sn, err := s.Snapshot(ctx, ws, rev)
	if err != nil {
		tb.Fatalf("snapshot %d@%d: %v", ws, rev, err)
	}
	var out []bbEntry
	err = sn.Walk(ctx, "", func(p string, st core.Stat) error {
		e := bbEntry{Path: p, Ino: st.Ino, Mode: st.Mode, UID: st.UID, GID: st.GID, Nlink: st.Nlink,
			Size: st.Size, Mtime: st.Mtime.UnixNano(), Ctime: st.Ctime.UnixNano(), Target: st.Target}
		if st.Mode.IsRegular() {
			data, err := sn.ReadFile(ctx, p)
			if err != nil {
				return fmt.Errorf("read %q: %w", p, err)
			}
			if int64(len(data)) != st.Size {
				return fmt.Errorf("read %q: %d bytes, stat size %d", p, len(data), st.Size)
			}
			e.Sum = sha256.Sum256(data)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		tb.Fatalf("walk %d@%d: %v", ws, rev, err)
	}
	return out
}

// bbOpenDB opens the store's database read-only, next to the open store.
func bbOpenDB(tb testing.TB, s *fsstore.Store) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.Dir, "store.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// bbCount runs a count query against the store's database.
func bbCount(tb testing.TB, db *sql.DB, query string, args ...any) int64 {
	tb.Helper()
	var n int64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return n
}

// bbRowCounts counts the rows of every table, and reads the inode counter.
func bbRowCounts(tb testing.TB, db *sql.DB) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, table := range []string{"workspaces", "revisions", "dentries", "inodes", "extents", "chunks"} {
		out[table] = bbCount(tb, db, "SELECT count(*) FROM "+table)
	}
	out["counter.ino"] = bbCount(tb, db, "SELECT value FROM counters WHERE name = 'ino'")
	out["chunks.bytes"] = bbCount(tb, db, "SELECT COALESCE(sum(size), 0) FROM chunks")
	return out
}

// bbState is the whole observable state of a store.
type bbState struct {
	Workspaces []core.Workspace
	Trees      map[int64][]bbEntry
	Logs       map[int64][]core.Revision
	Rows       map[string]int64
}

func bbCapture(tb testing.TB, s *fsstore.Store, db *sql.DB) bbState {
	tb.Helper()
	ctx := context.Background()
	wss, err := s.Workspaces(ctx, "")
	if err != nil {
		tb.Fatal(err)
	}
	st := bbState{Workspaces: wss, Trees: map[int64][]bbEntry{}, Logs: map[int64][]core.Revision{}, Rows: bbRowCounts(tb, db)}
	for _, w := range wss {
		st.Trees[w.ID] = bbTree(tb, s, w.ID, core.Head)
		if st.Logs[w.ID], err = s.Log(ctx, w.ID, 0); err != nil {
			tb.Fatal(err)
		}
	}
	return st
}

// bbSameState fails unless nothing observable changed between two captures.
func bbSameState(tb testing.TB, before, after bbState) {
	tb.Helper()
	if !reflect.DeepEqual(before.Workspaces, after.Workspaces) {
		tb.Errorf("workspaces changed:\nbefore %+v\nafter  %+v", before.Workspaces, after.Workspaces)
	}
	for id, tree := range before.Trees {
		if !reflect.DeepEqual(tree, after.Trees[id]) {
			tb.Errorf("tree of workspace %d changed:\nbefore %+v\nafter  %+v", id, tree, after.Trees[id])
		}
	}
	if !reflect.DeepEqual(before.Logs, after.Logs) {
		tb.Errorf("revision logs changed")
	}
	if !reflect.DeepEqual(before.Rows, after.Rows) {
		tb.Errorf("database rows changed:\nbefore %v\nafter  %v", before.Rows, after.Rows)
	}
}

// bbCheck runs the full consistency check and fails on any problem.
func bbCheck(tb testing.TB, s *fsstore.Store) {
	tb.Helper()
	rep, err := s.Check(context.Background(), fsstore.CheckOptions{AllRevisions: true, Hashes: true})
	if err != nil {
		tb.Fatalf("check: %v", err)
	}
	if len(rep.Problems) > 0 {
		tb.Fatalf("check found problems:\n%s", strings.Join(rep.Problems, "\n"))
	}
}

func bbCommit(tb testing.TB, s *fsstore.Store, ws int64, ops ...core.Op) core.Revision {
	tb.Helper()
	r, err := s.Commit(context.Background(), ws, &core.Batch{Ops: ops}, fsstore.CommitInfo{})
	if err != nil {
		tb.Fatalf("commit %v: %v", ops, err)
	}
	return r
}

func bbRead(tb testing.TB, s *fsstore.Store, ws, rev int64, p string) []byte {
	tb.Helper()
	sn, err := s.Snapshot(context.Background(), ws, rev)
	if err != nil {
		tb.Fatal(err)
	}
	data, err := sn.ReadFile(context.Background(), p)
	if err != nil {
		tb.Fatalf("read %q at %d: %v", p, rev, err)
	}
	return data
}

func bbHead(tb testing.TB, s *fsstore.Store, ws int64) int64 {
	tb.Helper()
	w, err := s.WorkspaceByID(context.Background(), ws)
	if err != nil {
		tb.Fatal(err)
	}
	return w.Head
}

// ---------------------------------------------------------------------------

// errFixture builds a small tree:
//
//	d/ d/f d/sub/ d/sub/g e/ file link->d abs->/etc hard (=d/f)
func errFixture(t *testing.T) (*fsstore.Store, core.Workspace) {
	t.Helper()
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	bbCommit(t, s, w.ID,
		core.Op{Kind: core.OpMkdir, Path: "d"},
		core.Op{Kind: core.OpCreate, Path: "d/f", Data: []byte("hello, a file of more than sixteen bytes")},
		core.Op{Kind: core.OpMkdir, Path: "d/sub"},
		core.Op{Kind: core.OpCreate, Path: "d/sub/g", Data: []byte("g")},
		core.Op{Kind: core.OpMkdir, Path: "e"},
		core.Op{Kind: core.OpCreate, Path: "file", Data: []byte("top")},
		core.Op{Kind: core.OpSymlink, Path: "link", Target: "d"},
		core.Op{Kind: core.OpSymlink, Path: "abs", Target: "/etc"},
		core.Op{Kind: core.OpLink, From: "d/f", Path: "hard"},
	)
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "second", Data: []byte("rev 3")})
	return s, w
}

func TestErrBatchOps(t *testing.T) {
	ctx := context.Background()
	s, w := errFixture(t)
	db := bbOpenDB(t, s)

	long := strings.Repeat("x", 256)
	var overlong strings.Builder
	for overlong.Len() <= core.MaxPathLen {
		overlong.WriteString(strings.Repeat("p", 200) + "/")
	}
	fresh := func(tag string) []byte { // data no chunk in the store holds yet
		return bytes.Repeat([]byte("fresh chunk data "+tag+" "), 7)
	}
	type O = core.Op
	cases := []struct {
		name string
		ops  []O
		want error
	}{
		// core.ErrNotFound
		{"delete missing", []O{{Kind: core.OpDelete, Path: "nope"}}, core.ErrNotFound},
		{"delete missing in dir", []O{{Kind: core.OpDelete, Path: "d/nope"}}, core.ErrNotFound},
		{"write missing", []O{{Kind: core.OpWrite, Path: "nope", Data: []byte("x")}}, core.ErrNotFound},
		{"truncate missing", []O{{Kind: core.OpTruncate, Path: "nope", Size: 1}}, core.ErrNotFound},
		{"chmod missing", []O{{Kind: core.OpChmod, Path: "nope", Mode: 0o600}}, core.ErrNotFound},
		{"chown missing", []O{{Kind: core.OpChown, Path: "d/nope", UID: 1}}, core.ErrNotFound},
		{"utimes missing", []O{{Kind: core.OpUtimes, Path: "nope", Mtime: 1}}, core.ErrNotFound},
		{"mkdir missing parent", []O{{Kind: core.OpMkdir, Path: "nope/x"}}, core.ErrNotFound},
		{"create missing parent", []O{{Kind: core.OpCreate, Path: "nope/x", Data: []byte("x")}}, core.ErrNotFound},
		{"create missing grandparent", []O{{Kind: core.OpCreate, Path: "d/nope/x/y", Data: []byte("x")}}, core.ErrNotFound},
		{"symlink missing parent", []O{{Kind: core.OpSymlink, Path: "nope/l", Target: "x"}}, core.ErrNotFound},
		{"rename missing source", []O{{Kind: core.OpRename, From: "nope", Path: "x"}}, core.ErrNotFound},
		{"rename into missing dir", []O{{Kind: core.OpRename, From: "file", Path: "nope/x"}}, core.ErrNotFound},
		{"link missing source", []O{{Kind: core.OpLink, From: "nope", Path: "x"}}, core.ErrNotFound},
		{"exchange missing target", []O{{Kind: core.OpRename, From: "file", Path: "nope", Exchange: true}}, core.ErrNotFound},

		// core.ErrExists
		{"mkdir existing dir", []O{{Kind: core.OpMkdir, Path: "d"}}, core.ErrExists},
		{"mkdir over file", []O{{Kind: core.OpMkdir, Path: "file"}}, core.ErrExists},
		{"mkdir over symlink", []O{{Kind: core.OpMkdir, Path: "link"}}, core.ErrExists},
		{"mkdir root", []O{{Kind: core.OpMkdir, Path: ""}}, core.ErrExists},
		{"mkdir dot", []O{{Kind: core.OpMkdir, Path: "./d/."}}, core.ErrExists},
		{"symlink over file", []O{{Kind: core.OpSymlink, Path: "file", Target: "x"}}, core.ErrExists},
		{"symlink over dir", []O{{Kind: core.OpSymlink, Path: "e", Target: "x"}}, core.ErrExists},
		{"link over file", []O{{Kind: core.OpLink, From: "file", Path: "d/f"}}, core.ErrExists},
		{"rename noreplace", []O{{Kind: core.OpRename, From: "file", Path: "d/f", NoReplace: true}}, core.ErrExists},
		{"create over symlink", []O{{Kind: core.OpCreate, Path: "link", Data: []byte("x")}}, core.ErrExists},

		// core.ErrNotDir
		{"create under file", []O{{Kind: core.OpCreate, Path: "file/x", Data: []byte("x")}}, core.ErrNotDir},
		{"mkdir under file", []O{{Kind: core.OpMkdir, Path: "file/x"}}, core.ErrNotDir},
		{"mkdir deep under file", []O{{Kind: core.OpMkdir, Path: "d/f/x/y"}}, core.ErrNotDir},
		{"delete under file", []O{{Kind: core.OpDelete, Path: "file/x"}}, core.ErrNotDir},
		{"write under file", []O{{Kind: core.OpWrite, Path: "file/x", Data: []byte("x")}}, core.ErrNotDir},
		{"rename under file", []O{{Kind: core.OpRename, From: "d/f", Path: "file/x"}}, core.ErrNotDir},
		{"rename from under file", []O{{Kind: core.OpRename, From: "file/x", Path: "y"}}, core.ErrNotDir},
		{"create through symlink", []O{{Kind: core.OpCreate, Path: "link/x", Data: []byte("x")}}, core.ErrNotDir},
		{"write through symlink", []O{{Kind: core.OpWrite, Path: "link/f", Data: []byte("x")}}, core.ErrNotDir},
		{"delete through symlink", []O{{Kind: core.OpDelete, Path: "link/f"}}, core.ErrNotDir},
		{"mkdir through symlink", []O{{Kind: core.OpMkdir, Path: "link/new"}}, core.ErrNotDir},
		{"mkdir through abs symlink", []O{{Kind: core.OpMkdir, Path: "abs/new"}}, core.ErrNotDir},
		{"chmod through symlink", []O{{Kind: core.OpChmod, Path: "link/sub", Mode: 0o700}}, core.ErrNotDir},
		{"delete_all through symlink", []O{{Kind: core.OpDeleteAll, Path: "link/sub"}}, core.ErrNotDir},
		{"rename dir over file", []O{{Kind: core.OpRename, From: "e", Path: "file"}}, core.ErrNotDir},
		{"rename dir over symlink", []O{{Kind: core.OpRename, From: "e", Path: "link"}}, core.ErrNotDir},

		// core.ErrIsDir
		{"create over dir", []O{{Kind: core.OpCreate, Path: "d", Data: []byte("x")}}, core.ErrIsDir},
		{"create over empty dir", []O{{Kind: core.OpCreate, Path: "e"}}, core.ErrIsDir},
		{"write dir", []O{{Kind: core.OpWrite, Path: "d", Data: []byte("x")}}, core.ErrIsDir},
		{"truncate dir", []O{{Kind: core.OpTruncate, Path: "e", Size: 0}}, core.ErrIsDir},
		{"truncate root", []O{{Kind: core.OpTruncate, Path: "", Size: 0}}, core.ErrIsDir},
		{"link dir", []O{{Kind: core.OpLink, From: "d", Path: "d2"}}, core.ErrIsDir},
		{"rename file over dir", []O{{Kind: core.OpRename, From: "file", Path: "e"}}, core.ErrIsDir},
		{"rename symlink over dir", []O{{Kind: core.OpRename, From: "link", Path: "e"}}, core.ErrIsDir},

		// core.ErrNotEmpty
		{"delete non-empty dir", []O{{Kind: core.OpDelete, Path: "d"}}, core.ErrNotEmpty},
		{"delete non-empty subdir", []O{{Kind: core.OpDelete, Path: "d/sub"}}, core.ErrNotEmpty},
		{"rename over non-empty dir", []O{{Kind: core.OpRename, From: "e", Path: "d"}}, core.ErrNotEmpty},
		{"rename parent over own child dir", []O{{Kind: core.OpRename, From: "d/sub", Path: "d"}}, core.ErrNotEmpty},

		// core.ErrInvalidPath
		{"dotdot escape", []O{{Kind: core.OpCreate, Path: "../x", Data: []byte("x")}}, core.ErrInvalidPath},
		{"nested dotdot escape", []O{{Kind: core.OpCreate, Path: "a/../../x", Data: []byte("x")}}, core.ErrInvalidPath},
		{"absolute dotdot escape", []O{{Kind: core.OpMkdir, Path: "/.."}}, core.ErrInvalidPath},
		{"NUL in path", []O{{Kind: core.OpCreate, Path: "a\x00b", Data: []byte("x")}}, core.ErrInvalidPath},
		{"NUL in dir", []O{{Kind: core.OpMkdir, Path: "d/\x00"}}, core.ErrInvalidPath},
		{"256-byte component", []O{{Kind: core.OpMkdir, Path: long}}, core.ErrInvalidPath},
		{"256-byte nested component", []O{{Kind: core.OpCreate, Path: "d/" + long, Data: []byte("x")}}, core.ErrInvalidPath},
		{"over-long path", []O{{Kind: core.OpCreate, Path: overlong.String() + "x"}}, core.ErrInvalidPath},
		{"rename from escape", []O{{Kind: core.OpRename, From: "../file", Path: "x"}}, core.ErrInvalidPath},
		{"rename to escape", []O{{Kind: core.OpRename, From: "file", Path: "../x"}}, core.ErrInvalidPath},
		{"link from NUL", []O{{Kind: core.OpLink, From: "fi\x00le", Path: "x"}}, core.ErrInvalidPath},
		{"delete escape", []O{{Kind: core.OpDelete, Path: "d/../../file"}}, core.ErrInvalidPath},
		{"symlink empty target", []O{{Kind: core.OpSymlink, Path: "l2", Target: ""}}, core.ErrInvalidPath},
		{"symlink NUL target", []O{{Kind: core.OpSymlink, Path: "l2", Target: "a\x00"}}, core.ErrInvalidPath},

		// core.ErrInvalidArgument
		{"rename dir into itself", []O{{Kind: core.OpRename, From: "d", Path: "d/sub/x"}}, core.ErrInvalidArgument},
		{"rename dir into own child", []O{{Kind: core.OpRename, From: "d", Path: "d/x"}}, core.ErrInvalidArgument},
		{"exchange dir with own child", []O{{Kind: core.OpRename, From: "d", Path: "d/sub", Exchange: true}}, core.ErrInvalidArgument},
		{"exchange dir with own parent", []O{{Kind: core.OpRename, From: "d/sub", Path: "d", Exchange: true}}, core.ErrInvalidArgument},
		{"rename root", []O{{Kind: core.OpRename, From: "", Path: "x"}}, core.ErrInvalidArgument},
		{"rename onto root", []O{{Kind: core.OpRename, From: "e", Path: "/"}}, core.ErrInvalidArgument},
		{"delete root", []O{{Kind: core.OpDelete, Path: ""}}, core.ErrInvalidArgument},
		{"negative truncate", []O{{Kind: core.OpTruncate, Path: "file", Size: -1}}, core.ErrInvalidArgument},
		{"negative write offset", []O{{Kind: core.OpWrite, Path: "file", Offset: -5, Data: []byte("x")}}, core.ErrInvalidArgument},
		{"write past max file size", []O{{Kind: core.OpWrite, Path: "file", Offset: core.MaxFileSize - 1, Data: []byte("xy")}}, core.ErrInvalidArgument},
		{"write offset overflow", []O{{Kind: core.OpWrite, Path: "file", Offset: math.MaxInt64 - 5, Data: []byte("0123456789abcdef")}}, core.ErrInvalidArgument},
		{"truncate past max file size", []O{{Kind: core.OpTruncate, Path: "file", Size: core.MaxFileSize + 1}}, core.ErrInvalidArgument},
		{"truncate to MaxInt64", []O{{Kind: core.OpTruncate, Path: "file", Size: math.MaxInt64}}, core.ErrInvalidArgument},
		{"content size negative", []O{{Kind: core.OpCreate, Path: "x", Content: &core.Content{Size: -1}}}, core.ErrInvalidArgument},
		{"content size past max", []O{{Kind: core.OpCreate, Path: "x", Content: &core.Content{Size: math.MaxInt64}}}, core.ErrInvalidArgument},
		{"content index overflow", []O{{Kind: core.OpWrite, Path: "file", Content: &core.Content{Chunks: []core.ChunkRef{{Index: 1 << 60, Len: 1}}}}}, core.ErrInvalidArgument},
		{"unknown op kind", []O{{Kind: "frobnicate", Path: "file"}}, core.ErrInvalidArgument},
		{"empty op kind", []O{{Path: "file"}}, core.ErrInvalidArgument},
		{"data and content", []O{{Kind: core.OpCreate, Path: "x", Data: []byte("x"), Content: &core.Content{}}}, core.ErrInvalidArgument},
		{"write symlink", []O{{Kind: core.OpWrite, Path: "link", Data: []byte("x")}}, core.ErrInvalidArgument},
		{"truncate symlink", []O{{Kind: core.OpTruncate, Path: "link", Size: 1}}, core.ErrInvalidArgument},
		{"content chunk too long", []O{{Kind: core.OpCreate, Path: "x", Content: &core.Content{Size: 100, Chunks: []core.ChunkRef{{Index: 0, Len: 100}}}}}, core.ErrInvalidArgument},
		{"content negative index", []O{{Kind: core.OpCreate, Path: "x", Content: &core.Content{Size: 1, Chunks: []core.ChunkRef{{Index: -1, Len: 1}}}}}, core.ErrInvalidArgument},

		// core.ErrMissingChunk
		{"content unknown chunk", []O{{Kind: core.OpCreate, Path: "x", Content: &core.Content{Size: 4, Chunks: []core.ChunkRef{{Index: 0, Hash: sha256.Sum256([]byte("nope")), Len: 4}}}}}, core.ErrMissingChunk},

		// A failure after valid ops leaves no trace of them.
		{"valid prefix then not found", []O{
			{Kind: core.OpMkdir, Path: "n"},
			{Kind: core.OpCreate, Path: "n/x", Data: fresh("a")},
			{Kind: core.OpDelete, Path: "file"},
			{Kind: core.OpRename, From: "d", Path: "d2"},
			{Kind: core.OpWrite, Path: "d2/f", Offset: 3, Data: fresh("b")},
			{Kind: core.OpTruncate, Path: "d2/sub/g", Size: 1000},
			{Kind: core.OpChmod, Path: "e", Mode: 0o700},
			{Kind: core.OpChown, Path: "hard", UID: 7, GID: 8},
			{Kind: core.OpUtimes, Path: "n", Mtime: 12345},
			{Kind: core.OpSymlink, Path: "n/l", Target: "../d2"},
			{Kind: core.OpLink, From: "d2/f", Path: "n/h"},
			{Kind: core.OpCreate, Path: "file/x", Data: []byte("x")}, // "file" is gone by now
		}, core.ErrNotFound},
		{"valid prefix then not empty", []O{
			{Kind: core.OpDeleteAll, Path: "d"},
			{Kind: core.OpMkdir, Path: "d"},
			{Kind: core.OpCreate, Path: "d/new", Data: fresh("c")},
			{Kind: core.OpDelete, Path: "d"},
		}, core.ErrNotEmpty},
		{"valid prefix then into itself", []O{
			{Kind: core.OpCreate, Path: "big", Data: bytes.Repeat(fresh("d"), 10)},
			{Kind: core.OpRename, From: "e", Path: "e2", NoReplace: true},
			{Kind: core.OpRename, From: "file", Path: "d/f", Exchange: true},
			{Kind: core.OpRename, From: "e2", Path: "e2/x"},
		}, core.ErrInvalidArgument},
		{"valid prefix then exists", []O{
			{Kind: core.OpDeleteAll, Path: ""},
			{Kind: core.OpCreate, Path: "d", Data: fresh("e")},
			{Kind: core.OpMkdir, Path: "d"},
		}, core.ErrExists},
		{"valid prefix then unknown kind", []O{
			{Kind: core.OpCreate, Path: "x", Data: fresh("f")},
			{Kind: core.OpDelete, Path: "d/sub/g"},
			{Kind: "explode", Path: "x"},
		}, core.ErrInvalidArgument},
		{"valid prefix then invalid path", []O{
			{Kind: core.OpCreate, Path: "x", Data: fresh("g")},
			{Kind: core.OpCreate, Path: "../x", Data: fresh("h")},
		}, core.ErrInvalidPath},
		{"valid prefix then negative truncate", []O{
			{Kind: core.OpTruncate, Path: "d/f", Size: 1},
			{Kind: core.OpTruncate, Path: "d/f", Size: -1},
		}, core.ErrInvalidArgument},
		{"valid prefix then is dir", []O{
			{Kind: core.OpDelete, Path: "d/sub/g"},
			{Kind: core.OpWrite, Path: "d/sub", Data: fresh("i")},
		}, core.ErrIsDir},
		{"valid prefix then symlink component", []O{
			{Kind: core.OpDeleteAll, Path: "d"},
			{Kind: core.OpSymlink, Path: "d", Target: "e"},
			{Kind: core.OpCreate, Path: "d/x", Data: fresh("j")},
		}, core.ErrNotDir},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := bbCapture(t, s, db)
			head := bbHead(t, s, w.ID)
			_, err := s.Commit(ctx, w.ID, &core.Batch{Ops: tc.ops}, fsstore.CommitInfo{Message: tc.name})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got error %v, want %v", err, tc.want)
			}
			var pe *core.PathError
			if !errors.As(err, &pe) {
				t.Errorf("error %v (%T) is not a *PathError", err, err)
			}
			if got := bbHead(t, s, w.ID); got != head {
				t.Errorf("head moved from %d to %d", head, got)
			}
			bbSameState(t, before, bbCapture(t, s, db))
		})
	}

	// Failures did not use up revision numbers, and the store is still healthy.
	head := bbHead(t, s, w.ID)
	r := bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "after", Data: []byte("ok")})
	if r.Rev != head+1 {
		t.Errorf("next revision %d, want %d", r.Rev, head+1)
	}
	bbCheck(t, s)

	// An empty batch is refused too.
	before := bbCapture(t, s, db)
	if _, err := s.Commit(ctx, w.ID, &core.Batch{}, fsstore.CommitInfo{}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("empty batch: %v, want core.ErrInvalidArgument", err)
	}
	bbSameState(t, before, bbCapture(t, s, db))
}

// TestErrValidPaths checks the lexical path rules on the accepting side.
func TestErrValidPaths(t *testing.T) {
	ctx := context.Background()
	s, w := errFixture(t)

	for in, want := range map[string]string{
		"a/../b": "b", "/a/./b/": "a/b", "a//b": "a/b", "": "", "/": "", ".": "", "a/b/../../c": "c",
		"..a": "..a", "a..": "a..", "...": "...", strings.Repeat("y", 255): strings.Repeat("y", 255),
	} {
		got, err := core.CleanPath(in)
		if err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../", "a/../..", "/../a", "x\x00", strings.Repeat("y", 256), strings.Repeat("a/", 2049)} {
		if got, err := core.CleanPath(in); !errors.Is(err, core.ErrInvalidPath) {
			t.Errorf("CleanPath(%q) = %q, %v; want core.ErrInvalidPath", in, got, err)
		}
	}
	// Exactly MaxPathLen bytes is fine, one more is not.
	exact := strings.Repeat(strings.Repeat("q", 255)+"/", 16)[:core.MaxPathLen]
	if _, err := core.CleanPath(exact); err != nil {
		t.Errorf("path of %d bytes: %v", len(exact), err)
	}
	if _, err := core.CleanPath(exact + "q"); !errors.Is(err, core.ErrInvalidPath) {
		t.Errorf("path of %d bytes: %v, want core.ErrInvalidPath", len(exact)+1, err)
	}

	// a/../b names b, even though a does not exist.
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "a/../b", Data: []byte("bee")})
	if got := bbRead(t, s, w.ID, core.Head, "b"); string(got) != "bee" {
		t.Errorf("b = %q", got)
	}
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Stat(ctx, "a"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("stat a: %v, want core.ErrNotFound", err)
	}
	if got, err := sn.ReadFile(ctx, "x/../d/./f"); err != nil || !strings.HasPrefix(string(got), "hello") {
		t.Errorf("read x/../d/./f: %q %v", got, err)
	}
	// A 255-byte name and a path of exactly MaxPathLen bytes are stored:
	// 15 directories of 255 bytes, one of 128 and a 127-byte leaf.
	name := strings.Repeat("n", 255)
	var ops []core.Op
	deep := ""
	for i := 0; i < 16; i++ {
		c := name
		if i == 15 {
			c = strings.Repeat("m", 128)
		}
		if deep == "" {
			deep = c
		} else {
			deep += "/" + c
		}
		ops = append(ops, core.Op{Kind: core.OpMkdir, Path: deep})
	}
	leaf := deep + "/" + strings.Repeat("z", 127)
	ops = append(ops, core.Op{Kind: core.OpCreate, Path: leaf, Data: []byte("deep")})
	bbCommit(t, s, w.ID, ops...)
	if len(leaf) != core.MaxPathLen {
		t.Fatalf("leaf path is %d bytes", len(leaf))
	}
	if got := bbRead(t, s, w.ID, core.Head, leaf); string(got) != "deep" {
		t.Errorf("deep leaf = %q", got)
	}
	bbCheck(t, s)
}

// TestErrReads covers the error classes of snapshot reads.
func TestErrReads(t *testing.T) {
	ctx := context.Background()
	s, w := errFixture(t)
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	stat := func(p string) func() error { return func() error { _, err := sn.Stat(ctx, p); return err } }
	readdir := func(p string) func() error { return func() error { _, err := sn.ReadDir(ctx, p); return err } }
	open := func(p string) func() error { return func() error { _, err := sn.Open(ctx, p); return err } }
	readfile := func(p string) func() error { return func() error { _, err := sn.ReadFile(ctx, p); return err } }
	readlink := func(p string) func() error { return func() error { _, err := sn.Readlink(ctx, p); return err } }
	walk := func(p string) func() error {
		return func() error { return sn.Walk(ctx, p, func(string, core.Stat) error { return nil }) }
	}
	cases := []struct {
		name string
		fn   func() error
		want error
	}{
		{"stat missing", stat("nope"), core.ErrNotFound},
		{"stat missing nested", stat("d/nope/x"), core.ErrNotFound},
		{"readdir missing", readdir("nope"), core.ErrNotFound},
		{"open missing", open("d/nope"), core.ErrNotFound},
		{"readlink missing", readlink("nope"), core.ErrNotFound},
		{"walk missing", walk("nope"), core.ErrNotFound},
		{"stat under file", stat("file/x"), core.ErrNotDir},
		{"stat under nested file", stat("d/f/x/y"), core.ErrNotDir},
		{"stat through symlink", stat("link/f"), core.ErrNotDir},
		{"stat through abs symlink", stat("abs/passwd"), core.ErrNotDir},
		{"open through symlink", open("link/f"), core.ErrNotDir},
		{"readdir file", readdir("file"), core.ErrNotDir},
		{"readdir symlink", readdir("link"), core.ErrNotDir},
		{"open dir", open("d"), core.ErrIsDir},
		{"readfile root", readfile(""), core.ErrIsDir},
		{"open symlink", open("link"), core.ErrInvalidArgument},
		{"readlink file", readlink("file"), core.ErrInvalidArgument},
		{"readlink dir", readlink("d"), core.ErrInvalidArgument},
		{"stat escape", stat("../x"), core.ErrInvalidPath},
		{"readdir NUL", readdir("d\x00"), core.ErrInvalidPath},
		{"open long name", open(strings.Repeat("o", 256)), core.ErrInvalidPath},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fn(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// The symlink itself is a symlink, never its target.
	st, err := sn.Stat(ctx, "link")
	if err != nil || st.Mode&fs.ModeSymlink == 0 || st.Target != "d" || st.IsDir() {
		t.Errorf("stat link: %+v %v", st, err)
	}
	if f, err := sn.Open(ctx, "file"); err != nil {
		t.Error(err)
	} else if _, err := f.ReadAt(make([]byte, 1), -1); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("ReadAt at -1: %v, want core.ErrInvalidArgument", err)
	}
}

// TestErrRevisions covers core.ErrUnknownRevision: Head (0) is fine, anything past
// the head or before 1 is not, and neither is a pruned revision.
func TestErrRevisions(t *testing.T) {
	ctx := context.Background()
	s, w := errFixture(t)
	db := bbOpenDB(t, s)
	for i := 0; i < 4; i++ {
		bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "file", Data: []byte(fmt.Sprint("v", i))})
	}
	head := bbHead(t, s, w.ID) // 7
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil || sn.Rev != head {
		t.Fatalf("snapshot at Head: rev %v, %v; want %d", sn, err, head)
	}
	if got := bbRead(t, s, w.ID, core.Head, "file"); string(got) != "v3" {
		t.Errorf("head file = %q", got)
	}
	if _, err := s.Prune(ctx, w.ID, fsstore.Policy{KeepLast: 3}); err != nil { // keeps head-2..head
		t.Fatal(err)
	}
	pruned := head - 3
	if got := bbRead(t, s, w.ID, head-2, "file"); string(got) != "v1" {
		t.Errorf("kept revision %d: file = %q", head-2, got)
	}

	cases := []struct {
		name string
		fn   func() error
	}{
		{"snapshot past head", func() error { _, err := s.Snapshot(ctx, w.ID, head+1); return err }},
		{"snapshot far past head", func() error { _, err := s.Snapshot(ctx, w.ID, 1<<40); return err }},
		{"snapshot negative", func() error { _, err := s.Snapshot(ctx, w.ID, -1); return err }},
		{"snapshot pruned", func() error { _, err := s.Snapshot(ctx, w.ID, pruned); return err }},
		{"snapshot pruned first", func() error { _, err := s.Snapshot(ctx, w.ID, 1); return err }},
		{"diff from pruned", func() error { _, err := s.Diff(ctx, w.ID, pruned, head); return err }},
		{"diff to future", func() error { _, err := s.Diff(ctx, w.ID, head, head+1); return err }},
		{"fork pruned", func() error { _, err := s.Fork(ctx, w.ID, pruned, "f1"); return err }},
		{"fork future", func() error { _, err := s.Fork(ctx, w.ID, head+1, "f2"); return err }},
		{"commit base pruned", func() error {
			_, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("x", []byte("x"), 0), fsstore.CommitInfo{Base: pruned})
			return err
		}},
		{"commit base future", func() error {
			_, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("x", []byte("x"), 0), fsstore.CommitInfo{Base: head + 5})
			return err
		}},
		{"restore pruned", func() error { _, err := s.Restore(ctx, w.ID, pruned, "", fsstore.CommitInfo{}); return err }},
		{"restore future", func() error { _, err := s.Restore(ctx, w.ID, head+1, "file", fsstore.CommitInfo{}); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := bbCapture(t, s, db)
			if err := tc.fn(); !errors.Is(err, core.ErrUnknownRevision) {
				t.Fatalf("got %v, want core.ErrUnknownRevision", err)
			}
			bbSameState(t, before, bbCapture(t, s, db))
		})
	}
}

// TestErrWorkspaces covers core.ErrWorkspaceNotFound, core.ErrWorkspaceExists and
// invalid workspace names.
func TestErrWorkspaces(t *testing.T) {
	ctx := context.Background()
	s, w := errFixture(t)
	db := bbOpenDB(t, s)
	other, err := s.CreateWorkspace(ctx, "t", "other")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := s.CreateWorkspace(ctx, "t", "gone")
	if err != nil {
		t.Fatal(err)
	}
	bbCommit(t, s, gone.ID, core.Op{Kind: core.OpCreate, Path: "x", Data: []byte("gone data")})
	goneSnap, err := s.Snapshot(ctx, gone.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorkspace(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	// A deleted workspace that a fork still reads through to keeps its row.
	parent, err := s.CreateWorkspace(ctx, "t", "parent")
	if err != nil {
		t.Fatal(err)
	}
	bbCommit(t, s, parent.ID, core.Op{Kind: core.OpCreate, Path: "p", Data: []byte("parent data")})
	child, err := s.Fork(ctx, parent.ID, core.Head, "child")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorkspace(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if got := bbRead(t, s, child.ID, core.Head, "p"); string(got) != "parent data" {
		t.Errorf("fork of deleted workspace reads %q", got)
	}
	const missing = 1 << 30
	batch := func() *core.Batch { return (&core.Batch{}).WriteFile("x", []byte("x"), 0) }

	notFound := []struct {
		name string
		fn   func() error
	}{
		{"snapshot missing id", func() error { _, err := s.Snapshot(ctx, missing, core.Head); return err }},
		{"by id missing", func() error { _, err := s.WorkspaceByID(ctx, missing); return err }},
		{"by name missing", func() error { _, err := s.Workspace(ctx, "t", "nope"); return err }},
		{"by name other tenant", func() error { _, err := s.Workspace(ctx, "u", "ws"); return err }},
		{"commit missing", func() error { _, err := s.Commit(ctx, missing, batch(), fsstore.CommitInfo{}); return err }},
		{"fork missing", func() error { _, err := s.Fork(ctx, missing, core.Head, "f"); return err }},
		{"delete missing", func() error { return s.DeleteWorkspace(ctx, missing) }},
		{"log missing", func() error { _, err := s.Log(ctx, missing, 0); return err }},
		{"prune missing", func() error { _, err := s.Prune(ctx, missing, fsstore.Policy{KeepLast: 1}); return err }},
		{"diff missing", func() error { _, err := s.Diff(ctx, missing, 1, 1); return err }},
		{"snapshot deleted", func() error { _, err := s.Snapshot(ctx, gone.ID, core.Head); return err }},
		{"by name deleted", func() error { _, err := s.Workspace(ctx, "t", "gone"); return err }},
		{"commit deleted", func() error { _, err := s.Commit(ctx, gone.ID, batch(), fsstore.CommitInfo{}); return err }},
		{"commit deleted with forks", func() error { _, err := s.Commit(ctx, parent.ID, batch(), fsstore.CommitInfo{}); return err }},
		{"snapshot deleted with forks", func() error { _, err := s.Snapshot(ctx, parent.ID, 1); return err }},
		{"fork deleted", func() error { _, err := s.Fork(ctx, gone.ID, core.Head, "f"); return err }},
		{"fork deleted with forks", func() error { _, err := s.Fork(ctx, parent.ID, core.Head, "f"); return err }},
		{"delete twice", func() error { return s.DeleteWorkspace(ctx, gone.ID) }},
		{"log deleted", func() error { _, err := s.Log(ctx, gone.ID, 0); return err }},
		{"apply deleted", func() error {
			_, err := s.Apply(ctx, gone.ID, &core.Changeset{Ops: batch().Ops}, fsstore.CommitInfo{})
			return err
		}},
	}
	for _, tc := range notFound {
		t.Run(tc.name, func(t *testing.T) {
			before := bbCapture(t, s, db)
			if err := tc.fn(); !errors.Is(err, core.ErrWorkspaceNotFound) {
				t.Fatalf("got %v, want core.ErrWorkspaceNotFound", err)
			}
			bbSameState(t, before, bbCapture(t, s, db))
		})
	}
	// A snapshot taken before the delete reads nothing more: the workspace
	// is gone for every reader, whatever view it holds.
	if got, err := goneSnap.ReadFile(ctx, "x"); !errors.Is(err, core.ErrWorkspaceNotFound) {
		t.Errorf("snapshot of deleted workspace: read %q, %v; want core.ErrWorkspaceNotFound", got, err)
	}

	exists := []struct {
		name string
		fn   func() error
	}{
		{"create duplicate", func() error { _, err := s.CreateWorkspace(ctx, "t", "ws"); return err }},
		{"create duplicate other", func() error { _, err := s.CreateWorkspace(ctx, "t", "other"); return err }},
		{"create duplicate of fork", func() error { _, err := s.CreateWorkspace(ctx, "t", "child"); return err }},
		{"fork onto existing", func() error { _, err := s.Fork(ctx, w.ID, core.Head, "other"); return err }},
		{"fork onto itself", func() error { _, err := s.Fork(ctx, w.ID, core.Head, "ws"); return err }},
	}
	for _, tc := range exists {
		t.Run(tc.name, func(t *testing.T) {
			before := bbCapture(t, s, db)
			if err := tc.fn(); !errors.Is(err, core.ErrWorkspaceExists) {
				t.Fatalf("got %v, want core.ErrWorkspaceExists", err)
			}
			bbSameState(t, before, bbCapture(t, s, db))
		})
	}

	for _, name := range []string{"", ".", "..", "a/b", "/a", "a b", "a\x00", "é", "a\n", "tab\t", strings.Repeat("n", 129), "x:y", "a*"} {
		t.Run(fmt.Sprintf("invalid name %q", name), func(t *testing.T) {
			before := bbCapture(t, s, db)
			if _, err := s.CreateWorkspace(ctx, "t", name); !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("create: got %v, want core.ErrInvalidArgument", err)
			}
			if _, err := s.Fork(ctx, w.ID, core.Head, name); !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("fork: got %v, want core.ErrInvalidArgument", err)
			}
			bbSameState(t, before, bbCapture(t, s, db))
		})
	}

	// The accepting side: a deleted name is free again, tenants have their
	// own namespaces, and 128-character names of every allowed character work.
	for _, c := range []struct{ tenant, name string }{
		{"t", "gone"}, {"t", "parent"}, {"u", "ws"}, {"u", "other"}, {"t", strings.Repeat("Az09._-", 19)[:128]}, {"t", "..."}, {"t", ".hidden"},
	} {
		nw, err := s.CreateWorkspace(ctx, c.tenant, c.name)
		if err != nil {
			t.Errorf("create %s/%s: %v", c.tenant, c.name, err)
			continue
		}
		if nw.Head != 1 {
			t.Errorf("new workspace %s/%s head %d", c.tenant, c.name, nw.Head)
		}
		if tree := bbTree(t, s, nw.ID, core.Head); len(tree) != 1 {
			t.Errorf("recreated workspace %s/%s is not empty: %+v", c.tenant, c.name, tree)
		}
	}
	if _, err := s.Fork(ctx, other.ID, core.Head, "u-fork"); err != nil {
		t.Error(err)
	}
	bbCheck(t, s)
}

// TestErrConflict checks optimistic concurrency with CommitInfo.Base.
func TestErrConflict(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	db := bbOpenDB(t, s)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	base := bbCommit(t, s, w.ID,
		core.Op{Kind: core.OpMkdir, Path: "d"},
		core.Op{Kind: core.OpCreate, Path: "d/x", Data: []byte("x0")},
		core.Op{Kind: core.OpCreate, Path: "d/y", Data: []byte("y0")},
		core.Op{Kind: core.OpCreate, Path: "d/z", Data: []byte("z0")},
		core.Op{Kind: core.OpCreate, Path: "top", Data: []byte("t0")},
	).Rev
	write := func(p, data string) *core.Batch { return (&core.Batch{}).WriteFile(p, []byte(data), 0) }
	commit := func(b *core.Batch, baseRev int64) (core.Revision, error) {
		return s.Commit(ctx, w.ID, b, fsstore.CommitInfo{Base: baseRev})
	}
	conflict := func(name string, b *core.Batch, baseRev int64, wantPaths ...string) {
		t.Helper()
		before := bbCapture(t, s, db)
		head := bbHead(t, s, w.ID)
		_, err := commit(b, baseRev)
		if !errors.Is(err, core.ErrConflict) {
			t.Errorf("%s: got %v, want core.ErrConflict", name, err)
			return
		}
		var ce *core.ConflictError
		if !errors.As(err, &ce) {
			t.Errorf("%s: %v is not a *ConflictError", name, err)
			return
		}
		if ce.Base != baseRev || ce.Head != head {
			t.Errorf("%s: conflict base %d head %d, want %d %d", name, ce.Base, ce.Head, baseRev, head)
		}
		for _, p := range wantPaths {
			if !slices.Contains(ce.Paths, p) {
				t.Errorf("%s: conflict paths %q lack %q", name, ce.Paths, p)
			}
		}
		bbSameState(t, before, bbCapture(t, s, db))
	}

	// Both writers start from base and write d/x: the first wins.
	if _, err := commit(write("d/x", "x1"), base); err != nil {
		t.Fatal(err)
	}
	conflict("same file", write("d/x", "x2"), base, "d/x")
	if got := bbRead(t, s, w.ID, core.Head, "d/x"); string(got) != "x1" {
		t.Errorf("d/x = %q, want the first writer's x1", got)
	}
	// A different file in the same directory does not conflict.
	if _, err := commit(write("d/y", "y1"), base); err != nil {
		t.Errorf("different file, same directory: %v", err)
	}
	// Neither does a new file in that directory, nor a file elsewhere.
	if _, err := commit(write("d/new", "n1"), base); err != nil {
		t.Errorf("new file, same directory: %v", err)
	}
	if _, err := commit(write("top", "t1"), base); err != nil {
		t.Errorf("other file: %v", err)
	}
	// Creating the same new name twice from the same base conflicts.
	conflict("same new file", write("d/new", "n2"), base, "d/new")
	// Operations naming a changed path in any role conflict.
	conflict("rename onto changed", (&core.Batch{}).Add(core.Op{Kind: core.OpRename, From: "d/z", Path: "d/x"}), base, "d/x")
	conflict("rename changed away", (&core.Batch{}).Add(core.Op{Kind: core.OpRename, From: "d/y", Path: "moved"}), base, "d/y")
	conflict("delete changed", (&core.Batch{}).Add(core.Op{Kind: core.OpDelete, Path: "top"}), base, "top")
	conflict("chmod changed", (&core.Batch{}).Add(core.Op{Kind: core.OpChmod, Path: "d/x", Mode: 0o600}), base, "d/x")
	conflict("delete_all parent of changed", (&core.Batch{}).Add(core.Op{Kind: core.OpDeleteAll, Path: "d"}), base, "d/x", "d/y", "d/new")
	conflict("mixed batch, last op conflicts", (&core.Batch{}).
		Add(core.Op{Kind: core.OpCreate, Path: "fresh", Data: []byte("f")}).
		Add(core.Op{Kind: core.OpWrite, Path: "d/x", Offset: 1, Data: []byte("!")}), base, "d/x")
	// Against the current head nothing conflicts, and an untouched path still commits on the old base.
	head := bbHead(t, s, w.ID)
	if _, err := commit(write("d/x", "x3"), head); err != nil {
		t.Errorf("commit on head: %v", err)
	}
	if _, err := commit(write("d/z", "z1"), base); err != nil {
		t.Errorf("untouched d/z on old base: %v", err)
	}
	// The revision after a conflict builds on; a commit against a stale base
	// that changes an intermediate revision's path conflicts too.
	mid := bbHead(t, s, w.ID)
	if _, err := commit(write("d/z", "z2"), mid); err != nil {
		t.Fatal(err)
	}
	conflict("changed after mid", write("d/z", "z3"), mid, "d/z")
	conflict("changed after base", write("d/z", "z3"), base, "d/z")

	// A hard-linked file changed under one name changed under all of them.
	hl := bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "h1", Data: []byte("h0")}, core.Op{Kind: core.OpLink, From: "h1", Path: "d/h2"}).Rev
	if _, err := commit((&core.Batch{}).Add(core.Op{Kind: core.OpWrite, Path: "d/h2", Data: []byte("H")}), hl); err != nil {
		t.Fatal(err)
	}
	conflict("hard link, written name", write("d/h2", "h2"), hl, "d/h2")
	conflict("hard link, other name", write("h1", "h1"), hl, "h1")
	conflict("hard link, chmod other name", (&core.Batch{}).Add(core.Op{Kind: core.OpChmod, Path: "h1", Mode: 0o600}), hl, "h1")
	if got := bbRead(t, s, w.ID, core.Head, "h1"); string(got) != "H0" {
		t.Errorf("h1 = %q, want the first writer's H0", got)
	}

	want := map[string]string{"d/x": "x3", "d/y": "y1", "d/z": "z2", "d/new": "n1", "top": "t1"}
	for p, v := range want {
		if got := bbRead(t, s, w.ID, core.Head, p); string(got) != v {
			t.Errorf("%s = %q, want %q", p, got, v)
		}
	}
	bbCheck(t, s)
}

// TestErrClosed: after Close, writes fail with core.ErrClosed and reads fail.
func TestErrClosed(t *testing.T) {
	ctx := context.Background()
	s := fsstore.New(t.TempDir())
	s.ChunkSize = 16
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	w, _ := s.CreateWorkspace(ctx, "t", "ws")
	bbCommit(t, s, w.ID, core.Op{Kind: core.OpCreate, Path: "f", Data: []byte("data")})
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	writes := map[string]func() error{
		"commit": func() error {
			_, err := s.Commit(ctx, w.ID, (&core.Batch{}).WriteFile("x", nil, 0), fsstore.CommitInfo{})
			return err
		},
		"apply": func() error {
			_, err := s.Apply(ctx, w.ID, &core.Changeset{Ops: (&core.Batch{}).WriteFile("x", nil, 0).Ops}, fsstore.CommitInfo{})
			return err
		},
		"put":    func() error { _, err := s.Put(ctx, bytes.NewReader([]byte("abc"))); return err },
		"gc":     func() error { _, err := s.GC(ctx); return err },
		"prune":  func() error { _, err := s.Prune(ctx, w.ID, fsstore.Policy{KeepLast: 1}); return err },
		"create": func() error { _, err := s.CreateWorkspace(ctx, "t", "x"); return err },
		"fork":   func() error { _, err := s.Fork(ctx, w.ID, core.Head, "x"); return err },
		"delete": func() error { return s.DeleteWorkspace(ctx, w.ID) },
	}
	for name, fn := range writes {
		if err := fn(); !errors.Is(err, core.ErrClosed) {
			t.Errorf("%s after close: %v, want core.ErrClosed", name, err)
		}
	}
	if _, err := sn.ReadFile(ctx, "f"); err == nil {
		t.Error("read after close succeeded")
	}
	if _, err := s.Snapshot(ctx, w.ID, core.Head); err == nil {
		t.Error("snapshot after close succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

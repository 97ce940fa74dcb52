package fsstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"computerd/core"
	"computerd/fsstore"
)

// treeEntry is what a ReadTree visit reported.
type treeEntry struct {
	path string
	mode string
	data string // contents of a regular file, target of a symlink
}

// randomTree commits a seeded random tree: nested directories (some
// empty), empty, small, multi-chunk and sparse files, symlinks.
func randomTree(t *testing.T, s *fsstore.Store, ws int64, seed int64) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewSource(seed))
	dirs := []string{""}
	b := &core.Batch{}
	for i := 0; i < 60; i++ {
		parent := dirs[rng.Intn(len(dirs))]
		d := path.Join(parent, fmt.Sprintf("d%02d", i))
		b.Mkdir(d, 0o755)
		dirs = append(dirs, d)
	}
	for i := 0; i < 400; i++ {
		p := path.Join(dirs[rng.Intn(len(dirs))], fmt.Sprintf("f%03d", i))
		switch k := rng.Intn(10); {
		case k == 0:
			b.WriteFile(p, nil, 0o644)
		case k == 1:
			b.Add(core.Op{Kind: core.OpSymlink, Path: p, Target: "../t" + fmt.Sprint(i)})
		case k == 2:
			// Sparse: data, a hole, data, a hole to the end.
			b.WriteFile(p, []byte("head"), 0o644)
			b.Add(core.Op{Kind: core.OpWrite, Path: p, Offset: 200, Data: []byte("middle")})
			b.Add(core.Op{Kind: core.OpTruncate, Path: p, Size: 500})
		case k == 3:
			data := make([]byte, 2000+rng.Intn(20000)) // hundreds of 16-byte chunks
			rng.Read(data)
			b.WriteFile(p, data, 0o600)
		default:
			b.WriteFile(p, []byte(strings.Repeat(fmt.Sprintf("file %d ", i), 1+rng.Intn(8))), 0o644)
		}
	}
	if _, err := s.Commit(ctx, ws, b, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
}

// expectTree is ReadTree's order built from ReadDir, Stat and ReadFile:
// parents first; in a directory, non-directories then subdirectories, each
// in name order.
func expectTree(t *testing.T, sn *fsstore.Snapshot, p string, skip map[string]bool) []treeEntry {
	t.Helper()
	ctx := context.Background()
	st, err := sn.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	out := []treeEntry{entryOf(t, sn, p, st)}
	if !st.IsDir() || skip[p] {
		return out
	}
	es, err := sn.ReadDir(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	var subdirs []string
	for _, e := range es {
		cp := path.Join(p, e.Name)
		if e.Type.IsDir() {
			subdirs = append(subdirs, cp)
			continue
		}
		st, err := sn.Stat(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entryOf(t, sn, cp, st))
	}
	for _, d := range subdirs {
		out = append(out, expectTree(t, sn, d, skip)...)
	}
	return out
}

func entryOf(t *testing.T, sn *fsstore.Snapshot, p string, st core.Stat) treeEntry {
	e := treeEntry{path: p, mode: st.Mode.String(), data: st.Target}
	if st.Mode.IsRegular() {
		data, err := sn.ReadFile(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		e.data = string(data)
	}
	return e
}

// readTree collects ReadTree's visits, reading every file whole (or, with
// partial, only its first bytes: the rest must be skipped cleanly).
func readTree(ctx context.Context, sn *fsstore.Snapshot, p string, skip map[string]bool, partial bool) ([]treeEntry, error) {
	var got []treeEntry
	err := sn.ReadTree(ctx, p, func(p string, st core.Stat, r io.Reader) error {
		e := treeEntry{path: p, mode: st.Mode.String(), data: st.Target}
		if r != nil {
			var buf bytes.Buffer
			var err error
			if partial {
				_, err = io.CopyN(&buf, r, 5)
				if errors.Is(err, io.EOF) {
					err = nil
				}
			} else {
				_, err = io.Copy(&buf, r)
			}
			if err != nil {
				return err
			}
			e.data = buf.String()
		}
		got = append(got, e)
		if st.IsDir() && skip[p] {
			return fsstore.SkipDir
		}
		return nil
	})
	return got, err
}

func compareTrees(t *testing.T, what string, got, want []treeEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: entry %d is %q %s (%d bytes), want %q %s (%d bytes)", what, i,
				got[i].path, got[i].mode, len(got[i].data), want[i].path, want[i].mode, len(want[i].data))
		}
	}
}

// TestReadTree checks ReadTree's order and contents against per-entry
// reads, whole and from a subdirectory, with skipped directories, with
// files read only in part, several at once (only one reads ahead, the
// others as before), on a fork (layers: the per-entry path), and that an
// error or a cancel stops it cleanly, leaving no goroutine behind.
func TestReadTree(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	randomTree(t, s, w.ID, 7)
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()

	want := expectTree(t, sn, "", nil)
	got, err := readTree(ctx, sn, "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "whole tree", got, want)

	// A subtree, and skipped directories (one near the top: its whole
	// subtree was being read ahead).
	var dirs []string
	for _, e := range want {
		if strings.HasPrefix(e.mode, "d") && e.path != "" {
			dirs = append(dirs, e.path)
		}
	}
	sub := dirs[0]
	got, err = readTree(ctx, sn, sub, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "subtree "+sub, got, expectTree(t, sn, sub, nil))
	skip := map[string]bool{dirs[0]: true, dirs[len(dirs)/2]: true, dirs[len(dirs)-1]: true}
	got, err = readTree(ctx, sn, "", skip, false)
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "with SkipDir", got, expectTree(t, sn, "", skip))

	// Files read in part: what a reader leaves is skipped.
	got, err = readTree(ctx, sn, "", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	partial := append([]treeEntry(nil), want...)
	for i, e := range partial {
		if strings.HasPrefix(e.mode, "-") && len(e.data) > 5 {
			partial[i].data = e.data[:5]
		}
	}
	compareTrees(t, "partial reads", got, partial)

	// Several at once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := readTree(ctx, sn, "", nil, false)
			if err == nil && len(got) != len(want) {
				err = fmt.Errorf("%d entries, want %d", len(got), len(want))
			}
			for j := range min(len(got), len(want)) {
				if err == nil && got[j] != want[j] {
					err = fmt.Errorf("entry %d is %q, want %q", j, got[j].path, want[j].path)
				}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	// A fork reads through its layers.
	f, err := s.Fork(ctx, w.ID, core.Head, "fork")
	if err != nil {
		t.Fatal(err)
	}
	fsn, err := s.Snapshot(ctx, f.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	got, err = readTree(ctx, fsn, "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "fork", got, want)

	// An error from fn ends the walk with that error.
	boom := errors.New("boom")
	n := 0
	err = sn.ReadTree(ctx, "", func(p string, st core.Stat, r io.Reader) error {
		if n++; n == len(want)/3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fn error: got %v", err)
	}
	// So does a cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	n = 0
	err = sn.ReadTree(cctx, "", func(p string, st core.Stat, r io.Reader) error {
		if n++; n == len(want)/2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: got %v", err)
	}
	// And the next walk reads ahead again, completely.
	got, err = readTree(ctx, sn, "", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "after cancel", got, want)

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines left, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// TestDriverBlobsAreFresh holds modernc.org/sqlite to what ReadTree's
// workers rely on: a blob scanned into sql.RawBytes is a slice of its own,
// untouched by the rows that follow.
func TestDriverBlobsAreFresh(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/t.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE b (id INTEGER PRIMARY KEY, data BLOB)`); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := db.Exec(`INSERT INTO b(data) VALUES (?)`, bytes.Repeat([]byte{byte(i)}, 100+i*1000)); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Query(`SELECT data FROM b ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var kept [][]byte
	for rows.Next() {
		var raw sql.RawBytes
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, raw)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i, b := range kept {
		if len(b) != 100+i*1000 || !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, len(b))) {
			t.Fatalf("blob %d changed after later rows: %d bytes, first %v", i, len(b), b[:min(4, len(b))])
		}
	}
}

package main

// The store suite measures package fsstore on a real store in a temporary
// directory, against bars and against plain SQLite (modernc, the driver the
// store uses) and the file system measured in the same run:
//
//  1. import: the source tree (-src) committed as one revision, the way an
//     importer would: walk, Uploader.Put each file streamed from disk,
//     mkdir/create/symlink ops, Flush, Commit. Reported as files/s (bar
//     >= 10000) and as time against a plain SQLite insert of the same files
//     into files(path TEXT PRIMARY KEY, data BLOB) in one transaction
//     (bar <= 2x). The reference database gets the same file-level settings
//     as the store (WAL, synchronous=FULL, 16 KiB pages, incremental
//     auto-vacuum, 64 MiB cache); both sides walk the tree and read the
//     files the same way, after one untimed read of the tree warms the
//     page cache. The two alternate, 3 runs each on fresh databases, and
//     each side's fastest run counts (the machine may be shared).
//  2. commit_1file: 1000 revisions of the imported workspace, each writing
//     one new ~100-byte file (after 20 untimed ones); p50 (bar < 1 ms) and
//     p99 against a single-row INSERT transaction on the reference database.
//  3. diff_adjacent: median time of Diff between adjacent revisions, each
//     writing 2 existing files and creating 1, in a 50k-file workspace
//     against a 1k-file one (each in its own store; trees of directories of
//     100 small files, committed 1000 files at a time); 50 pairs each, the
//     fastest of 5 runs per pair, the two workspaces measured alternately;
//     bar 50k/1k <= 2.
//  4. fork: Fork of the imported workspace at its head, median of 5 forks
//     (bar < 50 ms), and the store's growth per fork, counted as used pages
//     (page_count - freelist_count) * page_size on a separate read-only
//     connection, against the tree's bytes (bar < 5%).
//  5. readback: the imported revision read back whole through
//     Snapshot.ReadTree (each file's reader copied to io.Discard) in MB/s
//     (bar >= 500) against reading the same files from the file system
//     (walk, os.Open, io.Copy to io.Discard); an untimed pass of each, then
//     the two alternate, 3 runs each, and each side's fastest run counts.
//     Without bars, against the same file-system figure: readback_open
//     reads file by file instead (Snapshot.Walk, Open by path, WriteTo
//     io.Discard), readback_ino opens by inode number (what path resolution
//     costs), and readback_sqlite_scan/point read the reference table (one
//     scan; one query per file), which shows what the driver itself can
//     deliver.
//
// commit_1file also notes how many bytes of pages each commit adds, and
// fork_growth's note the page counts it is computed from.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"computerd/core"
	"computerd/fsstore"

	_ "modernc.org/sqlite"
)

func init() {
	register(Suite{Name: "store", Doc: "fsstore: import, one-file commits, diff, fork, read-back", Run: runStore})
}

const (
	smallCommits     = 1000
	smallWarmup      = 20
	smallSize        = 100
	diffSmallFiles   = 1_000
	diffLargeFiles   = 50_000
	diffPairs        = 50
	diffRepeats      = 5
	filesPerDir      = 100
	filesPerBuildRev = 1000
	forks            = 5
	importRuns       = 3
	readbackRuns     = 3
)

// The bars.
var (
	barImportRate  = Bar{"value", ">=", 10000} // files/s
	barImportRatio = Bar{"ratio", "<=", 2}     // store time / sqlite time
	barCommitP50   = Bar{"value", "<", 1}      // ms
	barDiffRatio   = Bar{"ratio", "<=", 2}     // 50k / 1k
	barForkTime    = Bar{"value", "<", 50}     // ms
	barForkGrowth  = Bar{"ratio", "<", 0.05}   // growth / tree bytes
	barReadback    = Bar{"value", ">=", 500}   // MB/s
)

func runStore(ctx context.Context, env *Env) error {
	env.Logf("store: reading %s once to warm the page cache", env.Src)
	tree, err := scanTree(ctx, env.Src)
	if err != nil {
		return fmt.Errorf("scan %s: %w", env.Src, err)
	}
	if tree.Files == 0 {
		return fmt.Errorf("%s holds no regular files", env.Src)
	}
	env.Logf("store: %d files, %d dirs, %d symlinks, %.1f MB", tree.Files, tree.Dirs, tree.Symlinks, float64(tree.Bytes)/1e6)

	// 1. Import: the reference and the store alternately, importRuns times
	// each on fresh databases, keeping each side's fastest run (the machine
	// may be shared) and the last databases for what follows.
	var (
		ref       *refDB
		s         *fsstore.Store
		w         core.Workspace
		refImport time.Duration
		imp       importTimes
		importRev core.Revision
	)
	defer func() {
		if ref != nil {
			ref.Close()
		}
		if s != nil {
			s.Close()
		}
	}()
	var refRuns, storeRuns []string
	for run := range importRuns {
		if ref != nil {
			if err := ref.Close(); err != nil {
				return err
			}
			if err := removeGlob(filepath.Join(env.Dir, "ref*.db*")); err != nil {
				return err
			}
		}
		if ref, err = openRefDB(ctx, filepath.Join(env.Dir, fmt.Sprintf("ref%d.db", run))); err != nil {
			return err
		}
		var d time.Duration
		err = env.phase(ctx, "ref_import", func(ctx context.Context) error {
			var err error
			d, err = ref.importTree(ctx, env.Src, tree)
			return err
		})
		if err != nil {
			return fmt.Errorf("reference import: %w", err)
		}
		env.Logf("store: sqlite reference import %d: %v", run, d)
		refRuns = append(refRuns, fmt.Sprintf("%.3f", secs(d)))
		if run == 0 || d < refImport {
			refImport = d
		}

		if s != nil {
			if err := s.Close(); err != nil {
				return err
			}
			if err := os.RemoveAll(s.Dir); err != nil {
				return err
			}
		}
		s = fsstore.New(filepath.Join(env.Dir, fmt.Sprintf("store%d", run)))
		if err := s.Open(ctx); err != nil {
			return err
		}
		if w, err = s.CreateWorkspace(ctx, "bench", "src"); err != nil {
			return err
		}
		var t importTimes
		err = env.phase(ctx, "import", func(ctx context.Context) error {
			var err error
			importRev, t, err = importStore(ctx, s, w.ID, env.Src, tree)
			return err
		})
		if errors.Is(err, errTimeout) {
			env.Emit(timedOut("store/import_files_per_s", "files/s", barImportRate, err))
			env.Emit(timedOut("store/import_time", "s", barImportRatio, err))
			return err // everything after needs the import
		} else if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		env.Logf("store: import %d: %v", run, t.total)
		storeRuns = append(storeRuns, fmt.Sprintf("%.3f", secs(t.total)))
		if run == 0 || t.total < imp.total {
			imp = t
		}
	}
	perSec := func(d time.Duration) float64 { return float64(tree.Files) / d.Seconds() }
	env.Emit(Result{Name: "store/import_files_per_s", Value: perSec(imp.total), Unit: "files/s",
		Note: fmt.Sprintf("%d files, %d dirs, %d symlinks, %.1f MB; best of %d: store [%s] s, sqlite [%s] s; best store run: walk+put %.3fs (of which final flush %.3fs), commit %.3fs, %.0f MB/s; sqlite %.0f MB/s",
			tree.Files, tree.Dirs, tree.Symlinks, float64(tree.Bytes)/1e6, importRuns, strings.Join(storeRuns, " "), strings.Join(refRuns, " "),
			secs(imp.put), secs(imp.flush), secs(imp.commit), mbps(tree.Bytes, imp.total), mbps(tree.Bytes, refImport))}.
		withRef("sqlite_insert_files_per_s", perSec(refImport)).check(barImportRate))
	env.Emit(Result{Name: "store/import_time", Value: secs(imp.total), Unit: "s"}.
		withRef("sqlite_insert_s", secs(refImport)).check(barImportRatio))

	// 2. One-file revisions.
	var refLat, lat []time.Duration
	err = env.phase(ctx, "ref_commit_1file", func(ctx context.Context) error {
		env.Logf("store: sqlite reference single-row transactions")
		var err error
		refLat, err = ref.smallInserts(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("reference inserts: %w", err)
	}
	dbPath := filepath.Join(s.Dir, "store.db")
	commitsBefore, err := usedBytes(ctx, dbPath)
	if err != nil {
		return err
	}
	err = env.phase(ctx, "commit_1file", func(ctx context.Context) error {
		env.Logf("store: one-file commits")
		var err error
		lat, err = smallCommitsStore(ctx, s, w.ID, tree.DirList)
		return err
	})
	commitsAfter, uerr := usedBytes(ctx, dbPath)
	if uerr != nil {
		return uerr
	}
	if errors.Is(err, errTimeout) {
		env.Emit(timedOut("store/commit_1file_p50", "ms", barCommitP50, err))
	} else if err != nil {
		return fmt.Errorf("one-file commits: %w", err)
	} else {
		env.Emit(Result{Name: "store/commit_1file_p50", Value: ms(percentile(lat, 50)), Unit: "ms",
			Note: fmt.Sprintf("%d commits of a %d-byte new file into the imported workspace; over 2 ms: %d (sqlite %d); max %.3f ms (sqlite %.3f ms); store grew %.0f bytes per commit",
				len(lat), smallSize, countOver(lat, 2*time.Millisecond), countOver(refLat, 2*time.Millisecond),
				ms(slices.Max(lat)), ms(slices.Max(refLat)), float64(commitsAfter-commitsBefore)/float64(smallCommits+smallWarmup))}.
			withRef("sqlite_1row_tx_p50_ms", ms(percentile(refLat, 50))).check(barCommitP50))
		env.Emit(Result{Name: "store/commit_1file_p99", Value: ms(percentile(lat, 99)), Unit: "ms"}.
			withRef("sqlite_1row_tx_p99_ms", ms(percentile(refLat, 99))).check(Bar{}))
	}

	// 3. Diff of adjacent revisions, large tree against small, measured
	// alternately so that drift in the machine's speed hits both alike.
	var dSmall, dLarge *diffWS
	defer func() {
		for _, d := range []*diffWS{dSmall, dLarge} {
			if d != nil {
				d.close()
			}
		}
	}()
	var tSmall, tLarge []time.Duration
	err = env.phase(ctx, "diff", func(ctx context.Context) error {
		var err error
		env.Logf("store: diff, building %d-file workspace", diffSmallFiles)
		if dSmall, err = newDiffWS(ctx, filepath.Join(env.Dir, "diff-small"), diffSmallFiles); err != nil {
			return err
		}
		env.Logf("store: diff, building %d-file workspace", diffLargeFiles)
		if dLarge, err = newDiffWS(ctx, filepath.Join(env.Dir, "diff-large"), diffLargeFiles); err != nil {
			return err
		}
		env.Logf("store: diff, measuring")
		tSmall, tLarge, err = measureDiffs(ctx, dSmall, dLarge)
		return err
	})
	if errors.Is(err, errTimeout) {
		env.Emit(timedOut("store/diff_adjacent_50k", "ms", barDiffRatio, err))
	} else if err != nil {
		return fmt.Errorf("diff: %w", err)
	} else {
		env.Emit(Result{Name: "store/diff_adjacent_50k", Value: ms(percentile(tLarge, 50)), Unit: "ms",
			Note: fmt.Sprintf("median over %d adjacent pairs (min of %d runs each) of ~%d-op diffs; p90 50k %.3f ms, 1k %.3f ms; 50k tree built in %.2fs (%d revisions), 1k in %.2fs",
				diffPairs, diffRepeats, dLarge.ops, ms(percentile(tLarge, 90)), ms(percentile(tSmall, 90)), secs(dLarge.build), dLarge.buildRevs, secs(dSmall.build))}.
			withRef("diff_adjacent_1k_ms", ms(percentile(tSmall, 50))).check(barDiffRatio))
	}
	for _, d := range []*diffWS{dSmall, dLarge} {
		if d != nil {
			if err := d.close(); err != nil {
				return err
			}
		}
	}
	dSmall, dLarge = nil, nil

	// 4. Fork.
	var forkTimes []time.Duration
	var before, after int64
	err = env.phase(ctx, "fork", func(ctx context.Context) error {
		env.Logf("store: fork")
		var err error
		if before, err = usedBytes(ctx, dbPath); err != nil {
			return err
		}
		for i := range forks {
			t0 := time.Now()
			f, err := s.Fork(ctx, w.ID, core.Head, fmt.Sprintf("fork%d", i))
			forkTimes = append(forkTimes, time.Since(t0))
			if err != nil {
				return err
			}
			if i == 0 {
				if err := checkFork(ctx, s, f.ID, tree); err != nil {
					return err
				}
			}
		}
		after, err = usedBytes(ctx, dbPath)
		return err
	})
	if errors.Is(err, errTimeout) {
		env.Emit(timedOut("store/fork_time", "ms", barForkTime, err))
		env.Emit(timedOut("store/fork_growth", "bytes", barForkGrowth, err))
	} else if err != nil {
		return fmt.Errorf("fork: %w", err)
	} else {
		growth := float64(after-before) / forks
		env.Emit(Result{Name: "store/fork_time", Value: ms(percentile(forkTimes, 50)), Unit: "ms",
			Note: fmt.Sprintf("median of %d forks of the imported workspace (max %.3f ms); ref is the import", forks, ms(slices.Max(forkTimes)))}.
			withRef("store_import_ms", ms(imp.total)).check(barForkTime))
		env.Emit(Result{Name: "store/fork_growth", Value: growth, Unit: "bytes",
			Note: fmt.Sprintf("used pages before %d bytes, after %d forks %d bytes; value is growth per fork, ratio growth / tree bytes", before, forks, after)}.
			withRef("tree_bytes", float64(tree.Bytes)).check(barForkGrowth))
	}

	// 5. Read-back: the file system and ReadTree alternately, an untimed
	// pass of each and then readbackRuns timed ones, keeping each side's
	// fastest run (as for the import).
	sn, err := s.Snapshot(ctx, w.ID, importRev.Rev)
	if err != nil {
		return err
	}
	var fsRead, storeRead time.Duration
	var fsRuns, treeRuns []string
	for pass := range readbackRuns + 1 {
		var d time.Duration
		err = env.phase(ctx, "ref_readback", func(ctx context.Context) (err error) {
			d, err = readFS(ctx, env.Src, tree)
			return err
		})
		if err != nil {
			return fmt.Errorf("file system read-back: %w", err)
		}
		env.Logf("store: read-back pass %d: fs %v", pass, d)
		// The untimed pass stands in only until a timed one comes (it is
		// all there is if the store's read-back times out at once).
		if pass == 0 || pass == 1 || d < fsRead {
			fsRead = d
		}
		if pass > 0 {
			fsRuns = append(fsRuns, fmt.Sprintf("%.3f", secs(d)))
		}
		err = env.phase(ctx, "readback", func(ctx context.Context) (err error) {
			d, err = readStoreTree(ctx, sn, tree)
			return err
		})
		if err != nil {
			break
		}
		env.Logf("store: read-back pass %d: store %v", pass, d)
		if pass > 0 {
			treeRuns = append(treeRuns, fmt.Sprintf("%.3f", secs(d)))
			if storeRead == 0 || d < storeRead {
				storeRead = d
			}
		}
	}
	fsRate := mbps(tree.Bytes, fsRead)
	if errors.Is(err, errTimeout) {
		env.Emit(timedOut("store/readback_mbps", "MB/s", barReadback, err).withRef("fs_read_mbps", fsRate))
	} else if err != nil {
		return fmt.Errorf("read-back: %w", err)
	} else {
		env.Emit(Result{Name: "store/readback_mbps", Value: mbps(tree.Bytes, storeRead), Unit: "MB/s",
			Note: fmt.Sprintf("Snapshot.ReadTree + io.Copy(io.Discard) of %d files; best of %d: store [%s] s, fs [%s] s",
				tree.Files, readbackRuns, strings.Join(treeRuns, " "), strings.Join(fsRuns, " "))}.
			withRef("fs_read_mbps", fsRate).check(barReadback))
	}
	// Plain SQLite reading the reference table: one scan, and one query per
	// file; no bars, they show what the driver itself can do.
	for _, m := range []struct {
		name, note string
		read       func(context.Context) (int64, time.Duration, error)
	}{
		{"store/readback_sqlite_scan_mbps", "reference table read by one SELECT path, data ORDER BY path; no bar", ref.readScan},
		{"store/readback_sqlite_point_mbps", "reference table read by one SELECT data WHERE path = ? per file; no bar", ref.readPoints},
	} {
		var n int64
		var d time.Duration
		for range 2 {
			if err = env.phase(ctx, "ref_sqlite_read", func(ctx context.Context) (err error) {
				n, d, err = m.read(ctx)
				return err
			}); err != nil {
				break
			}
		}
		if errors.Is(err, errTimeout) {
			env.Emit(timedOut(m.name, "MB/s", Bar{}, err).withRef("fs_read_mbps", fsRate))
		} else if err != nil {
			return fmt.Errorf("sqlite read-back: %w", err)
		} else {
			env.Emit(Result{Name: m.name, Value: mbps(n, d), Unit: "MB/s", Note: m.note}.
				withRef("fs_read_mbps", fsRate).check(Bar{}))
		}
	}
	if err := ref.Close(); err != nil {
		return err
	}

	// Per-file read-back through Walk and Open, without bars: by path, and
	// by inode number (the difference is what path resolution costs).
	for _, m := range []struct {
		name, note string
		open       func(p string, st core.Stat) (*fsstore.File, error)
	}{
		{"store/readback_open_mbps", "Walk + Open(path) + WriteTo(io.Discard) per file; no bar",
			func(p string, _ core.Stat) (*fsstore.File, error) { return sn.Open(ctx, p) }},
		{"store/readback_ino_mbps", "Walk + OpenIno(st.Ino) + WriteTo(io.Discard) per file: readback_open without path resolution; no bar",
			func(_ string, st core.Stat) (*fsstore.File, error) { return sn.OpenIno(ctx, st.Ino) }},
	} {
		var d time.Duration
		for pass := range 2 {
			err = env.phase(ctx, strings.TrimSuffix(strings.TrimPrefix(m.name, "store/"), "_mbps"), func(ctx context.Context) (err error) {
				d, err = readStore(ctx, sn, tree, m.open)
				return err
			})
			if err != nil {
				break
			}
			env.Logf("store: read-back pass %d: %s %v", pass, m.name, d)
		}
		if errors.Is(err, errTimeout) {
			env.Emit(timedOut(m.name, "MB/s", Bar{}, err).withRef("fs_read_mbps", fsRate))
		} else if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		} else {
			env.Emit(Result{Name: m.name, Value: mbps(tree.Bytes, d), Unit: "MB/s", Note: fmt.Sprintf("%s; %.3fs", m.note, secs(d))}.
				withRef("fs_read_mbps", fsRate).check(Bar{}))
		}
	}

	return s.Close()
}

// importTimes splits the store import's time.
type importTimes struct {
	total, put, flush, commit time.Duration
}

// importStore commits the tree at src as one revision of ws.
func importStore(ctx context.Context, s *fsstore.Store, ws int64, src string, tree treeStats) (core.Revision, importTimes, error) {
	var t importTimes
	t0 := time.Now()
	up := s.NewUploader()
	defer up.Close()
	b := &core.Batch{Ops: make([]core.Op, 0, tree.Files+tree.Dirs+tree.Symlinks)}
	err := walkSrc(ctx, src, func(rel, full string, fi fs.FileInfo) error {
		switch {
		case fi.IsDir():
			b.Add(core.Op{Kind: core.OpMkdir, Path: rel, Mode: fi.Mode().Perm()})
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			b.Add(core.Op{Kind: core.OpSymlink, Path: rel, Target: target, Mtime: fi.ModTime().UnixNano()})
		case fi.Mode().IsRegular():
			f, err := os.Open(full)
			if err != nil {
				return err
			}
			c, err := up.Put(ctx, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("put %s: %w", rel, err)
			}
			b.Add(core.Op{Kind: core.OpCreate, Path: rel, Mode: fi.Mode().Perm(), Content: c, Mtime: fi.ModTime().UnixNano()})
		}
		return nil
	})
	if err != nil {
		return core.Revision{}, t, err
	}
	t1 := time.Now()
	if err := up.Flush(ctx); err != nil {
		return core.Revision{}, t, err
	}
	t2 := time.Now()
	rev, err := s.Commit(ctx, ws, b, fsstore.CommitInfo{Message: "bench import"})
	if err != nil {
		return core.Revision{}, t, err
	}
	t3 := time.Now()
	// Uploader.Put flushes by itself every few MB, so "put" includes most flushing.
	t.put, t.flush, t.commit, t.total = t2.Sub(t0), t2.Sub(t1), t3.Sub(t2), t3.Sub(t0)
	return rev, t, nil
}

// smallContent is n bytes of text unique to i.
func smallContent(i int, n int) []byte {
	b := fmt.Appendf(nil, "small file %d, written by the computerd benchmark. ", i)
	for len(b) < n {
		b = append(b, "lorem ipsum dolor sit amet "...)
	}
	return b[:n]
}

// smallCommitsStore commits smallCommits one-file revisions into ws, new
// files spread over 20 of the tree's directories, and returns their latencies.
func smallCommitsStore(ctx context.Context, s *fsstore.Store, ws int64, dirs []string) ([]time.Duration, error) {
	var pick []string
	for i := 0; i < len(dirs) && len(pick) < 20; i += max(1, len(dirs)/20) {
		pick = append(pick, dirs[i])
	}
	if len(pick) == 0 {
		pick = []string{""}
	}
	lat := make([]time.Duration, 0, smallCommits)
	for i := -smallWarmup; i < smallCommits; i++ {
		p := fmt.Sprintf("bench_%05d.txt", i+smallWarmup)
		if d := pick[(i+smallWarmup)%len(pick)]; d != "" {
			p = d + "/" + p
		}
		b := (&core.Batch{}).WriteFile(p, smallContent(i, smallSize), 0o644)
		t0 := time.Now()
		if _, err := s.Commit(ctx, ws, b, fsstore.CommitInfo{}); err != nil {
			return nil, err
		}
		if i >= 0 {
			lat = append(lat, time.Since(t0))
		}
	}
	return lat, nil
}

// checkFork verifies that a fork reads through to its source.
func checkFork(ctx context.Context, s *fsstore.Store, ws int64, tree treeStats) error {
	sn, err := s.Snapshot(ctx, ws, core.Head)
	if err != nil {
		return err
	}
	st, err := sn.Stat(ctx, tree.FirstFile)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	if st.Size != tree.FirstSize {
		return fmt.Errorf("fork: %s has %d bytes, want %d", tree.FirstFile, st.Size, tree.FirstSize)
	}
	return nil
}

// usedBytes is the size of the live pages of the database at path, as
// seen by a new read-only connection (so it includes committed frames still
// in the WAL).
func usedBytes(ctx context.Context, path string) (int64, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var pages, free, size int64
	for _, q := range []struct {
		sql string
		dst *int64
	}{{"PRAGMA page_count", &pages}, {"PRAGMA freelist_count", &free}, {"PRAGMA page_size", &size}} {
		if err := db.QueryRowContext(ctx, q.sql).Scan(q.dst); err != nil {
			return 0, fmt.Errorf("%s: %w", q.sql, err)
		}
	}
	return (pages - free) * size, nil
}

// readFS reads every regular file of the tree from the file system.
func readFS(ctx context.Context, src string, tree treeStats) (time.Duration, error) {
	t0 := time.Now()
	var tally readTally
	err := walkSrc(ctx, src, func(rel, full string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() {
			return nil
		}
		n, err := readAll(full, io.Discard)
		tally.files++
		tally.bytes += n
		return err
	})
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	return d, tally.check("fs read", tree)
}

// readTally counts what a read-back pass read, to check it against the tree.
type readTally struct {
	files int
	bytes int64
}

// add counts one file read through r: all of it, exactly its size.
func (t *readTally) add(p string, r io.Reader, size int64) error {
	n, err := io.Copy(io.Discard, r) // uses the reader's WriteTo when it has one
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if n != size {
		return fmt.Errorf("read %s: %d bytes, size %d", p, n, size)
	}
	t.files++
	t.bytes += n
	return nil
}

// check compares the totals with the tree's.
func (t *readTally) check(what string, tree treeStats) error {
	if t.files != tree.Files || t.bytes != tree.Bytes {
		return fmt.Errorf("%s %d files, %d bytes; want %d, %d", what, t.files, t.bytes, tree.Files, tree.Bytes)
	}
	return nil
}

// readStore reads every regular file of a snapshot through Walk, opening
// each with open (by path or by inode number).
func readStore(ctx context.Context, sn *fsstore.Snapshot, tree treeStats, open func(p string, st core.Stat) (*fsstore.File, error)) (time.Duration, error) {
	t0 := time.Now()
	var tally readTally
	err := sn.Walk(ctx, "", func(p string, st core.Stat) error {
		if !st.Mode.IsRegular() {
			return nil
		}
		f, err := open(p, st)
		if err != nil {
			return fmt.Errorf("open %s: %w", p, err)
		}
		return tally.add(p, f, st.Size)
	})
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	return d, tally.check("store read", tree)
}

// readStoreTree reads every regular file of a snapshot through ReadTree.
func readStoreTree(ctx context.Context, sn *fsstore.Snapshot, tree treeStats) (time.Duration, error) {
	t0 := time.Now()
	var tally readTally
	err := sn.ReadTree(ctx, "", func(p string, st core.Stat, r io.Reader) error {
		if r == nil || !st.Mode.IsRegular() {
			return nil
		}
		return tally.add(p, r, st.Size)
	})
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	return d, tally.check("store read tree", tree)
}

// diffWS is a workspace of small files in a store of its own, with
// diffPairs+1 revisions at its end that each differ from the one before by
// a few file writes.
type diffWS struct {
	s         *fsstore.Store
	ws        int64
	revs      []int64 // the revisions to diff pairwise
	ops       int     // ops in the first pair's changeset
	build     time.Duration
	buildRevs int
}

// newDiffWS builds a diffWS of nfiles files in dir: directories of
// filesPerDir files, committed filesPerBuildRev files at a time.
func newDiffWS(ctx context.Context, dir string, nfiles int) (_ *diffWS, err error) {
	d := &diffWS{s: fsstore.New(dir)}
	if err := d.s.Open(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	w, err := d.s.CreateWorkspace(ctx, "bench", "diff")
	if err != nil {
		return nil, err
	}
	d.ws = w.ID
	ndirs := (nfiles + filesPerDir - 1) / filesPerDir
	filePath := func(d, f int) string { return fmt.Sprintf("d%04d/f%03d.txt", d, f) }
	t0 := time.Now()
	var b core.Batch
	commit := func() (core.Revision, error) {
		r, err := d.s.Commit(ctx, d.ws, &b, fsstore.CommitInfo{})
		b.Ops = b.Ops[:0]
		return r, err
	}
	n := 0
	for i := 0; i < ndirs; i++ {
		b.Mkdir(fmt.Sprintf("d%04d", i), 0o755)
		for f := 0; f < filesPerDir && n < nfiles; f++ {
			b.WriteFile(filePath(i, f), smallContent(n, 64+n%64), 0o644)
			n++
			if n%filesPerBuildRev == 0 || n == nfiles {
				r, err := commit()
				if err != nil {
					return nil, err
				}
				d.buildRevs++
				d.revs = []int64{r.Rev}
			}
		}
	}
	d.build = time.Since(t0)

	rng := rand.New(rand.NewPCG(1, uint64(nfiles)))
	for i := range diffPairs {
		for range 2 {
			k := rng.IntN(nfiles)
			b.WriteFile(filePath(k/filesPerDir, k%filesPerDir), smallContent(nfiles+i*10+k, 80), 0o644)
		}
		b.WriteFile(fmt.Sprintf("d%04d/new%03d.txt", rng.IntN(ndirs), i), smallContent(i, 50), 0o644)
		r, err := commit()
		if err != nil {
			return nil, err
		}
		d.revs = append(d.revs, r.Rev)
	}

	// Check that a diff sees the pair's changes (also warming up).
	cs, err := d.s.Diff(ctx, d.ws, d.revs[0], d.revs[1])
	if err != nil {
		return nil, err
	}
	d.ops = len(cs.Ops)
	var writes int
	for _, op := range cs.Ops {
		if op.Kind == core.OpCreate || op.Kind == core.OpWrite {
			writes++
		}
	}
	if writes < 2 { // the two writes may hit the same file
		return nil, fmt.Errorf("diff %d..%d: %d ops, want the pair's file changes: %v", d.revs[0], d.revs[1], len(cs.Ops), cs.Ops)
	}
	return d, nil
}

func (d *diffWS) close() error {
	err := d.s.Close()
	if rerr := os.RemoveAll(d.s.Dir); err == nil {
		err = rerr
	}
	return err
}

// measureDiffs times Diff of each adjacent pair of revisions of a and b,
// alternating between the two, and returns the fastest of diffRepeats runs
// of each pair.
func measureDiffs(ctx context.Context, a, b *diffWS) (ta, tb []time.Duration, err error) {
	ta, tb = make([]time.Duration, diffPairs), make([]time.Duration, diffPairs)
	for r := range diffRepeats {
		for i := range diffPairs {
			for _, x := range []struct {
				d *diffWS
				t []time.Duration
			}{{a, ta}, {b, tb}} {
				t0 := time.Now()
				if _, err := x.d.s.Diff(ctx, x.d.ws, x.d.revs[i], x.d.revs[i+1]); err != nil {
					return nil, nil, err
				}
				if dt := time.Since(t0); r == 0 || dt < x.t[i] {
					x.t[i] = dt
				}
			}
		}
	}
	return ta, tb, nil
}

// refDB is the plain SQLite reference: one table of whole files.
type refDB struct {
	db   *sql.DB
	conn *sql.Conn
}

func openRefDB(ctx context.Context, path string) (*refDB, error) {
	// The store's file-level settings (see fsstore.Store.Open), fixed the
	// way the store fixes them: in order, on a new file, before the first
	// table (the driver sorts _pragma parameters by name, which would put
	// journal_mode before page_size).
	init, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"PRAGMA page_size = 16384", "PRAGMA auto_vacuum = INCREMENTAL", "PRAGMA journal_mode = WAL"} {
		if _, err := init.ExecContext(ctx, p); err != nil {
			init.Close()
			return nil, fmt.Errorf("reference db: %s: %w", p, err)
		}
	}
	if err := init.Close(); err != nil {
		return nil, err
	}
	// FULL, as the store's commits: each reference transaction is on the
	// disk when it returns, as each commit of the store is.
	dsn := "file:" + path + "?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=cache_size(-65536)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	r := &refDB{db: db, conn: conn}
	var mode string
	var pageSize int
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
		r.Close()
		return nil, fmt.Errorf("reference db: journal mode %q (%v), want wal", mode, err)
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil || pageSize != 16384 {
		r.Close()
		return nil, fmt.Errorf("reference db: page size %d (%v), want 16384", pageSize, err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE files(path TEXT PRIMARY KEY, data BLOB)"); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *refDB) Close() error {
	if r.conn == nil {
		return nil
	}
	err := errors.Join(r.conn.Close(), r.db.Close())
	r.conn = nil
	return err
}

// importTree inserts every regular file of src in one transaction.
func (r *refDB) importTree(ctx context.Context, src string, tree treeStats) (d time.Duration, err error) {
	t0 := time.Now()
	tx, err := r.conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	ins, err := tx.PrepareContext(ctx, "INSERT INTO files(path, data) VALUES (?, ?)")
	if err != nil {
		return 0, err
	}
	defer ins.Close()
	var buf []byte
	files := 0
	err = walkSrc(ctx, src, func(rel, full string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(full)
		if err != nil {
			return err
		}
		buf = slices.Grow(buf[:0], int(fi.Size()))
		n, err := io.ReadFull(f, buf[:fi.Size()])
		f.Close()
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return err
		}
		files++
		_, err = ins.ExecContext(ctx, rel, buf[:n])
		return err
	})
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	d = time.Since(t0)
	if files != tree.Files {
		return 0, fmt.Errorf("inserted %d files, want %d", files, tree.Files)
	}
	return d, nil
}

// smallInserts times single-row insert transactions of a small file.
func (r *refDB) smallInserts(ctx context.Context) ([]time.Duration, error) {
	ins, err := r.conn.PrepareContext(ctx, "INSERT INTO files(path, data) VALUES (?, ?)")
	if err != nil {
		return nil, err
	}
	defer ins.Close()
	lat := make([]time.Duration, 0, smallCommits)
	for i := -smallWarmup; i < smallCommits; i++ {
		data := smallContent(i, smallSize)
		p := fmt.Sprintf("bench/small_%05d.txt", i+smallWarmup)
		t0 := time.Now()
		tx, err := r.conn.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		if _, err := tx.StmtContext(ctx, ins).ExecContext(ctx, p, data); err != nil {
			tx.Rollback()
			return nil, err
		}
		if err := tx.Commit(); err != nil {
			return nil, err
		}
		if i >= 0 {
			lat = append(lat, time.Since(t0))
		}
	}
	return lat, nil
}

// readScan reads every row of the reference table in one query.
func (r *refDB) readScan(ctx context.Context) (int64, time.Duration, error) {
	t0 := time.Now()
	rows, err := r.conn.QueryContext(ctx, "SELECT path, data FROM files ORDER BY path")
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var total int64
	var path, data sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&path, &data); err != nil {
			return 0, 0, err
		}
		total += int64(len(data))
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	return total, time.Since(t0), nil
}

// readPoints reads every row of the reference table with one query each,
// listing the paths first (untimed).
func (r *refDB) readPoints(ctx context.Context) (int64, time.Duration, error) {
	var paths []string
	rows, err := r.conn.QueryContext(ctx, "SELECT path FROM files ORDER BY path")
	if err != nil {
		return 0, 0, err
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return 0, 0, err
		}
		paths = append(paths, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	sel, err := r.conn.PrepareContext(ctx, "SELECT data FROM files WHERE path = ?")
	if err != nil {
		return 0, 0, err
	}
	defer sel.Close()
	t0 := time.Now()
	var total int64
	for _, p := range paths {
		rows, err := sel.QueryContext(ctx, p)
		if err != nil {
			return 0, 0, err
		}
		var data sql.RawBytes
		for rows.Next() {
			if err := rows.Scan(&data); err != nil {
				rows.Close()
				return 0, 0, err
			}
			total += int64(len(data))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, err
		}
	}
	return total, time.Since(t0), nil
}

// Package fsstore is computerd's durable workspace store: revisioned trees in
// one SQLite database, with paths (directory entries), metadata (inodes) and
// bytes (content-addressed chunks) kept apart.
//
// Every row of the tree tables is versioned: it is alive for revisions
// birth <= r < death of one workspace. A commit therefore writes only the
// rows it changes, any revision stays readable until pruned, and the keys
// that differ between two revisions are exactly the rows born between them,
// so a diff costs O(changes). A fork is a new workspace whose reads fall
// through to its source at the fork revision for every key it has not
// written itself: it copies nothing.
package fsstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"computerd/core"
	"computerd/internal/durable"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// DefaultChunkSize is the chunk size of new stores.
const DefaultChunkSize = 256 << 10

// forever is the death of a row that is still alive.
const forever int64 = 1<<63 - 1

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a data directory holding every workspace of a computerd.
type Store struct {
	// Dir is the data directory; the database is Dir/store.db.
	Dir string
	// ChunkSize applies only when the store is created (default DefaultChunkSize).
	ChunkSize int
	// NoFsync acknowledges commits before they are on the disk
	// (synchronous=NORMAL): a commit then survives a crash of the process
	// at any instant, but a power loss or a crash of the kernel loses the
	// commits of the last seconds, acknowledged or not, and hands their
	// revision numbers out again for other contents. Off (the default),
	// every commit is on the disk before it returns or anyone can read it
	// (synchronous=FULL: the WAL is fsynced at commit); see flushCommits.
	NoFsync bool
	// Readers is the size of the read connection pool (default 4).
	Readers int
	// LeaseTime is how long chunks written by Put stay safe from garbage
	// collection before a commit references them (default 1h). Chunks an
	// open Uploader wrote stay safe until it is closed, however long that
	// takes (see lease).
	LeaseTime time.Duration
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// Owner names the holder of the data directory's lock in the refusal
	// that a second Store gets, such as "computerd serve" (default: the
	// program's name and first argument).
	Owner string
	// Shared opens the data directory without taking its lock, beside the
	// Store that may hold it (a running computerd serve): for the offline
	// commands that only read, and for bearer tokens, which no Store keeps
	// in memory. A shared store refuses every other write (trees, chunks,
	// Prune, GC), since the leases that keep GC off chunks not yet
	// committed live in the holder's memory alone; nor does it checkpoint
	// the WAL, which would stall the holder's writer.
	Shared bool
	// OnCommit, if set, is called after each Commit or Apply of a workspace
	// (not CommitNodes, whose caller knows). It must not block.
	OnCommit func(ws int64, rev core.Revision)
	// OnDelete, if set, is called after DeleteWorkspace with the ids of
	// the execs whose records went with the workspace, so that what lives
	// outside the database (their output logs, the exec view's tree of
	// the workspace, a shelved overlay) goes too. It must not block.
	OnDelete func(ws int64, execs []string)
	// DefaultQuota is the quota of every tenant without one of its own
	// (SetQuota); the zero Quota sets no limit.
	DefaultQuota Quota

	chunkSize int64
	wdb       *sql.DB // one connection, for the single writer
	wconn     *sql.Conn
	wq        *queries // statements on wconn
	rdb       *sql.DB  // read-only pool
	rq        *queries
	cdb       *sql.DB       // the checkpointer's connection
	ckpt      *checkpointer // nil until the store is open
	adb       *sql.DB       // read-only connections of a ReadTree reading ahead
	aq        *queries      // statements on adb
	ahead     chan struct{} // held by the ReadTree reading ahead
	lock      *dirLock      // nil when Shared

	wmu    sync.Mutex      // the single writer
	lazy   bool            // the writer's commits skip the fsync (see flushCommits), guarded by wmu
	leases map[int64]lease // chunk id -> what keeps it from GC, guarded by wmu
	closed bool            // guarded by wmu
	shut   atomic.Bool     // closed, for readers (which do not take wmu)

	wsmu    sync.Mutex
	wsCache map[int64]*wsInfo // immutable parts of workspaces

	// pruned is odd while a transaction that deletes tree rows (Prune,
	// DeleteWorkspace) runs, and moves on when it ends: snapshots that see
	// it move check that their revision survived (see Snapshot.settle).
	pruned atomic.Int64
}

// New returns a store for dir; call Open before use.
func New(dir string) *Store { return &Store{Dir: dir} }

// Open takes the data directory's lock (unless Shared), creates the
// directory and database if needed, migrates the schema and prepares the
// connections. A data directory another Store holds is refused with an
// error wrapping core.ErrLocked that names the holder.
func (s *Store) Open(ctx context.Context) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	if !s.Shared {
		if s.Owner == "" {
			s.Owner = defaultOwner()
		}
		var err error
		if s.lock, err = lockDir(s.Dir, s.Owner); err != nil {
			return err
		}
	}
	if !s.Shared {
		s.releaseReserve()
	}
	if err := s.open(ctx); err != nil {
		s.lock.unlock()
		s.lock = nil
		return err
	}
	if !s.Shared {
		s.KeepReserve()
	}
	return nil
}

func (s *Store) open(ctx context.Context) error {
	if s.Readers <= 0 {
		s.Readers = 4
	}
	if s.LeaseTime <= 0 {
		s.LeaseTime = time.Hour
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	s.leases = map[int64]lease{}
	s.wsCache = map[int64]*wsInfo{}
	dbPath := filepath.Join(s.Dir, "store.db")
	sync := "FULL"
	if s.NoFsync {
		sync = "NORMAL"
	}
	s.lazy = s.NoFsync
	// Page caches: 32 MiB for the writer (b-tree pages of big imports), 8
	// MiB for each reader (reads stream chunks once). With the default four
	// readers and the two read-ahead connections below that bounds SQLite's
	// caches at 72 MiB of the daemon's RSS (the workload bench's peak went
	// from 258-275 MiB with 64 and 16 to 204 MiB; docs/STORE.md).
	dsn := func(cacheKiB int, extra string) string {
		return "file:" + dbPath + "?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)" +
			"&_pragma=synchronous(" + sync + ")&_pragma=foreign_keys(1)" +
			fmt.Sprintf("&_pragma=cache_size(-%d)", cacheKiB) + extra
	}
	if err := initFile(ctx, dbPath); err != nil {
		return err
	}
	var err error
	// The writer never checkpoints on its own: see checkpoint.go.
	if s.wdb, err = sql.Open("sqlite", dsn(32<<10, "&_pragma=wal_autocheckpoint(0)")); err != nil {
		return fmt.Errorf("open %s: %w", dbPath, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetConnMaxIdleTime(0)
	if s.wconn, err = s.wdb.Conn(ctx); err != nil {
		s.wdb.Close()
		return fmt.Errorf("open %s: %w", dbPath, err)
	}
	var mode string
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
		s.closeDBs()
		return fmt.Errorf("open %s: journal mode %q, want wal (%v)", dbPath, mode, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.closeDBs()
		return err
	}
	if err := s.loadSettings(ctx); err != nil {
		s.closeDBs()
		return err
	}
	if s.rdb, err = sql.Open("sqlite", dsn(8<<10, "&_pragma=query_only(1)")); err != nil {
		s.closeDBs()
		return fmt.Errorf("open %s: %w", dbPath, err)
	}
	s.rdb.SetMaxOpenConns(s.Readers)
	s.rdb.SetMaxIdleConns(s.Readers)
	// A ReadTree's workers stream chunks once: small page caches.
	if s.adb, err = sql.Open("sqlite", dsn(4<<10, "&_pragma=query_only(1)")); err != nil {
		s.closeDBs()
		return fmt.Errorf("open %s: %w", dbPath, err)
	}
	s.adb.SetMaxOpenConns(ReadAheadConns)
	s.adb.SetMaxIdleConns(ReadAheadConns)
	s.ahead = make(chan struct{}, 1)
	if s.wq, err = prepareQueries(ctx, s.wconn); err != nil {
		s.closeDBs()
		return err
	}
	if s.rq, err = prepareQueries(ctx, s.rdb); err != nil {
		s.closeDBs()
		return err
	}
	if s.aq, err = prepareQueries(ctx, s.adb); err != nil {
		s.closeDBs()
		return err
	}
	if s.cdb, err = sql.Open("sqlite", dsn(1<<10, "")); err != nil {
		s.closeDBs()
		return fmt.Errorf("open %s: %w", dbPath, err)
	}
	s.cdb.SetMaxOpenConns(1)
	if !s.Shared {
		s.ckpt = startCheckpointer(s.cdb)
		if err := s.dropStages(ctx); err != nil {
			s.ckpt.stop()
			s.closeDBs()
			return err
		}
	}
	// The names of the files just made (the database, its WAL, the data
	// directory itself) reach the disk before the first commit is
	// acknowledged; SQLite fsyncs the directory only for a WAL it creates.
	// The parent may be one the daemon's user cannot read (0711): its
	// name for the data directory was then made long before, by someone
	// else.
	if !s.NoFsync {
		if err := durable.SyncDir(s.Dir); err != nil {
			s.closeDBs()
			return err
		}
		if err := durable.SyncDir(filepath.Dir(s.Dir)); err != nil && !errors.Is(err, os.ErrPermission) {
			s.closeDBs()
			return err
		}
	}
	return nil
}

// initFile fixes the settings that only a new database file can take: 16 KiB
// pages (chunks are blobs of up to the chunk size, and bigger pages mean
// fewer writes per chunk) and incremental vacuum (so GC can give space back).
// On an existing file it changes nothing.
func initFile(ctx context.Context, dbPath string) error {
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(30000)")
	if err != nil {
		return fmt.Errorf("open %s: %w", dbPath, err)
	}
	defer db.Close()
	for _, p := range []string{"PRAGMA page_size = 16384", "PRAGMA auto_vacuum = INCREMENTAL", "PRAGMA journal_mode = WAL"} {
		if _, err := db.ExecContext(ctx, p); err != nil {
			return fmt.Errorf("open %s: %s: %w", dbPath, p, err)
		}
	}
	return nil
}

// Close waits for the writer to finish, closes the database and releases
// the data directory's lock.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.shut.Store(true)
	if s.ckpt != nil {
		s.ckpt.stop()
	}
	err := s.closeDBs()
	return errors.Join(err, s.lock.unlock())
}

func (s *Store) closeDBs() error {
	var errs []error
	for _, q := range []*queries{s.wq, s.rq, s.aq} {
		if q != nil {
			q.close()
		}
	}
	if s.wconn != nil {
		if !s.Shared {
			// Fold the WAL back into the database so a clean stop leaves one file.
			s.wconn.ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)")
		}
		errs = append(errs, s.wconn.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	for _, db := range []*sql.DB{s.rdb, s.adb, s.cdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// ChunkSizeBytes is the store's fixed chunk size.
func (s *Store) ChunkSizeBytes() int64 { return s.chunkSize }

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.wconn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_ns INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	names, err := migrations.ReadDir("migrations")
	if err != nil {
		return err
	}
	sort.Slice(names, func(i, j int) bool { return names[i].Name() < names[j].Name() })
	for _, e := range names {
		var version int
		if _, err := fmt.Sscanf(e.Name(), "%d_", &version); err != nil {
			return fmt.Errorf("migration %s: bad name", e.Name())
		}
		if err := s.applyMigration(ctx, version, e.Name()); err != nil {
			return fmt.Errorf("migration %s: %w", e.Name(), err)
		}
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, version int, name string) (err error) {
	body, err := migrations.ReadFile("migrations/" + name)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func() error {
		var n int
		if err := s.wconn.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations WHERE version = ?", version).Scan(&n); err != nil || n > 0 {
			return err
		}
		if _, err := s.wconn.ExecContext(ctx, string(body)); err != nil {
			return err
		}
		_, err := s.wconn.ExecContext(ctx, "INSERT INTO schema_migrations(version, applied_ns) VALUES (?, ?)", version, time.Now().UnixNano())
		return err
	})
}

func (s *Store) loadSettings(ctx context.Context) error {
	return s.inTx(ctx, func() error {
		err := s.wconn.QueryRowContext(ctx, "SELECT value FROM settings WHERE key = 'chunk_size'").Scan(&s.chunkSize)
		if errors.Is(err, sql.ErrNoRows) {
			s.chunkSize = int64(s.ChunkSize)
			if s.chunkSize <= 0 {
				s.chunkSize = DefaultChunkSize
			}
			_, err = s.wconn.ExecContext(ctx, "INSERT INTO settings(key, value) VALUES ('chunk_size', ?)", s.chunkSize)
		}
		return err
	})
}

// inTx runs fn inside BEGIN IMMEDIATE ... COMMIT on the writer connection,
// rolling back if fn fails. The caller holds wmu, or is Open.
func (s *Store) inTx(ctx context.Context, fn func() error) error {
	if err := s.flushCommits(ctx, true); err != nil {
		return err
	}
	return s.inTxSized(ctx, 0, fn)
}

// inTxChunks is inTx for a transaction that writes chunks only, about
// content bytes of them (which the checkpointer counts). Its commit is not
// flushed on its own: a chunk is acknowledged only by the commit that
// names it, whose flush carries the chunk's pages along (flushCommits).
func (s *Store) inTxChunks(ctx context.Context, content int64, fn func() error) error {
	s.flushCommits(ctx, false) // failing, it stays flushed: slower, no less safe
	return s.inTxSized(ctx, content, fn)
}

// inTxSized runs fn in a transaction, counting content bytes of chunks for
// the checkpointer, at whatever flushCommits last set.
func (s *Store) inTxSized(ctx context.Context, content int64, fn func() error) (err error) {
	if s.ckpt != nil && s.ckpt.finishing() {
		// Copy what the checkpointer left, so that this transaction
		// starts the WAL over (checkpointer.checkpoint).
		s.wconn.ExecContext(context.WithoutCancel(ctx), "PRAGMA wal_checkpoint(PASSIVE)")
	}
	if _, err := s.wconn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return s.noSpace(fmt.Errorf("begin: %w", err))
	}
	defer func() {
		if err != nil {
			// Roll back with a context that cannot be cancelled: a half-open
			// transaction would block every later writer.
			s.wconn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			err = s.noSpace(err)
		}
	}()
	if err = fn(); err != nil {
		return err
	}
	if _, err = s.wconn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if s.ckpt != nil && s.ckpt.committed(content) {
		// The checkpointer is far behind: copy the WAL here, as SQLite's
		// own automatic checkpoint would.
		s.wconn.ExecContext(context.WithoutCancel(ctx), "PRAGMA wal_checkpoint(PASSIVE)")
	}
	return nil
}

// write runs fn as one write transaction under the writer lock.
func (s *Store) write(ctx context.Context, fn func() error) error {
	if s.Shared {
		return errShared
	}
	return s.writeShared(ctx, fn)
}

// writeShared is write for what a shared store may write too (tokens).
func (s *Store) writeShared(ctx context.Context, fn func() error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return core.ErrClosed
	}
	return s.inTx(ctx, fn)
}

// flushCommits sets whether the writer's commits are on the disk when they
// return (flush, synchronous=FULL) or only in the WAL (synchronous=NORMAL);
// the caller holds wmu. Every commit is flushed but those of chunks alone:
// with FULL, SQLite fsyncs the WAL inside COMMIT, before the commit is
// visible to any reader, so nothing can hand out a revision, journal
// record or token that a power loss could take back. The WAL is one file
// written in order, so that fsync also carries every unflushed commit
// made before it (and a checkpoint, which fsyncs the WAL before copying
// it, at NORMAL too, never copies a page that is not on the disk). With
// NoFsync the writer stays at NORMAL.
func (s *Store) flushCommits(ctx context.Context, flush bool) error {
	if s.NoFsync || s.lazy == !flush {
		return nil
	}
	level := "NORMAL"
	if flush {
		level = "FULL"
	}
	// Not cancelled with the caller: a writer left at NORMAL would
	// acknowledge the next commit before it is on the disk.
	if _, err := s.wconn.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous = "+level); err != nil {
		return fmt.Errorf("set synchronous=%s: %w", level, err)
	}
	s.lazy = !flush
	return nil
}

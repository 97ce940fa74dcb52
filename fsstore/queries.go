package fsstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
)

// queries holds the prepared statements of one connection (the writer) or
// pool (the readers). "Latest" lookups return the newest row of a key born
// at or before a revision; the caller checks whether it is still alive.
type queries struct {
	dentryLatest, dirList                           *sql.Stmt
	inodeLatest                                     *sql.Stmt
	extentsRange, extentsData, chunkData, chunkInfo *sql.Stmt
	chunkByHash, chunkRun                           *sql.Stmt
	chunkReach                                      *sql.Stmt // see reach.go

	insDentry, killDentry, setDentry               *sql.Stmt
	insDentries                                    *sql.Stmt // entryBatch rows at once
	insInode, killInode, updInode, delInode        *sql.Stmt
	insInodes                                      *sql.Stmt // inodeBatch rows at once
	insExtent, killExtent, setExtent, delExtent    *sql.Stmt
	insExtents                                     *sql.Stmt // extentBatch rows at once
	extentRow                                      *sql.Stmt
	insChunk, nextIno, insRevision, setHead        *sql.Stmt
	nextID                                         *sql.Stmt // counters: ids that are never given out twice
	changedDentries, changedInodes, changedExtents *sql.Stmt
	dentriesOfIno                                  *sql.Stmt
	listStats, listDirs, listData                  *sql.Stmt

	all []*sql.Stmt

	db     preparer
	cached sync.Map // query -> *sql.Stmt, see QueryRowContext
}

// preparer is a connection or a pool: what queries prepares on.
type preparer interface {
	PrepareContext(context.Context, string) (*sql.Stmt, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// QueryRowContext runs query, a constant, as a statement prepared the
// first time it comes (rather than parsed again at every call, which
// cost an API write ~0.2 ms in the lookups of its token, workspace and
// quota); queries thus serves as a rowQuerier in place of its
// connection or pool.
func (q *queries) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st, ok := q.cached.Load(query); ok {
		return st.(*sql.Stmt).QueryRowContext(ctx, args...)
	}
	st, err := q.db.PrepareContext(ctx, query)
	if err != nil {
		return q.db.QueryRowContext(ctx, query, args...) // which fails the same way
	}
	if old, loaded := q.cached.LoadOrStore(query, st); loaded {
		st.Close()
		st = old.(*sql.Stmt)
	}
	return st.QueryRowContext(ctx, args...)
}

const inodeCols = "birth, death, mode, uid, gid, nlink, size, mtime_ns, ctime_ns, target, parent, name, rdev"

// inodeValues is the placeholder row for ws, ino and inodeCols.
const inodeValues = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

// inodeBatch is how many inode rows insInodes writes per statement.
const inodeBatch = 64

// entryBatch is how many entry rows insDentries writes per statement, of
// entryCols values each.
const (
	entryBatch = 64
	entryCols  = 7
)

// extentBatch is how many extent rows insExtents writes per statement, of
// extentCols values each.
const (
	extentBatch = 64
	extentCols  = 6
)

// chunkRunLen is how many consecutive chunk ids chunkRun reads at once.
const chunkRunLen = 256

func prepareQueries(ctx context.Context, p preparer) (*queries, error) {
	q := &queries{db: p}
	for _, st := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&q.dentryLatest, `SELECT ino, kind, birth, death FROM dentries WHERE ws = ? AND parent = ? AND name = ? AND birth <= ? ORDER BY birth DESC LIMIT 1`},
		{&q.dirList, `SELECT name, ino, kind FROM dentries WHERE ws = ?1 AND parent = ?2 AND birth <= ?3 AND death > ?3 ORDER BY name`},
		{&q.inodeLatest, `SELECT ` + inodeCols + ` FROM inodes WHERE ws = ? AND ino = ? AND birth <= ? ORDER BY birth DESC LIMIT 1`},
		{&q.extentsRange, `SELECT idx, chunk FROM extents WHERE ws = ?1 AND ino = ?2 AND idx >= ?3 AND idx < ?4 AND birth <= ?5 AND death > ?5 ORDER BY idx`},
		{&q.extentsData, `SELECT e.idx, c.data FROM extents e JOIN chunks c ON c.id = e.chunk WHERE e.ws = ?1 AND e.ino = ?2 AND e.idx >= ?3 AND e.idx < ?4 AND e.birth <= ?5 AND e.death > ?5 ORDER BY e.idx`},
		{&q.chunkData, `SELECT data FROM chunks WHERE id = ?`},
		{&q.chunkInfo, `SELECT hash, size FROM chunks WHERE id = ?`},
		{&q.chunkByHash, `SELECT id, size FROM chunks WHERE hash = ?`},
		{&q.chunkReach, reachQuery},
		{&q.chunkRun, fmt.Sprintf(`SELECT id, hash, size FROM chunks WHERE id >= ?1 AND id < ?1 + %d`, chunkRunLen)},

		{&q.insDentry, `INSERT INTO dentries(ws, parent, name, birth, death, ino, kind) VALUES (?, ?, ?, ?, ?, ?, ?)`},
		{&q.insDentries, `INSERT INTO dentries(ws, parent, name, birth, death, ino, kind) VALUES ` + strings.Repeat("(?, ?, ?, ?, ?, ?, ?), ", entryBatch-1) + "(?, ?, ?, ?, ?, ?, ?)"},
		{&q.killDentry, `UPDATE dentries SET death = ? WHERE ws = ? AND parent = ? AND name = ? AND birth = ?`},
		{&q.setDentry, `UPDATE dentries SET ino = ?, kind = ? WHERE ws = ? AND parent = ? AND name = ? AND birth = ?`},
		{&q.insInode, `INSERT INTO inodes(ws, ino, ` + inodeCols + `) VALUES ` + inodeValues},
		{&q.insInodes, `INSERT INTO inodes(ws, ino, ` + inodeCols + `) VALUES ` + strings.Repeat(inodeValues+", ", inodeBatch-1) + inodeValues},
		{&q.killInode, `UPDATE inodes SET death = ? WHERE ws = ? AND ino = ? AND birth = ?`},
		{&q.updInode, `UPDATE inodes SET mode = ?, uid = ?, gid = ?, nlink = ?, size = ?, mtime_ns = ?, ctime_ns = ?, target = ?, parent = ?, name = ?, rdev = ? WHERE ws = ? AND ino = ? AND birth = ?`},
		{&q.delInode, `DELETE FROM inodes WHERE ws = ? AND ino = ? AND birth = ?`},
		{&q.insExtent, `INSERT INTO extents(ws, ino, idx, birth, death, chunk) VALUES (?, ?, ?, ?, ?, ?)`},
		{&q.insExtents, `INSERT INTO extents(ws, ino, idx, birth, death, chunk) VALUES ` + strings.Repeat("(?, ?, ?, ?, ?, ?), ", extentBatch-1) + "(?, ?, ?, ?, ?, ?)"},
		{&q.killExtent, `UPDATE extents SET death = ? WHERE ws = ? AND ino = ? AND idx = ? AND birth = ?`},
		{&q.setExtent, `UPDATE extents SET chunk = ? WHERE ws = ? AND ino = ? AND idx = ? AND birth = ?`},
		{&q.delExtent, `DELETE FROM extents WHERE ws = ? AND ino = ? AND idx = ? AND birth = ?`},
		{&q.extentRow, `SELECT chunk, birth, death FROM extents WHERE ws = ? AND ino = ? AND idx = ? AND birth <= ? ORDER BY birth DESC LIMIT 1`},
		{&q.insChunk, `INSERT INTO chunks(hash, size, data) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING`},
		{&q.nextIno, `UPDATE counters SET value = value + ? WHERE name = 'ino' RETURNING value`},
		{&q.nextID, `UPDATE counters SET value = value + 1 WHERE name = ? RETURNING value`},
		{&q.insRevision, `INSERT INTO revisions(ws, rev, time_ns, source, tenant, exec_id, message, changes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`},
		{&q.setHead, `UPDATE workspaces SET head = ? WHERE id = ?`},
		{&q.changedDentries, `SELECT DISTINCT parent, name FROM dentries WHERE ws = ? AND birth > ? AND birth <= ?`},
		{&q.changedInodes, `SELECT DISTINCT ino FROM inodes WHERE ws = ? AND birth > ? AND birth <= ?`},
		{&q.dentriesOfIno, `SELECT parent, name FROM dentries WHERE ws = ?1 AND ino = ?2 AND birth <= ?3 AND death > ?3`},
		{&q.listStats, listStatsSQL},
		{&q.listDirs, listDirsSQL},
		{&q.listData, listDataSQL},
		{&q.changedExtents, `SELECT DISTINCT ino, idx FROM extents WHERE ws = ? AND birth > ? AND birth <= ? ORDER BY ino, idx`},
	} {
		var err error
		if *st.dst, err = p.PrepareContext(ctx, st.sql); err != nil {
			q.close()
			return nil, fmt.Errorf("prepare %q: %w", st.sql, err)
		}
		q.all = append(q.all, *st.dst)
	}
	return q, nil
}

func (q *queries) close() {
	for _, st := range q.all {
		st.Close()
	}
	q.cached.Range(func(_, st any) bool {
		st.(*sql.Stmt).Close()
		return true
	})
}

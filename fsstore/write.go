package fsstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	"computerd/core"
)

// wtx is one write transaction producing revision rev of workspace ws.
type wtx struct {
	s   *Store
	ctx context.Context
	q   *queries
	ws  *wsInfo
	rev int64 // the revision being written
	now int64
	v   *view // the tree as it stands inside this transaction

	dirNlink  map[uint64]int   // directories whose entries changed -> subdirectory count delta
	dirMtime  map[uint64]bool  // directories whose mtime must become now
	ctimes    map[uint64]int64 // inodes whose ctime is given (NodeOp.Ctime), not now
	changes   int
	committed []int64 // chunk ids the new rows reference, whose leases can end

	// Caches valid for this transaction only: they spare the queries that
	// big batches (imports) would otherwise repeat for every entry.
	inodes   map[uint64]*inode              // current version of inodes seen or written
	dirs     map[string]uint64              // clean path -> directory inode
	fresh    map[uint64]map[string]dirEntry // every entry of directories created here
	freshIno map[uint64]bool                // inodes created here
	freshExt map[extentKey]bool             // extent rows written for fresh inodes
	unsaved  map[uint64]bool                // fresh inodes whose row is written at finish
	newExt   []any                          // extent rows of fresh inodes not yet inserted, flat: see flushExtents
	newDent  []any                          // entry rows of fresh directories not yet inserted, flat: see flushEntries
	chunks   map[int64]chunkRow             // chunk rows read here (rows never change or go within a transaction)
	lastRun  int64                          // the id after the last chunk verified alone

	// A confined commit (CommitInfo.Confine) names by hash only chunks it
	// was sent or the tenant reaches: see reach.go.
	confine bool
	sent    *Uploader
	written map[core.Hash]bool  // chunks this transaction's own writes stored
	reached map[core.Hash]int64 // reach answers so far (0: not reachable)

	inoNext, inoEnd uint64 // reserved inode numbers [inoNext, inoEnd)
	holes           int64  // zeros opened past the ends of files (CommitInfo.Bound)
	storedBefore    int64  // the workspace's tenant's stored bytes when a metered transaction began
}

type extentKey struct {
	ino uint64
	idx int64
}

// chunkRow is what identifies a stored chunk.
type chunkRow struct {
	hash core.Hash
	size int64
}

// inode returns the current version of ino. If it is a directory, what
// lists it from the database (t.v.list) sees the entries setEntry holds back.
func (t *wtx) inode(ino uint64) (*inode, error) {
	in, err := t.cachedInode(ino)
	if err != nil {
		return nil, err
	}
	if err := t.listable(in); err != nil {
		return nil, err
	}
	return in, nil
}

func (t *wtx) cachedInode(ino uint64) (*inode, error) {
	if in, ok := t.inodes[ino]; ok {
		return in, nil
	}
	in, err := t.v.inode(ino)
	if err != nil {
		return nil, err
	}
	t.inodes[ino] = in
	return in, nil
}

// listable writes the entries setEntry holds back if in is a directory:
// every caller that reads a directory's entries from the database gets it
// through inode or resolve first. The parents that resolveDir finds for
// new entries do not count, so that an import's entries go in batches.
func (t *wtx) listable(in *inode) error {
	if len(t.newDent) > 0 && in.isDir() {
		return t.flushEntries()
	}
	return nil
}

// lookup finds name in directory parent.
func (t *wtx) lookup(parent uint64, name string) (uint64, int, error) {
	if m, ok := t.fresh[parent]; ok {
		if e, ok := m[name]; ok {
			return e.ino, e.kind, nil
		}
		return 0, 0, core.ErrNotFound
	}
	return t.v.lookup(parent, name)
}

// resolve walks a clean path without following symlinks.
func (t *wtx) resolve(p string) (*inode, error) {
	in, err := t.locate(p)
	if err != nil {
		return nil, err
	}
	if err := t.listable(in); err != nil {
		return nil, err
	}
	return in, nil
}

// locate is resolve without listable.
func (t *wtx) locate(p string) (*inode, error) {
	if p == "" {
		return t.cachedInode(t.v.root)
	}
	if ino, ok := t.dirs[p]; ok {
		return t.cachedInode(ino)
	}
	dir, name := parentName(p)
	parent, err := t.resolveDir(dir)
	if err != nil {
		return nil, err
	}
	ino, _, err := t.lookup(parent.ino, name)
	if err != nil {
		return nil, err
	}
	in, err := t.cachedInode(ino)
	if err != nil {
		return nil, err
	}
	if in.isDir() {
		t.dirs[p] = ino
	}
	return in, nil
}

// resolveDir resolves a clean path that must name a directory, to add or
// remove entries in it (see listable).
func (t *wtx) resolveDir(p string) (*inode, error) {
	in, err := t.locate(p)
	if err != nil {
		return nil, err
	}
	if !in.isDir() {
		return nil, core.ErrNotDir
	}
	return in, nil
}

// movedDirs forgets cached directory paths after a directory moved or went.
func (t *wtx) movedDirs() { clear(t.dirs) }

// begin starts a revision of ws for a commit described by info; the
// caller is inside s.write. A metered one notes what the tenant stores
// before it (see checkQuota).
func (s *Store) begin(ctx context.Context, wsID int64, info CommitInfo) (*wtx, error) {
	ws, err := s.workspaceInfo(ctx, s.wconn, wsID)
	if err != nil {
		return nil, err
	}
	var head int64
	var deleted sql.NullInt64
	if err := s.wconn.QueryRowContext(ctx, `SELECT head, deleted_ns FROM workspaces WHERE id = ?`, wsID).Scan(&head, &deleted); err != nil {
		return nil, fmt.Errorf("load workspace %d: %w", wsID, err)
	}
	if deleted.Valid {
		return nil, core.ErrWorkspaceNotFound
	}
	t := &wtx{s: s, ctx: ctx, q: s.wq, ws: ws, rev: head + 1, now: s.Now().UnixNano(),
		dirNlink: map[uint64]int{}, dirMtime: map[uint64]bool{}, ctimes: map[uint64]int64{},
		inodes: map[uint64]*inode{}, dirs: map[string]uint64{}, fresh: map[uint64]map[string]dirEntry{},
		freshIno: map[uint64]bool{}, freshExt: map[extentKey]bool{}, unsaved: map[uint64]bool{},
		chunks: map[int64]chunkRow{}, confine: info.Confine, sent: info.Sent}
	if t.v, err = s.newView(ctx, s.wq, s.wconn, ws, t.rev); err != nil {
		return nil, err
	}
	if info.Metered {
		if t.storedBefore, err = t.storedBytes(owner(ws.tenant)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// finish flushes directory updates and records the revision.
func (t *wtx) finish(info CommitInfo) error {
	if err := t.flushDirs(); err != nil {
		return err
	}
	if err := t.flushExtents(); err != nil {
		return err
	}
	if err := t.flushEntries(); err != nil {
		return err
	}
	if err := t.insertUnsaved(); err != nil {
		return err
	}
	if err := t.checkQuota(info, t.storedBefore); err != nil {
		return err
	}
	if info.Tenant == "" {
		info.Tenant = t.ws.tenant
	}
	if info.Source == "" {
		info.Source = core.SourceAPI
	}
	if _, err := t.q.insRevision.ExecContext(t.ctx, t.ws.id, t.rev, t.now, string(info.Source), info.Tenant, info.ExecID, info.Message, t.changes); err != nil {
		return fmt.Errorf("record revision: %w", err)
	}
	if info.Key != "" {
		if _, err := t.s.wconn.ExecContext(t.ctx, `UPDATE revisions SET idem_key = ? WHERE ws = ? AND rev = ?`, info.Key, t.ws.id, t.rev); err != nil {
			return fmt.Errorf("record revision key: %w", err)
		}
	}
	if _, err := t.q.setHead.ExecContext(t.ctx, t.rev, t.ws.id); err != nil {
		return fmt.Errorf("set head: %w", err)
	}
	if info.HomeRev != 0 {
		return t.s.setMirror(t.ctx, t.ws.id, Mirrored{Rev: t.rev, HomeRev: info.HomeRev, HomeWS: info.HomeWS})
	}
	return nil
}

// endLeases ends the timed GC leases of chunks that committed rows now
// reference (the Uploaders holding them keep their holds); the caller
// holds wmu.
func (t *wtx) endLeases() {
	for _, id := range t.committed {
		l, ok := t.s.leases[id]
		if !ok {
			continue
		}
		if l.holders == 0 {
			delete(t.s.leases, id)
			continue
		}
		l.until = time.Time{}
		t.s.leases[id] = l
	}
}

func (t *wtx) touchDir(ino uint64, subdirs int) {
	t.dirNlink[ino] += subdirs
	t.dirMtime[ino] = true
}

func (t *wtx) flushDirs() error {
	for ino := range t.dirMtime {
		in, err := t.inode(ino)
		if errors.Is(err, core.ErrNotFound) {
			continue // removed later in the same revision
		} else if err != nil {
			return err
		}
		in.nlink = uint32(int(in.nlink) + t.dirNlink[ino])
		if t.dirMtime[ino] {
			in.mtime = t.now
		}
		if err := t.putInode(in); err != nil {
			return err
		}
	}
	for ino, d := range t.dirNlink {
		if d == 0 || t.dirMtime[ino] {
			continue
		}
		in, err := t.inode(ino)
		if errors.Is(err, core.ErrNotFound) {
			continue
		} else if err != nil {
			return err
		}
		in.nlink = uint32(int(in.nlink) + d)
		if err := t.putInode(in); err != nil {
			return err
		}
	}
	clear(t.dirNlink)
	clear(t.dirMtime)
	return nil
}

// newIno allocates an inode number.
func (t *wtx) newIno() (uint64, error) {
	if t.inoNext == t.inoEnd {
		// Reserve a block; numbers left unused when the transaction ends are skipped.
		const block = 256
		var end uint64
		if err := t.q.nextIno.QueryRowContext(t.ctx, block).Scan(&end); err != nil {
			return 0, fmt.Errorf("allocate inode: %w", err)
		}
		t.inoNext, t.inoEnd = end-block+1, end+1
	}
	t.inoNext++
	return t.inoNext - 1, nil
}

// putInode writes in as the current version of its inode in this revision.
// Rows of inodes made in this revision are written once, at finish.
func (t *wtx) putInode(in *inode) error {
	in.ctime = t.now
	if c, ok := t.ctimes[in.ino]; ok {
		in.ctime = c
	}
	t.inodes[in.ino] = in
	ws := t.ws.id
	if t.freshIno[in.ino] {
		in.ws, in.birth, in.death = ws, t.rev, forever
		t.unsaved[in.ino] = true
		return nil
	}
	if in.ws == ws && in.birth == t.rev {
		target, name := in.columns()
		_, err := t.q.updInode.ExecContext(t.ctx, in.mode, in.uid, in.gid, in.nlink, in.size, in.mtime, in.ctime, target, in.parent, name, int64(in.rdev), ws, in.ino, in.birth)
		return wrapDB("update inode", err)
	}
	if in.ws == ws && in.death > t.rev {
		if _, err := t.q.killInode.ExecContext(t.ctx, t.rev, ws, in.ino, in.birth); err != nil {
			return wrapDB("update inode", err)
		}
	}
	in.ws, in.birth, in.death = ws, t.rev, forever
	return t.insertInode(in)
}

// insertUnsaved writes the rows of the inodes made in this revision, in
// inode order (appends to the primary key's b-tree) and inodeBatch rows per
// statement: an import makes one per file.
func (t *wtx) insertUnsaved() error {
	inos := slices.Sorted(maps.Keys(t.unsaved))
	args := make([]any, 0, inodeBatch*15)
	for len(inos) >= inodeBatch {
		args = args[:0]
		for _, ino := range inos[:inodeBatch] {
			in := t.inodes[ino]
			target, name := in.columns()
			args = append(args, in.ws, in.ino, in.birth, in.death, in.mode, in.uid, in.gid, in.nlink, in.size, in.mtime, in.ctime, target, in.parent, name, int64(in.rdev))
		}
		if _, err := t.q.insInodes.ExecContext(t.ctx, args...); err != nil {
			return wrapDB("insert inodes", err)
		}
		inos = inos[inodeBatch:]
	}
	for _, ino := range inos {
		if err := t.insertInode(t.inodes[ino]); err != nil {
			return err
		}
	}
	return nil
}

func (t *wtx) insertInode(in *inode) error {
	target, name := in.columns()
	_, err := t.q.insInode.ExecContext(t.ctx, in.ws, in.ino, in.birth, in.death, in.mode, in.uid, in.gid, in.nlink, in.size, in.mtime, in.ctime, target, in.parent, name, int64(in.rdev))
	return wrapDB("insert inode", err)
}

// columns returns the nullable columns of an inode row.
func (in *inode) columns() (target, name any) {
	if in.isSymlink() {
		target = []byte(in.target)
	}
	if in.parent != 0 {
		name = []byte(in.name)
	}
	return target, name
}

// moveLink follows the inode's recorded name when the entry (from, fromName)
// moves to (to, toName). Directories always know their one name; other
// inodes remember one of their names, or none after that one is unlinked
// while hard links remain.
func (in *inode) moveLink(from uint64, fromName string, to uint64, toName string) {
	if in.isDir() || in.parent == from && in.name == fromName {
		in.parent, in.name = to, toName
	}
}

// forgetLink clears the recorded name if it is (parent, name).
func (in *inode) forgetLink(parent uint64, name string) {
	if in.parent == parent && in.name == name {
		in.parent, in.name = 0, ""
	}
}

// dropInode ends an inode whose last link is gone, with its extents.
func (t *wtx) dropInode(in *inode) error {
	ws := t.ws.id
	delete(t.inodes, in.ino)
	delete(t.fresh, in.ino)
	if t.unsaved[in.ino] {
		delete(t.unsaved, in.ino)
		return t.dropExtents(in)
	}
	if t.ws.baseWS != 0 {
		// A fork's reads fall through to its base, where the inode may
		// live on: leave a row that says it is gone (nlink 0, see view.inode).
		in.nlink = 0
		if err := t.putInode(in); err != nil {
			return err
		}
		delete(t.inodes, in.ino)
		return t.dropExtents(in)
	}
	if in.ws != ws {
		return nil // only reachable through entries, which are gone
	}
	var err error
	if in.birth == t.rev {
		_, err = t.q.delInode.ExecContext(t.ctx, ws, in.ino, in.birth)
	} else {
		_, err = t.q.killInode.ExecContext(t.ctx, t.rev, ws, in.ino, in.birth)
	}
	if err != nil {
		return wrapDB("drop inode", err)
	}
	return t.dropExtents(in)
}

// dropExtents ends the extents a dropped inode has in this layer.
func (t *wtx) dropExtents(in *inode) error {
	ws := t.ws.id
	if !in.isReg() {
		return nil
	}
	if err := t.flushExtents(); err != nil {
		return err
	}
	rows, err := t.s.wconn.QueryContext(t.ctx, `SELECT idx, birth FROM extents WHERE ws = ?1 AND ino = ?2 AND death > ?3`, ws, in.ino, t.rev)
	if err != nil {
		return wrapDB("drop extents", err)
	}
	type key struct{ idx, birth int64 }
	var keys []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.idx, &k.birth); err != nil {
			rows.Close()
			return wrapDB("drop extents", err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	for _, k := range keys {
		if k.birth == t.rev {
			_, err = t.q.delExtent.ExecContext(t.ctx, ws, in.ino, k.idx, k.birth)
		} else {
			_, err = t.q.killExtent.ExecContext(t.ctx, t.rev, ws, in.ino, k.idx, k.birth)
		}
		if err != nil {
			return wrapDB("drop extents", err)
		}
	}
	return nil
}

// setEntry makes name in parent point to ino (0 removes it, as a tombstone).
func (t *wtx) setEntry(parent uint64, name string, ino uint64, kind int) error {
	ws := t.ws.id
	if m, ok := t.fresh[parent]; ok {
		// A directory made in this revision: its rows are all born here.
		_, had := m[name]
		if ino == 0 {
			delete(m, name)
		} else {
			m[name] = dirEntry{name: name, ino: ino, kind: kind}
		}
		if had {
			if err := t.flushEntries(); err != nil {
				return err
			}
		}
		if had && ino == 0 {
			// Nothing beneath a fresh directory needs shadowing: drop the
			// row, so that the name can be added again in this revision.
			_, err := t.s.wconn.ExecContext(t.ctx, `DELETE FROM dentries WHERE ws = ? AND parent = ? AND name = ? AND birth = ?`, ws, parent, name, t.rev)
			return wrapDB("set entry", err)
		}
		if had {
			_, err := t.q.setDentry.ExecContext(t.ctx, ino, kind, ws, parent, name, t.rev)
			return wrapDB("set entry", err)
		}
		if ino == 0 {
			return nil
		}
		t.newDent = append(t.newDent, ws, parent, name, t.rev, forever, ino, kind)
		if len(t.newDent) == entryBatch*entryCols {
			return t.flushEntries()
		}
		return nil
	}
	var cur uint64
	var curKind int
	var birth, death int64
	err := t.q.dentryLatest.QueryRowContext(t.ctx, ws, parent, name, t.rev).Scan(&cur, &curKind, &birth, &death)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return wrapDB("set entry", err)
	case birth == t.rev:
		_, err := t.q.setDentry.ExecContext(t.ctx, ino, kind, ws, parent, name, birth)
		return wrapDB("set entry", err)
	case death > t.rev:
		if _, err := t.q.killDentry.ExecContext(t.ctx, t.rev, ws, parent, name, birth); err != nil {
			return wrapDB("set entry", err)
		}
	}
	_, err = t.q.insDentry.ExecContext(t.ctx, ws, parent, name, t.rev, forever, ino, kind)
	return wrapDB("set entry", err)
}

// setExtent makes chunk the content of slot idx of ino (0: a hole).
func (t *wtx) setExtent(ino uint64, idx int64, chunk int64) error {
	ws := t.ws.id
	var cur sql.NullInt64
	var birth, death int64
	var val any
	if chunk != 0 {
		val = chunk
		t.committed = append(t.committed, chunk)
	}
	if t.freshIno[ino] {
		k := extentKey{ino, idx}
		if t.freshExt[k] {
			if err := t.flushExtents(); err != nil {
				return err
			}
			_, err := t.q.setExtent.ExecContext(t.ctx, val, ws, ino, idx, t.rev)
			return wrapDB("set extent", err)
		}
		t.freshExt[k] = true
		t.newExt = append(t.newExt, ws, ino, idx, t.rev, forever, val)
		if len(t.newExt) == extentBatch*extentCols {
			return t.flushExtents()
		}
		return nil
	}
	err := t.q.extentRow.QueryRowContext(t.ctx, ws, ino, idx, t.rev).Scan(&cur, &birth, &death)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return wrapDB("set extent", err)
	case birth == t.rev:
		_, err := t.q.setExtent.ExecContext(t.ctx, val, ws, ino, idx, birth)
		return wrapDB("set extent", err)
	case death > t.rev:
		if cur.Int64 == chunk {
			return nil
		}
		if _, err := t.q.killExtent.ExecContext(t.ctx, t.rev, ws, ino, idx, birth); err != nil {
			return wrapDB("set extent", err)
		}
	}
	_, err = t.q.insExtent.ExecContext(t.ctx, ws, ino, idx, t.rev, forever, val)
	return wrapDB("set extent", err)
}

// flushExtents inserts the extent rows of fresh inodes that setExtent
// holds back to write extentBatch at a time (an import writes one or more
// per file). Whatever reads extents inside the transaction calls it first.
func (t *wtx) flushExtents() error {
	rows := t.newExt
	for len(rows) >= extentBatch*extentCols {
		if _, err := t.q.insExtents.ExecContext(t.ctx, rows[:extentBatch*extentCols]...); err != nil {
			return wrapDB("set extent", err)
		}
		rows = rows[extentBatch*extentCols:]
	}
	for ; len(rows) > 0; rows = rows[extentCols:] {
		if _, err := t.q.insExtent.ExecContext(t.ctx, rows[:extentCols]...); err != nil {
			return wrapDB("set extent", err)
		}
	}
	clear(t.newExt)
	t.newExt = t.newExt[:0]
	return nil
}

// flushEntries inserts the entry rows of fresh directories that setEntry
// holds back to write entryBatch at a time (an import writes one per file);
// see listable.
func (t *wtx) flushEntries() error {
	rows := t.newDent
	for len(rows) >= entryBatch*entryCols {
		if _, err := t.q.insDentries.ExecContext(t.ctx, rows[:entryBatch*entryCols]...); err != nil {
			return wrapDB("set entry", err)
		}
		rows = rows[entryBatch*entryCols:]
	}
	for ; len(rows) > 0; rows = rows[entryCols:] {
		if _, err := t.q.insDentry.ExecContext(t.ctx, rows[:entryCols]...); err != nil {
			return wrapDB("set entry", err)
		}
	}
	clear(t.newDent)
	t.newDent = t.newDent[:0]
	return nil
}

// putChunk stores data as a chunk, or finds the copy already stored. A
// confined commit may name it by hash afterwards: its bytes came with the
// request, or from the tenant's own file.
func (t *wtx) putChunk(data []byte) (int64, error) {
	h := core.Hash(sha256.Sum256(data))
	id, _, err := putChunk(t.ctx, t.q, h, data)
	if err == nil && t.confine {
		if t.written == nil {
			t.written = map[core.Hash]bool{}
		}
		t.written[h] = true
	}
	return id, err
}

// putChunk stores a chunk and returns its row id, and whether the store
// did not hold it before.
func putChunk(ctx context.Context, q *queries, h core.Hash, data []byte) (int64, bool, error) {
	var id, size int64
	res, err := q.insChunk.ExecContext(ctx, h[:], len(data), data)
	if err != nil {
		return 0, false, wrapDB("store chunk", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		// Already there.
		err = q.chunkByHash.QueryRowContext(ctx, h[:]).Scan(&id, &size)
		return id, false, wrapDB("find chunk", err)
	}
	id, err = res.LastInsertId()
	return id, true, err
}

// chunkID finds the row of a chunk named in a changeset.
func (t *wtx) chunkID(ref core.ChunkRef) (int64, error) {
	if t.confine && !t.wasSent(ref.Hash) {
		id, err := t.reachedChunk(ref.Hash)
		if err != nil {
			return 0, err
		}
		ref.Row = id // checked below like any hint; its length may still be wrong
	}
	if ref.Row != 0 {
		// The row id (from Put or Diff) is only a hint: GC may have deleted
		// the row since, and SQLite may have given its id to another chunk.
		c, err := t.chunkRow(ref.Row)
		if err != nil {
			return 0, err
		}
		if c.hash == ref.Hash && c.size == int64(ref.Len) {
			return ref.Row, nil
		}
	}
	var id, size int64
	err := t.q.chunkByHash.QueryRowContext(t.ctx, ref.Hash[:]).Scan(&id, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("chunk %s: %w", ref.Hash, core.ErrMissingChunk)
	} else if err != nil {
		return 0, wrapDB("find chunk", err)
	}
	if size != int64(ref.Len) {
		return 0, fmt.Errorf("chunk %s: length %d, stored %d: %w", ref.Hash, ref.Len, size, core.ErrInvalidArgument)
	}
	return id, nil
}

// chunkRow reads chunk row id (the zero chunkRow if there is none), once
// per transaction. An Uploader gives consecutive ids to the chunks it
// writes, and a big commit names them in that order: once two ids in a row
// come, it reads the next chunkRunLen rows in one query.
func (t *wtx) chunkRow(id int64) (chunkRow, error) {
	if c, ok := t.chunks[id]; ok {
		return c, nil
	}
	if id != t.lastRun {
		t.lastRun = id + 1
		var c chunkRow
		var h []byte
		err := t.q.chunkInfo.QueryRowContext(t.ctx, id).Scan(&h, &c.size)
		if errors.Is(err, sql.ErrNoRows) {
			return chunkRow{}, nil
		} else if err != nil {
			return chunkRow{}, wrapDB("find chunk", err)
		}
		copy(c.hash[:], h)
		t.chunks[id] = c
		return c, nil
	}
	rows, err := t.q.chunkRun.QueryContext(t.ctx, id)
	if err != nil {
		return chunkRow{}, wrapDB("find chunk", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rid int64
		var h sql.RawBytes
		var c chunkRow
		if err := rows.Scan(&rid, &h, &c.size); err != nil {
			return chunkRow{}, wrapDB("find chunk", err)
		}
		copy(c.hash[:], h)
		t.chunks[rid] = c
	}
	if err := rows.Err(); err != nil {
		return chunkRow{}, wrapDB("find chunk", err)
	}
	return t.chunks[id], nil
}

// writeData writes data at off into a regular file, chunk by chunk.
func (t *wtx) writeData(in *inode, off int64, data []byte) error {
	cs := t.s.chunkSize
	t.opened(in, off)
	for len(data) > 0 {
		idx := off / cs
		start := idx * cs
		n := min(int64(len(data)), start+cs-off)
		var buf []byte
		if off > start || off+n < start+cs {
			// A partial chunk: merge with what is there.
			if err := t.flushExtents(); err != nil {
				return err
			}
			old, err := t.v.extentAt(in.ino, idx)
			if err != nil {
				return err
			}
			if old != 0 && start < in.size {
				if buf, err = t.v.chunkData(old); err != nil {
					return err
				}
				// bytes past the file's end are not content
				buf = buf[:min(int64(len(buf)), in.size-start)]
			}
		}
		end := off - start + n
		if int64(len(buf)) < end {
			buf = append(buf, make([]byte, end-int64(len(buf)))...)
		}
		copy(buf[off-start:end], data[:n])
		id, err := t.putChunk(buf)
		if err != nil {
			return err
		}
		if err := t.setExtent(in.ino, idx, id); err != nil {
			return err
		}
		in.size = max(in.size, off+n)
		off += n
		data = data[n:]
	}
	return nil
}

// writeContent places stored chunks into a regular file's slots.
func (t *wtx) writeContent(in *inode, c *core.Content) error {
	cs := t.s.chunkSize
	for _, ref := range c.Chunks {
		if ref.Index < 0 || ref.Index > core.MaxFileSize/cs || ref.Len <= 0 || int64(ref.Len) > cs {
			return fmt.Errorf("chunk %d length %d: %w", ref.Index, ref.Len, core.ErrInvalidArgument)
		}
		id, err := t.chunkID(ref)
		if err != nil {
			return err
		}
		if err := t.setExtent(in.ino, ref.Index, id); err != nil {
			return err
		}
		t.opened(in, ref.Index*cs)
		in.size = max(in.size, ref.Index*cs+int64(ref.Len))
	}
	return nil
}

// truncate sets a regular file's size, dropping or cutting chunks past it.
func (t *wtx) truncate(in *inode, size int64) error {
	if size < 0 {
		return core.ErrInvalidArgument
	}
	cs := t.s.chunkSize
	if size < in.size {
		if err := t.flushExtents(); err != nil {
			return err
		}
		keep := (size + cs - 1) / cs // slots [0, keep) survive
		es, err := t.v.extents(in.ino, keep, (in.size+cs-1)/cs+1)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := t.setExtent(in.ino, e.idx, 0); err != nil {
				return err
			}
		}
		if rem := size % cs; rem != 0 {
			idx := size / cs
			old, err := t.v.extentAt(in.ino, idx)
			if err != nil {
				return err
			}
			if old != 0 {
				data, err := t.v.chunkData(old)
				if err != nil {
					return err
				}
				if int64(len(data)) > rem {
					id, err := t.putChunk(data[:rem])
					if err != nil {
						return err
					}
					if err := t.setExtent(in.ino, idx, id); err != nil {
						return err
					}
				}
			}
		}
	}
	t.opened(in, size)
	in.size = size
	return nil
}

// opened counts the zeros between in's end and off, when a write or
// truncate is about to lengthen in to off.
func (t *wtx) opened(in *inode, off int64) {
	if off > in.size {
		t.holes += off - in.size
	}
}

// unlink removes the entry name (naming in) from directory parent.
func (t *wtx) unlink(parent uint64, name string, in *inode) error {
	if err := t.setEntry(parent, name, 0, 0); err != nil {
		return err
	}
	if in.isDir() {
		t.touchDir(parent, -1)
		t.movedDirs()
		return t.dropInode(in)
	}
	t.touchDir(parent, 0)
	in.nlink--
	if in.nlink == 0 {
		return t.dropInode(in)
	}
	in.forgetLink(parent, name)
	return t.putInode(in)
}

// newInode allocates an inode of the given type and permissions.
func (t *wtx) newInode(typ uint32, perm uint32) (*inode, error) {
	ino, err := t.newIno()
	if err != nil {
		return nil, err
	}
	in := &inode{ino: ino, mode: typ | perm, nlink: 1, mtime: t.now, ctime: t.now}
	if typ == syscall.S_IFDIR {
		in.nlink = 2
		t.fresh[ino] = map[string]dirEntry{}
	}
	t.freshIno[ino] = true
	return in, nil
}

func wrapDB(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

package fsstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"computerd/core"
)

// CheckReport lists what Check found wrong; an empty Problems means healthy.
type CheckReport struct {
	Workspaces int      `json:"workspaces"`
	Revisions  int      `json:"revisions_checked"`
	Entries    int      `json:"entries"`
	Chunks     int      `json:"chunks_verified"`
	Problems   []string `json:"problems"`
}

// CheckOptions selects how deep Check looks.
type CheckOptions struct {
	// AllRevisions walks every retained revision, not only each head.
	AllRevisions bool
	// Hashes re-reads every referenced chunk and verifies its hash.
	Hashes bool
}

// Check verifies the database (PRAGMA integrity_check and foreign keys),
// the tenants' usage (recounted from the rows), and the trees: every entry resolves to a live inode of its type, directories
// know their parent, link counts match the entries, no file has chunks past
// its end, only devices have device numbers (ones Linux can hold), and
// every chunk is no longer than the chunk size.
func (s *Store) Check(ctx context.Context, opt CheckOptions) (*CheckReport, error) {
	rep := &CheckReport{}
	problem := func(format string, args ...any) {
		if len(rep.Problems) < 100 {
			rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
		}
	}
	rows, err := s.rdb.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return nil, wrapDB("integrity check", err)
	}
	for rows.Next() {
		var msg string
		if err := rows.Scan(&msg); err != nil {
			rows.Close()
			return nil, err
		}
		if msg != "ok" {
			problem("integrity_check: %s", msg)
		}
	}
	rows.Close()
	fk, err := s.rdb.QueryContext(ctx, `PRAGMA foreign_key_check`)
	if err != nil {
		return nil, wrapDB("foreign key check", err)
	}
	for fk.Next() {
		var table string
		var rowid, parent, idx any
		fk.Scan(&table, &rowid, &parent, &idx)
		problem("foreign key: %s row %v references missing %v", table, rowid, parent)
	}
	fk.Close()
	var big int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM chunks WHERE size > ? OR size != length(data)`, s.chunkSize).Scan(&big); err != nil {
		return nil, wrapDB("check chunks", err)
	}
	if big > 0 {
		problem("%d chunks longer than the chunk size or than their data", big)
	}
	if err := s.checkUsage(ctx, problem); err != nil {
		return nil, err
	}
	wss, err := s.Workspaces(ctx, "")
	if err != nil {
		return nil, err
	}
	verified := map[int64]bool{}
	for _, w := range wss {
		rep.Workspaces++
		revs := []int64{w.Head}
		if opt.AllRevisions {
			log, err := s.Log(ctx, w.ID, 0)
			if errors.Is(err, core.ErrWorkspaceNotFound) {
				continue // deleted since the list was read
			} else if err != nil {
				return nil, err
			}
			revs = revs[:0]
			for _, r := range log {
				revs = append(revs, r.Rev)
			}
		}
		for _, rev := range revs {
			err := s.checkTree(ctx, w, rev, rep, problem, opt.Hashes, verified)
			if errors.Is(err, core.ErrWorkspaceNotFound) || errors.Is(err, core.ErrUnknownRevision) {
				// Deleted or pruned since the list was read (a store in
				// use: an exec's draft goes when it ends).
				continue
			}
			if err != nil {
				return nil, err
			}
			rep.Revisions++
		}
	}
	return rep, nil
}

func (s *Store) checkTree(ctx context.Context, w core.Workspace, rev int64, rep *CheckReport, problem func(string, ...any), hashes bool, verified map[int64]bool) error {
	sn, err := s.Snapshot(ctx, w.ID, rev)
	if err != nil {
		return err
	}
	v, err := sn.view(ctx)
	if err != nil {
		return err
	}
	root, err := v.inode(v.root)
	if err != nil {
		problem("%s@%d: root: %v", w.Name, rev, err)
		return nil
	}
	links := map[uint64]uint32{}
	inodes := map[uint64]*inode{}
	var walkDir func(dir *inode, p string) error
	walkDir = func(dir *inode, p string) error {
		es, err := v.list(dir.ino)
		if err != nil {
			return err
		}
		subdirs := 0
		for _, e := range es {
			rep.Entries++
			cp := joinPath(p, e.name)
			in, err := v.inode(e.ino)
			if err != nil {
				problem("%s@%d %q: inode %d: %v", w.Name, rev, cp, e.ino, err)
				continue
			}
			if in.kind() != e.kind {
				problem("%s@%d %q: entry type %d, inode type %d", w.Name, rev, cp, e.kind, in.kind())
			}
			links[in.ino]++
			inodes[in.ino] = in
			if !in.isDir() && in.parent != 0 {
				if got, _, err := v.lookup(in.parent, in.name); err != nil || got != in.ino {
					problem("%s@%d %q: inode %d records name %q in %d, which is not one of its entries", w.Name, rev, cp, in.ino, in.name, in.parent)
				}
			}
			if in.isSpecial() {
				if err := checkSpecial(fileMode(in.mode), in.rdev); err != nil {
					problem("%s@%d %q: %v", w.Name, rev, cp, err)
				}
			} else if in.rdev != 0 {
				problem("%s@%d %q: device number %#x on a file that is no device", w.Name, rev, cp, in.rdev)
			}
			switch {
			case in.isDir():
				subdirs++
				if in.parent != dir.ino || in.name != e.name {
					problem("%s@%d %q: directory records parent %d name %q", w.Name, rev, cp, in.parent, in.name)
				}
				if err := walkDir(in, cp); err != nil {
					return err
				}
			case in.isReg():
				last := (in.size + s.chunkSize - 1) / s.chunkSize
				past, err := v.extents(in.ino, last, 1<<62)
				if err != nil {
					return err
				}
				if len(past) > 0 {
					problem("%s@%d %q: %d chunks past the end (size %d)", w.Name, rev, cp, len(past), in.size)
				}
				if hashes {
					es, err := v.extents(in.ino, 0, last)
					if err != nil {
						return err
					}
					for _, e := range es {
						if verified[e.chunk] {
							continue
						}
						verified[e.chunk] = true
						rep.Chunks++
						var h []byte
						var data []byte
						if err := v.q.chunkInfo.QueryRowContext(ctx, e.chunk).Scan(&h, new(int)); err != nil {
							return err
						}
						if data, err = v.chunkData(e.chunk); err != nil {
							return err
						}
						if sum := sha256.Sum256(data); string(sum[:]) != string(h) {
							problem("%s@%d %q: chunk %d does not match its hash", w.Name, rev, cp, e.chunk)
						}
					}
				}
			case in.isSymlink():
				if in.target == "" || int64(len(in.target)) != in.size {
					problem("%s@%d %q: symlink target %q size %d", w.Name, rev, cp, in.target, in.size)
				}
			}
		}
		if want := uint32(2 + subdirs); dir.nlink != want {
			problem("%s@%d %q: directory nlink %d, want %d", w.Name, rev, p, dir.nlink, want)
		}
		return nil
	}
	if err := walkDir(root, ""); err != nil {
		return err
	}
	for ino, n := range links {
		if in := inodes[ino]; !in.isDir() && in.nlink != n {
			problem("%s@%d inode %d: nlink %d, %d entries", w.Name, rev, ino, in.nlink, n)
		}
	}
	// Every live inode of the workspace's own layer must be reachable.
	if w.BaseID == 0 {
		var alive int
		if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM inodes WHERE ws = ?1 AND birth <= ?2 AND death > ?2`, w.ID, rev).Scan(&alive); err != nil {
			return wrapDB("check inodes", err)
		}
		if alive != len(inodes)+1 {
			problem("%s@%d: %d live inodes, %d reachable", w.Name, rev, alive, len(inodes)+1)
		}
	}
	return nil
}

// checkUsage recounts what every tenant stores from the extent rows and
// compares it with what the triggers kept (tenant_chunks, tenant_usage).
func (s *Store) checkUsage(ctx context.Context, problem func(string, ...any)) error {
	rows, err := s.rdb.QueryContext(ctx, `
		WITH want AS (
			SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END AS tenant, e.chunk, count(*) AS refs
			FROM extents e JOIN workspaces w ON w.id = e.ws WHERE e.chunk IS NOT NULL GROUP BY 1, 2),
		wrong AS (
			SELECT * FROM (SELECT tenant, chunk, refs FROM want EXCEPT SELECT tenant, chunk, refs FROM tenant_chunks)
			UNION SELECT * FROM (SELECT tenant, chunk, refs FROM tenant_chunks EXCEPT SELECT tenant, chunk, refs FROM want))
		SELECT tenant, count(*) FROM wrong GROUP BY tenant`)
	if err != nil {
		return wrapDB("check usage", err)
	}
	for rows.Next() {
		var tenant string
		var n int
		if err := rows.Scan(&tenant, &n); err != nil {
			rows.Close()
			return wrapDB("check usage", err)
		}
		problem("usage of %s: %d chunks counted with the wrong references", tenant, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return wrapDB("check usage", err)
	}
	rows, err = s.rdb.QueryContext(ctx, `
		WITH want AS (SELECT t.tenant, sum(c.size) AS bytes, count(*) AS chunks FROM tenant_chunks t JOIN chunks c ON c.id = t.chunk GROUP BY 1)
		SELECT n.tenant, COALESCE(u.bytes, 0), COALESCE(u.chunks, 0), COALESCE(w.bytes, 0), COALESCE(w.chunks, 0)
		FROM (SELECT tenant FROM want UNION SELECT tenant FROM tenant_usage) n
		LEFT JOIN tenant_usage u ON u.tenant = n.tenant LEFT JOIN want w ON w.tenant = n.tenant
		WHERE COALESCE(u.bytes, 0) != COALESCE(w.bytes, 0) OR COALESCE(u.chunks, 0) != COALESCE(w.chunks, 0)`)
	if err != nil {
		return wrapDB("check usage", err)
	}
	for rows.Next() {
		var tenant string
		var bytes, chunks, wantBytes, wantChunks int64
		if err := rows.Scan(&tenant, &bytes, &chunks, &wantBytes, &wantChunks); err != nil {
			rows.Close()
			return wrapDB("check usage", err)
		}
		problem("usage of %s: %d bytes in %d chunks recorded, %d in %d counted", tenant, bytes, chunks, wantBytes, wantChunks)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return wrapDB("check usage", err)
	}
	// Records (runs, steps, memories, skills, the journal): the view
	// counts them from the rows.
	rows, err = s.rdb.QueryContext(ctx, `
		SELECT n.tenant, COALESCE(u.records, 0), COALESCE(r.records, 0)
		FROM (SELECT tenant FROM tenant_records UNION SELECT tenant FROM tenant_usage) n
		LEFT JOIN tenant_usage u ON u.tenant = n.tenant LEFT JOIN tenant_records r ON r.tenant = n.tenant
		WHERE COALESCE(u.records, 0) != COALESCE(r.records, 0)`)
	if err != nil {
		return wrapDB("check usage", err)
	}
	defer rows.Close()
	for rows.Next() {
		var tenant string
		var records, want int64
		if err := rows.Scan(&tenant, &records, &want); err != nil {
			return wrapDB("check usage", err)
		}
		problem("usage of %s: %d bytes of records recorded, %d counted", tenant, records, want)
	}
	return wrapDB("check usage", rows.Err())
}

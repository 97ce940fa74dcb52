package fsstore

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"computerd/core"
)

// Import gathers a tree from outside (a directory, a tarball, a git work
// tree) into one revision. File contents stream into the store as they
// are added, and so do the ops: every importBatch of them commit into a
// hidden fork of the workspace (its staging area), so memory stays
// bounded whatever the number of entries. Commit moves the staged tree
// into the workspace as one revision in one transaction; until then
// nothing is visible, and an import closed without Commit (or cut by a
// crash) leaves nothing behind.
type Import struct {
	s       *Store
	ws      int64
	stage   int64 // the hidden fork the ops commit into
	up      *Uploader
	pending []core.Op       // ops not yet committed to the stage
	added   map[string]bool // paths the pending ops add -> is a directory
	dirs    map[string]bool // directories known to stand in the stage (a bounded cache)
	times   *os.File        // the times of the directories added, set at Commit (see addTime)
	ntimes  int
	// empty: the stage's tree was empty when the import began (it replaces
	// the tree, or the workspace had nothing), so only a directory can be
	// there before this import names it again: files and symlinks are
	// not looked up.
	empty bool
	sn    *Snapshot // the stage as the last flush left it (nil: not opened since)
	tw    *bufio.Writer
	done  bool
	// Progress, if set, is called after each entry with the running totals.
	Progress func(files int, bytes int64)
	files    int
	bytes    int64
}

// importBatch is how many ops an import commits to its stage at a time.
const importBatch = 4096

// importDirCache bounds how many directory paths an import remembers
// (more are looked up in the stage).
const importDirCache = 1 << 16

// importTenantPrefix marks the tenant of an import's stage: a hidden fork
// no user can name (user tenants are [A-Za-z0-9._-]), apart from drafts
// (whose changes recovery keeps): a stage left by a crash is dropped.
const importTenantPrefix = "~import~"

// NewImport starts an import into ws. With replace, the workspace's current
// tree is removed first, so the revision holds exactly what was imported.
// File contents go through up (nil: a new Uploader), which the Import's
// Close closes, as NewImport does when it fails.
func (s *Store) NewImport(ctx context.Context, ws int64, replace bool, up *Uploader) (*Import, error) {
	if up == nil {
		up = s.NewUploader()
	}
	var stage int64
	err := s.write(ctx, func() error {
		w, err := s.liveWorkspace(ctx, s.wconn, ws)
		if err != nil {
			return err
		}
		var tag [8]byte
		rand.Read(tag[:])
		w.Tenant = importTenantPrefix + w.Tenant
		stage, err = s.insertFork(ctx, w, w.Head, fmt.Sprintf("%d~%x", ws, tag))
		return err
	})
	if err != nil {
		up.Close()
		return nil, err
	}
	im := &Import{s: s, ws: ws, stage: stage, up: up, added: map[string]bool{}, dirs: map[string]bool{"": true}, empty: replace}
	if im.times, err = os.CreateTemp(s.Dir, "import-times-*"); err != nil {
		im.Close()
		return nil, fmt.Errorf("import: %w", err)
	}
	os.Remove(im.times.Name()) // open until Close; nothing left after a crash
	im.tw = bufio.NewWriter(im.times)
	if replace {
		im.pending = append(im.pending, core.Op{Kind: core.OpDeleteAll, Path: ""})
		if err := im.flush(ctx); err != nil {
			im.Close()
			return nil, err
		}
	} else if sn, err := im.snapshot(ctx); err != nil {
		im.Close()
		return nil, err
	} else if es, err := sn.ReadDir(ctx, ""); err != nil {
		im.Close()
		return nil, err
	} else {
		im.empty = len(es) == 0
	}
	return im, nil
}

// flush commits the pending ops into the stage.
func (im *Import) flush(ctx context.Context) error {
	if len(im.pending) == 0 {
		return nil
	}
	if err := im.up.Flush(ctx); err != nil {
		return err
	}
	_, err := im.s.Commit(ctx, im.stage, &core.Batch{Ops: im.pending}, CommitInfo{Source: core.SourceAPI, Message: "import"})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	clear(im.pending)
	im.pending = im.pending[:0]
	clear(im.added)
	im.sn = nil
	return nil
}

// snapshot opens the stage as the last flush left it.
func (im *Import) snapshot(ctx context.Context) (*Snapshot, error) {
	if im.sn == nil {
		sn, err := im.s.Snapshot(ctx, im.stage, core.Head)
		if err != nil {
			return nil, err
		}
		im.sn = sn
	}
	return im.sn, nil
}

// add queues an op, committing the queue when it is full.
func (im *Import) add(ctx context.Context, op core.Op) error {
	im.pending = append(im.pending, op)
	if len(im.pending) >= importBatch {
		return im.flush(ctx)
	}
	return nil
}

// existing reports what stands at p in the tree being built: whether
// anything does, and whether it is a directory. For a file or symlink
// about to be added (entry), an import that began empty looks no
// further than what it has just added (see empty).
func (im *Import) existing(ctx context.Context, p string, entry bool) (found, dir bool, err error) {
	if isDir, ok := im.added[p]; ok {
		return true, isDir, nil
	}
	if im.dirs[p] {
		return true, true, nil
	}
	if im.empty && entry {
		return false, false, nil
	}
	sn, err := im.snapshot(ctx)
	if err != nil {
		return false, false, err
	}
	st, err := sn.Stat(ctx, p)
	if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrNotDir) {
		return false, false, nil
	} else if err != nil {
		return false, false, err
	}
	if st.IsDir() {
		im.knowDir(p)
	}
	return true, st.IsDir(), nil
}

// knowDir remembers that directory p stands in the stage.
func (im *Import) knowDir(p string) {
	if len(im.dirs) >= importDirCache {
		clear(im.dirs)
		im.dirs[""] = true
	}
	im.dirs[p] = true
}

// replaceAt removes what stands at p unless keep says it may stay; it
// reports whether something of the kind wanted stands there. entry: a
// file or symlink is about to be added (see existing).
func (im *Import) replaceAt(ctx context.Context, p string, entry bool, keep func(dir bool) bool) (kept bool, err error) {
	found, dir, err := im.existing(ctx, p, entry)
	if err != nil || !found {
		return false, err
	}
	if keep(dir) {
		return true, nil
	}
	// Commit the removal before going on, so that what the stage holds
	// under p never answers for the paths that follow.
	im.pending = append(im.pending, core.Op{Kind: core.OpDeleteAll, Path: p})
	delete(im.dirs, p)
	return false, im.flush(ctx)
}

// addTime notes a directory's time, set once every entry is in (adding
// entries would reset it).
func (im *Import) addTime(p string, mtime time.Time) error {
	var n [2 * binary.MaxVarintLen64]byte
	k := binary.PutUvarint(n[:], uint64(len(p)))
	k += binary.PutVarint(n[k:], mtime.UnixNano())
	if _, err := im.tw.Write(n[:k]); err != nil {
		return err
	}
	_, err := im.tw.WriteString(p)
	im.ntimes++
	return err
}

func (im *Import) tick(n int64) {
	im.files++
	im.bytes += n
	if im.Progress != nil {
		im.Progress(im.files, im.bytes)
	}
}

// Parents adds the missing parent directories of p (mode 0755, time now).
func (im *Import) Parents(ctx context.Context, p string) error {
	d := parentDir(p)
	if d == "" || im.dirs[d] || im.added[d] {
		return nil
	}
	found, dir, err := im.existing(ctx, d, false)
	if err != nil || (found && dir) {
		return err
	}
	if err := im.Parents(ctx, d); err != nil {
		return err
	}
	return im.Dir(ctx, d, 0o755, im.s.Now())
}

func parentDir(p string) string {
	d, _ := parentName(p)
	return d
}

// Dir adds a directory (parents must come first; an existing one is kept,
// its mode and time set).
func (im *Import) Dir(ctx context.Context, p string, mode fs.FileMode, mtime time.Time) error {
	kept, err := im.replaceAt(ctx, p, false, func(dir bool) bool { return dir })
	if err != nil {
		return err
	}
	if kept {
		err = im.add(ctx, core.Op{Kind: core.OpChmod, Path: p, Mode: mode})
	} else {
		im.added[p] = true
		err = im.add(ctx, core.Op{Kind: core.OpMkdir, Path: p, Mode: mode})
	}
	if err != nil {
		return err
	}
	im.knowDir(p)
	im.tick(0)
	return im.addTime(p, mtime)
}

// File adds a regular file with r's contents.
func (im *Import) File(ctx context.Context, p string, mode fs.FileMode, mtime time.Time, r io.Reader) error {
	c, err := im.up.Put(ctx, r)
	if err != nil {
		return fmt.Errorf("import %q: %w", p, err)
	}
	if _, err := im.replaceAt(ctx, p, true, func(dir bool) bool { return !dir }); err != nil {
		return err
	}
	im.added[p] = false
	im.tick(c.Size)
	return im.add(ctx, core.Op{Kind: core.OpCreate, Path: p, Mode: mode, Content: c, Mtime: mtime.UnixNano()})
}

// Symlink adds a symbolic link.
func (im *Import) Symlink(ctx context.Context, p, target string, mtime time.Time) error {
	if _, err := im.replaceAt(ctx, p, true, func(bool) bool { return false }); err != nil {
		return err
	}
	im.added[p] = false
	im.tick(0)
	return im.add(ctx, core.Op{Kind: core.OpSymlink, Path: p, Target: target, Mtime: mtime.UnixNano()})
}

// Special adds a FIFO, socket or device node (mode holds its type, see
// core.SpecialTypes; rdev is a device's number).
func (im *Import) Special(ctx context.Context, p string, mode fs.FileMode, rdev uint64, mtime time.Time) error {
	if _, err := im.replaceAt(ctx, p, true, func(bool) bool { return false }); err != nil {
		return err
	}
	im.added[p] = false
	im.tick(0)
	return im.add(ctx, core.Op{Kind: core.OpMknod, Path: p, Mode: mode, Rdev: rdev, Mtime: mtime.UnixNano()})
}

// Commit commits what is pending, sets the directories' times, and moves
// the staged tree into the workspace as one revision (see
// Store.commitStage); then the stage and the chunks' leases go (see Close).
func (im *Import) Commit(ctx context.Context, info CommitInfo) (core.Revision, error) {
	defer im.Close()
	if err := im.flush(ctx); err != nil {
		return core.Revision{}, err
	}
	if err := im.setTimes(ctx); err != nil {
		return core.Revision{}, err
	}
	rev, err := im.s.commitStage(ctx, im.ws, im.stage, info)
	if err != nil {
		return core.Revision{}, err
	}
	im.done = true
	return rev, nil
}

// setTimes commits the directory times noted by addTime.
func (im *Import) setTimes(ctx context.Context) error {
	if err := im.tw.Flush(); err != nil {
		return err
	}
	if _, err := im.times.Seek(0, io.SeekStart); err != nil {
		return err
	}
	br := bufio.NewReader(im.times)
	for range im.ntimes {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("import: read directory times: %w", err)
		}
		mtime, err := binary.ReadVarint(br)
		if err != nil {
			return fmt.Errorf("import: read directory times: %w", err)
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			return fmt.Errorf("import: read directory times: %w", err)
		}
		if err := im.add(ctx, core.Op{Kind: core.OpUtimes, Path: string(p), Mtime: mtime}); err != nil {
			return err
		}
	}
	return im.flush(ctx)
}

// Close abandons an import that was not committed: its stage goes, and
// the chunks it wrote lose their leases, so GC may take them. The chunks
// of an import are safe from GC until Commit or Close, however long the
// import takes.
func (im *Import) Close() error {
	var errs []error
	if im.times != nil {
		errs = append(errs, im.times.Close())
		im.times = nil
	}
	if !im.done {
		im.done = true
		err := im.s.DeleteWorkspace(context.Background(), im.stage)
		if !errors.Is(err, core.ErrWorkspaceNotFound) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, im.up.Close())
	return errors.Join(errs...)
}

// ImportDir imports the local directory dir (without following symlinks)
// into ws as one revision.
func (s *Store) ImportDir(ctx context.Context, ws int64, dir string, replace bool, info CommitInfo, progress func(int, int64)) (core.Revision, error) {
	im, err := s.NewImport(ctx, ws, replace, nil)
	if err != nil {
		return core.Revision{}, err
	}
	defer im.Close()
	im.Progress = progress
	err = filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return im.Dir(ctx, rel, fi.Mode(), fi.ModTime())
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			return im.Symlink(ctx, rel, target, fi.ModTime())
		case d.Type().IsRegular():
			f, err := os.Open(full)
			if err != nil {
				return err
			}
			err = im.File(ctx, rel, fi.Mode(), fi.ModTime(), f)
			f.Close()
			return err
		case core.IsSpecial(d.Type()):
			var rdev uint64
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				rdev = st.Rdev
			}
			return im.Special(ctx, rel, fi.Mode(), rdev, fi.ModTime())
		}
		return nil
	})
	if err != nil {
		return core.Revision{}, fmt.Errorf("import %s: %w", dir, err)
	}
	return im.Commit(ctx, info)
}

package fsstore

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"computerd/core"
)

// Import gathers a tree from outside (a directory, a tarball, a git work
// tree) into one revision. File contents stream into the store as they are
// added; only the ops, not the bytes, wait in memory for Commit.
type Import struct {
	s   *Store
	ws  int64
	up  *Uploader
	ops []core.Op
	// Progress, if set, is called after each entry with the running totals.
	Progress func(files int, bytes int64)
	files    int
	bytes    int64
	head     *Snapshot // the tree being added to; nil when it is replaced
}

// NewImport starts an import into ws. With replace, the workspace's current
// tree is removed first, so the revision holds exactly what was imported.
// File contents go through up (nil: a new Uploader), which the Import's
// Close closes.
func (s *Store) NewImport(ctx context.Context, ws int64, replace bool, up *Uploader) (*Import, error) {
	if up == nil {
		up = s.NewUploader()
	}
	im := &Import{s: s, ws: ws, up: up}
	if replace {
		im.ops = append(im.ops, core.Op{Kind: core.OpDeleteAll, Path: ""})
		return im, nil
	}
	var err error
	if im.head, err = s.Snapshot(ctx, ws, core.Head); err != nil {
		return nil, err
	}
	if es, err := im.head.ReadDir(ctx, ""); err != nil {
		return nil, err
	} else if len(es) == 0 {
		im.head = nil // nothing to collide with
	}
	return im, nil
}

// existing reports what the tree being added to has at p.
func (im *Import) existing(ctx context.Context, p string) (st core.Stat, ok bool) {
	if im.head == nil {
		return core.Stat{}, false
	}
	st, err := im.head.Stat(ctx, p)
	return st, err == nil
}

// clear removes what stands at p unless it is of the kind about to be added.
func (im *Import) clear(ctx context.Context, p string, keep func(core.Stat) bool) {
	if st, ok := im.existing(ctx, p); ok && !keep(st) {
		im.ops = append(im.ops, core.Op{Kind: core.OpDeleteAll, Path: p})
	}
}

func (im *Import) tick(n int64) {
	im.files++
	im.bytes += n
	if im.Progress != nil {
		im.Progress(im.files, im.bytes)
	}
}

// Dir adds a directory (parents must come first; an existing one is kept).
func (im *Import) Dir(ctx context.Context, p string, mode fs.FileMode, mtime time.Time) {
	if st, ok := im.existing(ctx, p); ok && st.IsDir() {
		im.ops = append(im.ops, core.Op{Kind: core.OpChmod, Path: p, Mode: mode})
	} else {
		im.clear(ctx, p, func(core.Stat) bool { return false })
		im.ops = append(im.ops, core.Op{Kind: core.OpMkdir, Path: p, Mode: mode})
	}
	im.ops = append(im.ops, core.Op{Kind: core.OpUtimes, Path: p, Mtime: mtime.UnixNano()})
	im.tick(0)
}

// File adds a regular file with r's contents.
func (im *Import) File(ctx context.Context, p string, mode fs.FileMode, mtime time.Time, r io.Reader) error {
	c, err := im.up.Put(ctx, r)
	if err != nil {
		return fmt.Errorf("import %q: %w", p, err)
	}
	im.clear(ctx, p, func(st core.Stat) bool { return st.Mode.IsRegular() })
	im.ops = append(im.ops, core.Op{Kind: core.OpCreate, Path: p, Mode: mode, Content: c, Mtime: mtime.UnixNano()})
	im.tick(c.Size)
	return nil
}

// Symlink adds a symbolic link.
func (im *Import) Symlink(ctx context.Context, p, target string, mtime time.Time) {
	im.clear(ctx, p, func(core.Stat) bool { return false })
	im.ops = append(im.ops, core.Op{Kind: core.OpSymlink, Path: p, Target: target, Mtime: mtime.UnixNano()})
	im.tick(0)
}

// Commit writes the remaining chunks and commits everything as one
// revision; then the chunks' leases end (see Close).
func (im *Import) Commit(ctx context.Context, info CommitInfo) (core.Revision, error) {
	defer im.Close()
	if err := im.up.Flush(ctx); err != nil {
		return core.Revision{}, err
	}
	// Directory times go last: adding entries would otherwise reset them.
	var ops, dirTimes []core.Op
	for i, op := range im.ops {
		if op.Kind == core.OpUtimes && i > 0 && (im.ops[i-1].Kind == core.OpMkdir || im.ops[i-1].Kind == core.OpChmod) {
			dirTimes = append(dirTimes, op)
			continue
		}
		ops = append(ops, op)
	}
	for i := len(dirTimes) - 1; i >= 0; i-- {
		ops = append(ops, dirTimes[i])
	}
	return im.s.Commit(ctx, im.ws, &core.Batch{Ops: ops}, info)
}

// Close abandons an import that was not committed: the chunks it wrote
// lose their leases, so GC may take them. The chunks of an import are safe
// from GC until Commit or Close, however long the import takes.
func (im *Import) Close() error { return im.up.Close() }

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
			im.Dir(ctx, rel, fi.Mode(), fi.ModTime())
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			im.Symlink(ctx, rel, target, fi.ModTime())
		case d.Type().IsRegular():
			f, err := os.Open(full)
			if err != nil {
				return err
			}
			err = im.File(ctx, rel, fi.Mode(), fi.ModTime(), f)
			f.Close()
			return err
		}
		return nil // sockets, devices and fifos are not workspace content
	})
	if err != nil {
		return core.Revision{}, fmt.Errorf("import %s: %w", dir, err)
	}
	return im.Commit(ctx, info)
}

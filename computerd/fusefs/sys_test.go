package fusefs_test

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"computerd/core"
	"computerd/fsstore"
)

func statT(fi os.FileInfo) *syscall.Stat_t { return fi.Sys().(*syscall.Stat_t) }

// exportTo writes a snapshot's tree into dir.
func exportTo(sn *fsstore.Snapshot, dir string) error {
	return sn.ReadTree(context.Background(), "", func(p string, st core.Stat, r io.Reader) error {
		full := filepath.Join(dir, p)
		switch {
		case p == "":
			return nil
		case st.IsDir():
			return os.MkdirAll(full, st.Mode.Perm()|0o700)
		case st.Mode&fs.ModeSymlink != 0:
			return os.Symlink(st.Target, full)
		}
		f, err := os.OpenFile(full, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode.Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Chtimes(full, st.Mtime, st.Mtime)
	})
}

package api

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// export streams ?path= (default the root) at ?rev= as a tar archive
// (?gzip=1 compresses it), names relative to that path.
func (s *Server) export(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.snapshot(r)
	if err != nil {
		return err
	}
	root, err := core.CleanPath(r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	if _, err := sn.Stat(r.Context(), root); err != nil {
		return err
	}
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(sn.Rev, 10))
	w.Header().Set("Content-Type", "application/x-tar")
	var out io.Writer = w
	var gz *gzip.Writer
	if boolParam(r, "gzip") {
		w.Header().Set("Content-Type", "application/gzip")
		gz = gzip.NewWriter(w)
		out = gz
	}
	bw := bufio.NewWriterSize(out, 256<<10)
	tw := tar.NewWriter(bw)
	err = sn.ReadTree(r.Context(), root, func(p string, st core.Stat, body io.Reader) error {
		name := relTo(root, p)
		if name == "" {
			if st.IsDir() {
				return nil
			}
			name = path.Base(p)
		}
		hdr := &tar.Header{Name: name, Mode: int64(fsstore.UnixMode(st.Mode) & 0o7777), Uid: int(st.UID), Gid: int(st.GID),
			ModTime: st.Mtime, Format: tar.FormatPAX}
		switch {
		case st.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case st.Mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, st.Target
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if body != nil {
			if _, err := io.Copy(tw, body); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && gz != nil {
		err = gz.Close()
	}
	return err
}

// attach imports a tar archive (plain or gzip) from the body as one
// revision. By default the workspace's tree becomes exactly the archive's
// contents; ?merge=1 keeps what the archive does not name. ?into=DIR places
// the archive under DIR.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		drain(r.Body)
		return err
	}
	into, err := core.CleanPath(r.URL.Query().Get("into"))
	if err != nil {
		drain(r.Body)
		return err
	}
	body := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, s.Limits.MaxUpload), 256<<10)
	var in io.Reader = body
	if magic, _ := body.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return badRequest("attach: bad gzip stream: %v", err)
		}
		in = zr
	}
	up, err := s.meteredUploader(r)
	if err != nil {
		return err
	}
	im, err := s.Store.NewImport(r.Context(), ws.ID, !boolParam(r, "merge"), up)
	if err != nil {
		up.Close()
		return err
	}
	defer im.Close() // its chunks stay safe from GC until the commit
	now := s.Store.Now()
	dirs := map[string]bool{"": true}
	// ensureDirs adds the missing parents of p, shallowest first.
	var ensureDirs func(p string)
	ensureDirs = func(p string) {
		d := path.Dir(p)
		if d == "." {
			d = ""
		}
		if dirs[d] {
			return
		}
		ensureDirs(d)
		im.Dir(r.Context(), d, 0o755, now)
		dirs[d] = true
	}
	if into != "" {
		ensureDirs(into + "/x")
	}
	res := wire.AttachResult{}
	tr := tar.NewReader(in)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return tarError(err)
		}
		name, err := tarName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue // the archive's root directory
		}
		p := path.Join(into, name)
		ensureDirs(p)
		mode := fsstore.ModeOf(uint32(hdr.Mode) & 0o7777) // tar's mode bits are unix's
		mtime := hdr.ModTime
		if mtime.IsZero() {
			mtime = now
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if !dirs[p] {
				im.Dir(r.Context(), p, mode, mtime)
				dirs[p] = true
			}
		case tar.TypeReg, tar.TypeRegA:
			if err := im.File(r.Context(), p, mode, mtime, tr); err != nil {
				return tarError(err)
			}
			res.Files++
			res.Bytes += hdr.Size
		case tar.TypeSymlink:
			im.Symlink(r.Context(), p, hdr.Linkname, mtime)
		case tar.TypeLink:
			return badRequest("attach: %s is a hard link to %s; archives with hard links are not supported (store the file itself)", hdr.Name, hdr.Linkname)
		case tar.TypeXGlobalHeader:
		default:
			return badRequest("attach: %s: unsupported tar entry type %q (devices and fifos cannot be stored)", hdr.Name, hdr.Typeflag)
		}
	}
	drain(body)
	info := commitInfo(r, 0, fmt.Sprintf("attach %d files", res.Files))
	rev, err := im.Commit(r.Context(), info)
	if err != nil {
		return err
	}
	res.Revision = rev
	s.Metrics.Committed(rev)
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(rev.Rev, 10))
	return writeJSON(w, http.StatusOK, res)
}

// tarName validates an archive member name: relative, no escape above the root.
func tarName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", badRequest("attach: absolute path %q in archive", name)
	}
	p, err := core.CleanPath(name)
	if err != nil {
		return "", badRequest("attach: bad path %q in archive: %v", name, err)
	}
	return p, nil
}

// tarError keeps the body-size limit's error recognisable and calls any
// other archive error bad input.
func tarError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	if cut := bodyCut(err, "attach"); cut != nil {
		return cut
	}
	if errors.Is(err, core.ErrInvalidPath) || errors.Is(err, core.ErrInvalidArgument) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
		return badRequest("attach: bad archive: %v", err)
	}
	return err
}

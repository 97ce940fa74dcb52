package api

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"

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
		switch typ := st.Mode.Type(); {
		case st.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case typ == fs.ModeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, st.Target
		case typ == fs.ModeNamedPipe:
			hdr.Typeflag = tar.TypeFifo
		case typ == fs.ModeDevice|fs.ModeCharDevice, typ == fs.ModeDevice:
			hdr.Typeflag = tar.TypeBlock
			if typ&fs.ModeCharDevice != 0 {
				hdr.Typeflag = tar.TypeChar
			}
			hdr.Devmajor, hdr.Devminor = int64(core.DevMajor(st.Rdev)), int64(core.DevMinor(st.Rdev))
		case typ == fs.ModeSocket:
			return nil // tar has no type for sockets (GNU tar skips them too)
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

// attach imports a tar archive (plain, gzip or zstd) from the body as one
// revision. By default the workspace's tree becomes exactly the archive's
// contents; ?merge=1 keeps what the archive does not name. ?into=DIR places
// the archive under DIR. The entries stream into the store as they are
// read (fsstore.Import), so memory does not grow with the archive.
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
	packed := &countingReader{r: http.MaxBytesReader(w, r.Body, s.Limits.MaxUpload)}
	body := bufio.NewReaderSize(packed, 256<<10)
	var in io.Reader = body
	magic, _ := body.Peek(4)
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(body)
		if err != nil {
			return badRequest("attach: bad gzip stream: %v", err)
		}
		in = &ratioReader{r: zr, packed: packed}
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(body, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return badRequest("attach: bad zstd stream: %v", err)
		}
		defer zr.Close()
		in = &ratioReader{r: zr, packed: packed}
	}
	ctx := r.Context()
	up, err := s.meteredUploader(r)
	if err != nil {
		return err
	}
	im, err := s.Store.NewImport(ctx, ws.ID, !boolParam(r, "merge"), up)
	if err != nil {
		return err
	}
	defer im.Close() // the stage goes, and its chunks are safe from GC until the commit
	now := s.Store.Now()
	if into != "" {
		if err := im.Parents(ctx, into+"/x"); err != nil {
			return tarError(err)
		}
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
		if err := im.Parents(ctx, p); err != nil {
			return tarError(err)
		}
		mode := fsstore.ModeOf(uint32(hdr.Mode) & 0o7777) // tar's mode bits are unix's
		mtime := hdr.ModTime
		if mtime.IsZero() {
			mtime = now
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = im.Dir(ctx, p, mode, mtime)
		case tar.TypeReg, tar.TypeRegA:
			err = im.File(ctx, p, mode, mtime, tr)
			res.Files++
			res.Bytes += hdr.Size
		case tar.TypeSymlink:
			err = im.Symlink(ctx, p, hdr.Linkname, mtime)
		case tar.TypeFifo:
			err = im.Special(ctx, p, mode|fs.ModeNamedPipe, 0, mtime)
		case tar.TypeChar, tar.TypeBlock:
			typ := fs.ModeDevice
			if hdr.Typeflag == tar.TypeChar {
				typ |= fs.ModeCharDevice
			}
			if hdr.Devmajor < 0 || hdr.Devmajor >= 1<<12 || hdr.Devminor < 0 || hdr.Devminor >= 1<<20 {
				return badRequest("attach: %s: device %d:%d out of range (major < 4096, minor < 1048576)", hdr.Name, hdr.Devmajor, hdr.Devminor)
			}
			err = im.Special(ctx, p, mode|typ, core.MakeDev(uint32(hdr.Devmajor), uint32(hdr.Devminor)), mtime)
		case tar.TypeLink:
			return badRequest("attach: %s is a hard link to %s; archives with hard links are not supported (store the file itself)", hdr.Name, hdr.Linkname)
		case tar.TypeXGlobalHeader:
		default:
			return badRequest("attach: %s: unsupported tar entry type %q", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return tarError(err)
		}
	}
	drain(body)
	info := commitInfo(r, 0, fmt.Sprintf("attach %d files", res.Files))
	rev, err := im.Commit(ctx, info)
	if err != nil {
		return err
	}
	res.Revision = rev
	s.Metrics.Committed(rev)
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(rev.Rev, 10))
	return writeJSON(w, http.StatusOK, res)
}

// The first bytes of a gzip and of a zstd stream.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// zstdMaxWindow bounds the window a zstd archive may ask its decoder to
// keep (what zstd -19 uses is 8 MiB; --long=27, 128 MiB, is refused).
const zstdMaxWindow = 16 << 20

// countingReader counts the bytes read through it, and keeps the error
// that ended them.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// Bounds on what a compressed archive may expand to: past
// ratioFloor bytes out, at most maxRatio bytes for each byte in. Real
// archives stay far below (source trees: 3-10x; a tree of empty files:
// ~200x); a decompression bomb (1 GiB of zeros is 1 MiB of gzip) does not.
const (
	maxRatio   = 1000
	ratioFloor = 64 << 20
)

// What ratioReader fails with: an archive over the ratio, or one its
// decompressor cannot read.
var (
	errRatio      = errors.New("decompression ratio over the limit")
	errCompressed = errors.New("bad compressed stream")
)

// ratioReader reads a decompressed stream and fails once it has given
// more than maxRatio times the compressed bytes read from packed (past
// ratioFloor). A failure of the decompressor itself (not of the body
// beneath it, whose errors pass as they are) is errCompressed.
type ratioReader struct {
	r      io.Reader
	packed *countingReader
	out    int64
}

func (z *ratioReader) Read(p []byte) (int, error) {
	n, err := z.r.Read(p)
	z.out += int64(n)
	if z.out > ratioFloor && z.out > maxRatio*z.packed.n {
		return n, fmt.Errorf("%w: %d bytes from %d compressed", errRatio, z.out, z.packed.n)
	}
	if err != nil && !errors.Is(err, io.EOF) && (z.packed.err == nil || errors.Is(z.packed.err, io.EOF)) {
		return n, fmt.Errorf("%w: %w", errCompressed, err)
	}
	return n, err
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
	if errors.Is(err, errRatio) {
		return failure(wire.ErrTooLarge, "attach: the archive expands to more than %d times its compressed size (%v); nothing was committed", maxRatio, err)
	}
	if errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return failure(wire.ErrTooLarge, "attach: the zstd archive needs a window over %d bytes (%v); nothing was committed", zstdMaxWindow, err)
	}
	if errors.Is(err, errCompressed) {
		return badRequest("attach: bad archive: %v", err)
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

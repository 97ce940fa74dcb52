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
// read (fsstore.Import), so memory does not grow with the archive, and
// what they expand to is bounded by what was sent (see archive).
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
	ar, err := openArchive(http.MaxBytesReader(w, r.Body, s.Limits.MaxUpload))
	if err != nil {
		return err
	}
	defer ar.close()
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
	for {
		hdr, name, err := ar.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return tarError(err)
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
		case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse: // 'S': tar -S of GNU tar
			err = im.File(ctx, p, mode, mtime, ar.contents())
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
		default:
			return badRequest("attach: %s: unsupported tar entry type %q", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return tarError(err)
		}
	}
	ar.drain()
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

// archive reads an attached tar (plain, gzip or zstd) entry by entry. What
// it expands to beyond the bytes sent counts against its bound
// (fsstore.Bound): a compressed archive's every decompressed byte, and the
// zeros of a sparse entry's holes, which archive/tar makes up as the
// entry is read (a few KiB of headers can ask for a terabyte of them).
// Its reads fail with a *fsstore.BoundError once they pass the bound, so
// the work an archive causes stays within 1000 times what it sent.
type archive struct {
	bound  fsstore.Bound
	sent   *sentReader
	body   *bufio.Reader
	stream *countingReader // the tar stream, decompressed
	tr     *tar.Reader
	zr     *zstd.Decoder
}

// openArchive starts reading an archive from body, telling its
// compression by its first bytes.
func openArchive(body io.Reader) (*archive, error) {
	a := &archive{}
	a.sent = &sentReader{r: body, bound: &a.bound}
	a.body = bufio.NewReaderSize(a.sent, 256<<10)
	var in io.Reader = a.body
	magic, _ := a.body.Peek(4)
	if len(magic) == 0 {
		// Not even an empty archive (which is its end marker): most
		// likely a client that sent nothing by mistake, and by default
		// an attach replaces the whole tree.
		return nil, badRequest("attach: the body is empty; send a tar archive (plain, gzip or zstd)")
	}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(a.body)
		if err != nil {
			return nil, badRequest("attach: bad gzip stream: %v", err)
		}
		in = &expandReader{r: zr, sent: a.sent, bound: &a.bound}
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(a.body, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, badRequest("attach: bad zstd stream: %v", err)
		}
		a.zr = zr
		in = &expandReader{r: zr, sent: a.sent, bound: &a.bound}
	}
	a.stream = &countingReader{r: in}
	a.tr = tar.NewReader(a.stream)
	return a, nil
}

// next returns the next entry that makes something (global headers are
// skipped) and its clean name ("" for the root, which only a directory
// may name), or io.EOF after the last.
func (a *archive) next() (*tar.Header, string, error) {
	for {
		hdr, err := a.tr.Next()
		if err != nil {
			return nil, "", err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := entryName(hdr)
		return hdr, name, err
	}
}

// contents reads the current (regular) entry's bytes, counting those it makes up
// (a sparse entry's zeros) against the bound.
func (a *archive) contents() io.Reader {
	return &contentsReader{a: a, start: a.stream.n}
}

// drain reads what follows the archive, so a keep-alive connection stays usable.
func (a *archive) drain() { drain(a.body) }

func (a *archive) close() {
	if a.zr != nil {
		a.zr.Close()
	}
}

// contentsReader reads one entry's contents: what it gives beyond the
// bytes it took from the tar stream are zeros archive/tar made up for a
// sparse entry's holes, which the bound counts as made. Past the bound it
// gives nothing more, and fails on every read: a read that gives bytes
// with its error may have the error dropped (io.ReadFull drops it when
// the buffer is full), and the zeros would go on.
type contentsReader struct {
	a            *archive
	start        int64 // a.stream.n when the entry began
	given, zeros int64
	err          error
}

func (c *contentsReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.a.tr.Read(p)
	c.given += int64(n)
	if z := c.given - (c.a.stream.n - c.start); z > c.zeros {
		if c.err = c.a.bound.Make(z - c.zeros); c.err != nil {
			return 0, c.err
		}
		c.zeros = z
	}
	return n, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// sentReader reads a request's body, counting its bytes as sent, and
// keeps the error that ended it.
type sentReader struct {
	r     io.Reader
	bound *fsstore.Bound
	err   error
}

func (s *sentReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.bound.Sent(int64(n))
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}

// errCompressed is what expandReader fails with when its decompressor
// cannot read the archive.
var errCompressed = errors.New("bad compressed stream")

// expandReader reads a decompressed stream, counting every byte as made
// (the bytes sent were the compressed ones); past the bound it fails on
// every read, as contentsReader does. A failure of the decompressor
// itself (not of the body beneath it, whose errors pass as they are) is
// errCompressed.
type expandReader struct {
	r     io.Reader
	sent  *sentReader
	bound *fsstore.Bound
	err   error
}

func (z *expandReader) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	n, err := z.r.Read(p)
	if z.err = z.bound.Make(int64(n)); z.err != nil {
		return 0, z.err
	}
	if err != nil && !errors.Is(err, io.EOF) && (z.sent.err == nil || errors.Is(z.sent.err, io.EOF)) {
		return n, fmt.Errorf("%w: %w", errCompressed, err)
	}
	return n, err
}

// entryName validates an entry's name: not empty, relative, no escape
// above the root; it returns the name cleaned, "" for the root itself,
// which only a directory may name ("./", as tar -C DIR . writes it).
func entryName(hdr *tar.Header) (string, error) {
	if hdr.Name == "" {
		return "", badRequest("attach: an entry of type %q has an empty name", hdr.Typeflag)
	}
	if strings.HasPrefix(hdr.Name, "/") {
		return "", badRequest("attach: absolute path %q in archive", hdr.Name)
	}
	p, err := core.CleanPath(hdr.Name)
	if err != nil {
		return "", badRequest("attach: bad path %q in archive: %v", hdr.Name, err)
	}
	if p == "" && hdr.Typeflag != tar.TypeDir {
		return "", badRequest("attach: %q (type %q) names the archive's root, which only a directory may", hdr.Name, hdr.Typeflag)
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
	if errors.Is(err, core.ErrTooLarge) {
		return failure(wire.ErrTooLarge, "attach: %v; nothing was committed", err)
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

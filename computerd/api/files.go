package api

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// readFile streams a file. ?line=N&lines=M selects M lines from line N
// (1-based); otherwise the whole file, honouring Range headers.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.snapshot(r)
	if err != nil {
		return err
	}
	p := r.PathValue("path")
	st, err := sn.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return &core.PathError{Op: "read", Path: p, Err: core.ErrIsDir}
	}
	if st.Mode&fs.ModeSymlink != 0 {
		return badRequest("read %s: a symlink to %q (the store does not follow symlinks)", p, st.Target)
	}
	if core.IsSpecial(st.Mode) {
		return badRequest("read %s: a FIFO, socket or device node has no contents to read", p)
	}
	line, err := intParam(r, "line", 0)
	if err != nil {
		return err
	}
	lines, err := intParam(r, "lines", 0)
	if err != nil {
		return err
	}
	f, err := sn.OpenIno(r.Context(), st.Ino)
	if err != nil {
		return err
	}
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(sn.Rev, 10))
	if line == 0 && lines == 0 {
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", st.Mtime, f)
		return nil
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	return copyLines(w, f, max(line, 1), lines)
}

// copyLines copies count lines (all when 0) starting at line first (1-based)
// from r to w, streaming: a long line is copied in pieces.
func copyLines(w io.Writer, r io.Reader, first, count int64) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := int64(1); count == 0 || n < first+count; {
		piece, err := br.ReadSlice('\n')
		if n >= first && len(piece) > 0 {
			if _, werr := w.Write(piece); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
			n++
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
	return nil
}

// writeFile replaces (or creates) a file with the request body, streamed
// into chunks, and commits one revision. ?mode= sets the permission bits
// (octal); ?parents=0 refuses to create missing parent directories;
// ?base=R fails with a conflict if the path changed after revision R.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.workspace(r)
	if err != nil {
		drain(r.Body)
		return err
	}
	p, err := core.CleanPath(r.PathValue("path"))
	if err != nil {
		drain(r.Body)
		return err
	}
	if p == "" {
		drain(r.Body)
		return badRequest("write: a file path is required")
	}
	key, err := requestKey(r, "")
	if err != nil {
		drain(r.Body)
		return err
	}
	if rev, ok, err := s.replayed(r, ws, key, "write "+p); err != nil || ok {
		drain(r.Body)
		if err != nil {
			return err
		}
		return answerReplay(w, http.StatusOK, rev)
	}
	var mode fs.FileMode
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			drain(r.Body)
			return badRequest("mode=%q: want octal permission bits such as 644", m)
		}
		mode = fs.FileMode(v)
	}
	base, err := intParam(r, "base", 0)
	if err != nil {
		return err
	}
	var b core.Batch
	if r.URL.Query().Get("parents") != "0" {
		if err := s.addParents(r, ws, p, &b); err != nil {
			drain(r.Body)
			return err
		}
	}
	// An Uploader held across the commit keeps GC off the new chunks until
	// it lands, even when another writer commits (and prunes) the same
	// content first.
	up, err := s.meteredUploader(r)
	if err != nil {
		drain(r.Body)
		return err
	}
	defer up.Close()
	content, err := up.Put(r.Context(), http.MaxBytesReader(w, r.Body, s.Limits.MaxUpload))
	if err == nil {
		err = up.Flush(r.Context())
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return failure(wire.ErrTooLarge, "write %s: body over the limit of %d bytes; nothing was written", p, s.Limits.MaxUpload)
		}
		if cut := bodyCut(err, "write "+p); cut != nil {
			return cut
		}
		return err
	}
	b.Add(core.Op{Kind: core.OpCreate, Path: p, Mode: mode, Content: content})
	rev, replayed, err := s.Store.CommitOnce(r.Context(), ws.ID, &b, commitInfo(r, base, "write "+p))
	if err != nil {
		return err
	}
	return s.answerCommit(w, rev, replayed)
}

// addParents adds a mkdir to b for each missing ancestor of p at the head.
func (s *Server) addParents(r *http.Request, ws core.Workspace, p string, b *core.Batch) error {
	sn, err := s.Store.Snapshot(r.Context(), ws.ID, core.Head)
	if err != nil {
		return err
	}
	dir := path.Dir(p)
	if dir == "." {
		return nil
	}
	// mkdir -p in the commit's own transaction: a concurrent write that
	// makes the same directory first is no conflict.
	if _, err := sn.Stat(r.Context(), dir); errors.Is(err, core.ErrNotFound) {
		b.Add(core.Op{Kind: core.OpMkdir, Path: dir, Mode: 0o755, Parents: true})
	} else if err != nil && !errors.Is(err, core.ErrNotDir) {
		return err
	}
	return nil
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.snapshot(r)
	if err != nil {
		return err
	}
	st, err := sn.Stat(r.Context(), r.PathValue("path"))
	if err != nil {
		return err
	}
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(sn.Rev, 10))
	return writeJSON(w, http.StatusOK, st)
}

// list answers the entries of a directory (or the file itself) with their
// metadata; ?recursive=1 lists the whole subtree, streamed as it is
// walked (a JSON array written element by element).
func (s *Server) list(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.snapshot(r)
	if err != nil {
		return err
	}
	p, err := core.CleanPath(r.PathValue("path"))
	if err != nil {
		return err
	}
	st, err := sn.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(sn.Rev, 10))
	out := newArray(w)
	switch {
	case !st.IsDir():
		err = out.add(st)
	case boolParam(r, "recursive"):
		err = sn.Walk(r.Context(), p, func(q string, st core.Stat) error {
			if q == p {
				return nil
			}
			return out.add(st)
		})
	default:
		var ents []core.Stat
		if ents, err = sn.ReadDirStat(r.Context(), st.Ino); err != nil {
			return err
		}
		for _, e := range ents {
			e.Path = path.Join(p, e.Name)
			if err = out.add(e); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	return out.end()
}

// ops commits a batch of ops (mkdir, rm, mv, chmod, symlink, ...) as one
// revision. The zeros its ops open past the ends of files (a truncate that
// lengthens one, a write past its end) are bounded by the bytes of its
// body, as an archive's are (fsstore.Bound).
func (s *Server) ops(w http.ResponseWriter, r *http.Request) error {
	var req wire.Ops
	var bound fsstore.Bound
	r.Body = sentBody{&sentReader{r: r.Body, bound: &bound}, r.Body}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if len(req.Ops) == 0 {
		return badRequest("ops: the batch is empty")
	}
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	key, err := requestKey(r, "")
	if err != nil {
		return err
	}
	msg := req.Message
	if msg == "" {
		msg = describeOps(req.Ops)
	}
	if rev, ok, err := s.replayed(r, ws, key, msg); err != nil || ok {
		if err != nil {
			return err
		}
		return answerReplay(w, http.StatusOK, rev)
	}
	// The chunks content ops name are the caller's claims: only its own
	// count (docs/SECURITY.md, Chunks).
	info := commitInfo(r, req.Base, msg)
	info.Confine = true
	info.Bound = &bound
	rev, replayed, err := s.Store.CommitOnce(r.Context(), ws.ID, &core.Batch{Ops: req.Ops}, info)
	if errors.Is(err, core.ErrTooLarge) {
		return failure(wire.ErrTooLarge, "ops: %v; nothing was committed", err)
	}
	if err != nil {
		return err
	}
	return s.answerCommit(w, rev, replayed)
}

// sentBody is a request's body read through a sentReader.
type sentBody struct {
	*sentReader
	io.Closer
}

// describeOps is the default message of a batch: its first op and a count.
func describeOps(ops []core.Op) string {
	d := ops[0].String()
	if len(ops) > 1 {
		d += fmt.Sprintf(" (+%d more)", len(ops)-1)
	}
	return d
}

// edit replaces a unique occurrence of Old (or every one, with All) in a
// text file and commits one revision, failing with a conflict if the file
// changed between the read and the commit.
func (s *Server) edit(w http.ResponseWriter, r *http.Request) error {
	var req wire.Edit
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Old == "" {
		return badRequest("edit: the old string is empty")
	}
	if req.Old == req.New {
		return badRequest("edit: the old and new strings are the same")
	}
	ws, err := s.workspace(r)
	if err != nil {
		return err
	}
	key, err := requestKey(r, req.Key)
	if err != nil {
		return err
	}
	if rev, ok, err := s.replayed(r, ws, key, "edit "+req.Path); err != nil || ok {
		if err != nil {
			return err
		}
		w.Header().Set(wire.HeaderRevision, strconv.FormatInt(rev.Rev, 10))
		return writeJSON(w, http.StatusOK, wire.EditResult{Revision: rev, Replayed: true})
	}
	sn, err := s.Store.Snapshot(r.Context(), ws.ID, core.Head)
	if err != nil {
		return err
	}
	data, err := s.readWhole(r, sn, req.Path)
	if err != nil {
		return err
	}
	n := bytes.Count(data, []byte(req.Old))
	switch {
	case n == 0:
		return badRequest("edit %s: the old string was not found", req.Path)
	case n > 1 && !req.All:
		return badRequest("edit %s: the old string matches %d times; give more context to make it unique, or use --all", req.Path, n)
	}
	// The result's size is known before it is built: refuse one over the
	// limit rather than let a short old string and a long new one, all
	// replaced, ask for gigabytes.
	if size := int64(len(data)) + int64(n)*(int64(len(req.New))-int64(len(req.Old))); size > s.Limits.MaxEditSize {
		return failure(wire.ErrTooLarge, "edit %s: the result would be %d bytes, over the limit of %d for edits", req.Path, size, s.Limits.MaxEditSize)
	}
	data = bytes.ReplaceAll(data, []byte(req.Old), []byte(req.New))
	var b core.Batch
	b.Add(core.Op{Kind: core.OpCreate, Path: req.Path, Data: data})
	info := commitInfo(r, sn.Rev, "edit "+req.Path)
	info.Key = key
	rev, replayed, err := s.Store.CommitOnce(r.Context(), ws.ID, &b, info)
	if err != nil {
		return err
	}
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(rev.Rev, 10))
	if replayed { // a retry with the same key committed while this one read the file
		return writeJSON(w, http.StatusOK, wire.EditResult{Revision: rev, Replayed: true})
	}
	s.Metrics.Committed(rev)
	return writeJSON(w, http.StatusOK, wire.EditResult{Revision: rev, Replacements: n})
}

// readWhole reads a regular file no larger than MaxEditSize.
func (s *Server) readWhole(r *http.Request, sn *fsstore.Snapshot, p string) ([]byte, error) {
	st, err := sn.Stat(r.Context(), p)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, &core.PathError{Op: "edit", Path: p, Err: core.ErrIsDir}
	}
	if !st.Mode.IsRegular() {
		return nil, badRequest("edit %s: not a regular file", p)
	}
	if st.Size > s.Limits.MaxEditSize {
		return nil, failure(wire.ErrTooLarge, "edit %s: %d bytes, over the limit of %d for edits", p, st.Size, s.Limits.MaxEditSize)
	}
	return sn.ReadFile(r.Context(), p)
}

package syncproto

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"sync"

	"computerd/core"
	"computerd/fsstore"
)

// Hello answers the handshake.
type Hello struct {
	Version   int    `json:"version"`
	ChunkSize int64  `json:"chunk_size"`
	Tenant    string `json:"tenant"`
}

// PullRequest asks for the changes of a workspace after revision Have
// (0: everything, as a full tree).
type PullRequest struct {
	Have int64 `json:"have"`
	// WS is the id of the home workspace whose revision Have is (0: not
	// known, a mirror pulled before version 4). A pull of a workspace of
	// another id, or of none known, is answered with the full tree: the
	// workspace of that name was deleted since and the name given to a
	// new one, whose revisions have nothing to do with Have.
	WS int64 `json:"ws_id,omitempty"`
	// InlineMax: if the chunks the changeset needs total at most this many
	// bytes they come in the same answer; otherwise the answer holds only
	// the changeset and the receiver asks for the chunks it lacks (Fetch).
	InlineMax int64 `json:"inline_max"`
}

// PullHeader opens a pull answer.
type PullHeader struct {
	WS        int64 `json:"ws_id"` // the home workspace's id: To is its revision
	From      int64 `json:"from"`  // 0 for a full tree
	To        int64 `json:"to"`
	Full      bool  `json:"full"`    // ops rebuild the whole tree (apply in order, after clearing it)
	Inline    bool  `json:"inline"`  // every chunk the ops name is in this stream
	NeedBytes int64 `json:"need"`    // total bytes of the chunks the ops name
	NeedCount int   `json:"nchunks"` // how many chunks the ops name
}

// FetchRequest asks for chunks named by the changeset From..To of a
// workspace (only those: a caller cannot read chunks it has no path to).
type FetchRequest struct {
	WS     int64       `json:"ws_id,omitempty"` // the pull's PullHeader.WS (0: not checked)
	From   int64       `json:"from"`
	To     int64       `json:"to"`
	Hashes []core.Hash `json:"hashes"`
}

// PushHeader opens a push stream.
type PushHeader struct {
	PushID string `json:"push_id"` // recorded as the revision's exec id; a retry with the same id never applies twice
	Base   int64  `json:"base"`    // the home revision the changes were made on
	// WS is the id of the home workspace whose revision Base is (0: not
	// known, taken to be the workspace pushed to). A push based on another
	// workspace (deleted since, its name now a new one's) is never applied
	// there: it is answered BaseGone.
	WS int64 `json:"ws_id,omitempty"`
	// Whole: the changeset builds the whole tree from nothing (as a full
	// pull's), and the home keeps it as a conflict copy forked at its
	// head, never applying it to the workspace: the answer to BaseGone.
	Whole   bool   `json:"whole,omitempty"`
	Message string `json:"message,omitempty"`
	// Source of the revision: exec (default) or interrupted (the writes of
	// a command whose executor died).
	Source core.Source `json:"source,omitempty"`
}

// PushResult answers a push.
type PushResult struct {
	// Revision is the push's revision: of the workspace pushed to, or, if
	// the push conflicted, of its conflict copy KeptAs.
	Revision  core.Revision `json:"revision"`
	Duplicate bool          `json:"duplicate,omitempty"` // this push id had already been applied (or kept)
	// Conflict lists the paths the home changed after the push's base
	// that the push changes too. The workspace is then unchanged, and the
	// home has kept the push's changes in a new workspace KeptAs, a fork
	// of it at the base (ConflictCopyName).
	Conflict []string `json:"conflict,omitempty"`
	KeptAs   string   `json:"kept_as,omitempty"`
	// BaseGone, when set, says why nothing was applied: the push's base
	// is no longer at the home (pruned by its retention, or a revision of
	// a workspace deleted since). The pusher sends its whole tree instead
	// (PushHeader.Whole), which the home keeps as a conflict copy.
	BaseGone string `json:"base_gone,omitempty"`
}

// Home serves the sync side of a home computerd.
type Home struct {
	Store *fsstore.Store
	// Observe, if set, is told about every transfer (for metrics).
	Observe func(kind string, chunks int, bytes int64)

	mu    sync.Mutex
	locks map[int64]*pushLock // per workspace while a push holds or waits for it
}

// pushLock makes the pushes to one workspace apply one at a time.
type pushLock struct {
	sync.Mutex
	users int // pushes holding or waiting for it, under Home.mu
}

func (h *Home) observe(kind string, chunks int, bytes int64) {
	if h.Observe != nil {
		h.Observe(kind, chunks, bytes)
	}
}

// CheckVersion refuses a request that speaks another protocol version.
func CheckVersion(r *http.Request) error {
	v := r.Header.Get(HeaderVersion)
	if v != strconv.Itoa(Version) {
		return fmt.Errorf("sync protocol version %q not supported: this computerd speaks version %d", v, Version)
	}
	return nil
}

// Hello answers the handshake for tenant.
func (h *Home) Hello(tenant string) Hello {
	return Hello{Version: Version, ChunkSize: h.Store.ChunkSizeBytes(), Tenant: tenant}
}

// chunkSource finds the bytes of the chunks a changeset names by reading
// its files at the changeset's target revision.
type chunkSource struct {
	sn        *fsstore.Snapshot
	chunkSize int64
}

func (c chunkSource) read(ctx context.Context, p string, ref core.ChunkRef, buf []byte) ([]byte, error) {
	f, err := c.sn.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	buf = buf[:ref.Len]
	if _, err := f.ReadAt(buf, ref.Index*c.chunkSize); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if sha256.Sum256(buf) != [32]byte(ref.Hash) {
		return nil, fmt.Errorf("sync: %s chunk %d does not match its hash", p, ref.Index)
	}
	return buf, nil
}

// contentRefs lists the chunk refs of the content ops each gives (see
// Encoder.ChangesetOf), with the path to read each from.
func contentRefs(each func(func(core.Op) error) error, fn func(p string, ref core.ChunkRef) error) error {
	return each(func(op core.Op) error {
		if op.Content == nil {
			return nil
		}
		for _, ref := range op.Content.Chunks {
			if ref.Hash == (core.Hash{}) {
				continue
			}
			if err := fn(op.Path, ref); err != nil {
				return err
			}
		}
		return nil
	})
}

// eachOp gives the ops of a []core.Op one at a time, as ChangesetOf and
// contentRefs take them.
func eachOp(ops []core.Op) func(func(core.Op) error) error {
	return func(fn func(core.Op) error) error {
		for _, op := range ops {
			if err := fn(op); err != nil {
				return err
			}
		}
		return nil
	}
}

// Pull writes the answer to a pull of ws (Have..head, or the full tree).
// The changeset is read op by op from the store's diff (an
// fsstore.DiffStream), never held whole.
//
// The full tree answers a pull with nothing to diff from: Have 0, a Have
// this workspace no longer holds (pruned while the mirror was away), or a
// mirror of another workspace of the same name (req.WS), or of one not
// known.
func (h *Home) Pull(ctx context.Context, w io.Writer, ws core.Workspace, req PullRequest) error {
	sn, err := h.Store.Snapshot(ctx, ws.ID, core.Head)
	if err != nil {
		return err
	}
	if req.Have <= 0 || req.WS != ws.ID {
		return h.pullFull(ctx, w, ws.ID, sn)
	}
	d, err := h.Store.OpenDiff(ctx, ws.ID, req.Have, sn.Rev)
	if errors.Is(err, core.ErrUnknownRevision) {
		return h.pullFull(ctx, w, ws.ID, sn)
	}
	if err != nil {
		return err
	}
	defer d.Close()
	hdr := PullHeader{WS: ws.ID, From: d.From, To: d.To}
	err = d.EachChunk(func(ref core.ChunkRef) error {
		hdr.NeedBytes += int64(ref.Len)
		hdr.NeedCount++
		return nil
	})
	if err != nil {
		return err
	}
	hdr.Inline = hdr.NeedBytes <= req.InlineMax
	enc := NewEncoder(w)
	if err := enc.Header(hdr); err != nil {
		return err
	}
	if hdr.Inline {
		n, bytes, err := sendDiffChunks(ctx, enc, d, nil, h.Store.ChunkSizeBytes())
		h.observe("pull", n, bytes)
		if err != nil {
			return err
		}
	}
	if err := enc.ChangesetOf(d.From, d.To, d.Each); err != nil {
		return err
	}
	return enc.Close()
}

// sendChunks writes the chunks cs names, each once, reading them from
// src, and counts them (a push: its changeset is in memory already).
func sendChunks(ctx context.Context, enc *Encoder, src chunkSource, cs *core.Changeset) (int, int64, error) {
	sent := map[core.Hash]bool{}
	buf := make([]byte, src.chunkSize)
	var n int
	var bytes int64
	err := contentRefs(eachOp(cs.Ops), func(p string, ref core.ChunkRef) error {
		if sent[ref.Hash] {
			return nil
		}
		data, err := src.read(ctx, p, ref, buf)
		if err != nil {
			return err
		}
		sent[ref.Hash] = true
		n++
		bytes += int64(len(data))
		return enc.Chunk(ref.Hash, data)
	})
	return n, bytes, err
}

// sendDiffChunks writes the chunks d names (only those in want, if not
// nil), each once, and counts them: the diff sorts them by hash on disk,
// so no set of the hashes sent is held.
func sendDiffChunks(ctx context.Context, enc *Encoder, d *fsstore.DiffStream, want map[core.Hash]bool, chunkSize int64) (int, int64, error) {
	buf := make([]byte, chunkSize)
	var n int
	var bytes int64
	err := d.EachChunk(func(ref core.ChunkRef) error {
		if want != nil && !want[ref.Hash] {
			return nil
		}
		data, err := d.ReadChunk(ctx, ref, buf)
		if err != nil {
			return err
		}
		buf = data[:0]
		n++
		bytes += int64(len(data))
		return enc.Chunk(ref.Hash, data)
	})
	return n, bytes, err
}

// maxSentSet bounds the hashes a full pull remembers having sent (32 bytes
// and a map entry each, about 5 MiB): a chunk met again among that many is
// sent once; in a tree of more distinct chunks, one met again after the
// set was cleared is sent again (the receiver stores it once).
const maxSentSet = 1 << 16

// pullFull streams the whole tree of workspace ws.
func (h *Home) pullFull(ctx context.Context, w io.Writer, ws int64, sn *fsstore.Snapshot) error {
	enc := NewEncoder(w)
	if err := enc.Header(PullHeader{WS: ws, To: sn.Rev, Full: true, Inline: true}); err != nil {
		return err
	}
	nchunks, nbytes, err := writeTree(ctx, enc, h.Store, sn)
	h.observe("pull", nchunks, nbytes)
	return err
}

// writeTree writes, after a header, the whole tree of sn: every chunk,
// then a changeset that rebuilds the tree in order (parents first), and
// the trailer; it counts the chunks sent. The ops wait in an
// fsstore.OpSpool (packed, on disk past a few MiB) while the chunks go.
// A full pull sends this, and so does a push whose base is gone.
func writeTree(ctx context.Context, enc *Encoder, st *fsstore.Store, sn *fsstore.Snapshot) (int, int64, error) {
	ops := st.NewOpSpool()
	defer ops.Close()
	sent := map[core.Hash]bool{}
	buf := make([]byte, st.ChunkSizeBytes())
	var nchunks int
	var nbytes int64
	var content core.Content
	err := sn.ReadTree(ctx, "", func(p string, st core.Stat, r io.Reader) error {
		mtime := st.Mtime.UnixNano()
		var err error
		switch {
		case p == "":
			return ops.Add(core.Op{Kind: core.OpChmod, Path: "", Mode: st.Mode.Perm()})
		case st.IsDir():
			err = ops.Add(core.Op{Kind: core.OpMkdir, Path: p, Mode: st.Mode.Perm() | st.Mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)})
		case st.Mode&fs.ModeSymlink != 0:
			err = ops.Add(core.Op{Kind: core.OpSymlink, Path: p, Target: st.Target, Mtime: mtime})
		case core.IsSpecial(st.Mode):
			err = ops.Add(core.Op{Kind: core.OpMknod, Path: p, Mode: st.Mode, Rdev: st.Rdev, Mtime: mtime})
		default:
			content = core.Content{Size: st.Size, Chunks: content.Chunks[:0]}
			for idx := int64(0); ; idx++ {
				n, err := io.ReadFull(r, buf)
				if n > 0 && !allZero(buf[:n]) {
					hash := core.Hash(sha256.Sum256(buf[:n]))
					content.Chunks = append(content.Chunks, core.ChunkRef{Index: idx, Hash: hash, Len: n})
					if !sent[hash] {
						if len(sent) >= maxSentSet {
							clear(sent)
						}
						sent[hash] = true
						nchunks++
						nbytes += int64(n)
						if err := enc.Chunk(hash, buf[:n]); err != nil {
							return err
						}
					}
				}
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					break
				}
				if err != nil {
					return err
				}
			}
			err = ops.Add(core.Op{Kind: core.OpCreate, Path: p, Mode: st.Mode.Perm() | st.Mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky), Content: &content, Mtime: mtime})
		}
		if err == nil && (st.UID != 0 || st.GID != 0) {
			err = ops.Add(core.Op{Kind: core.OpChown, Path: p, UID: st.UID, GID: st.GID})
		}
		if err == nil && st.IsDir() {
			err = ops.Add(core.Op{Kind: core.OpUtimes, Path: p, Mtime: mtime})
		}
		return err
	})
	if err != nil {
		return nchunks, nbytes, err
	}
	if err := enc.ChangesetOf(0, sn.Rev, ops.Each); err != nil {
		return nchunks, nbytes, err
	}
	return nchunks, nbytes, enc.Close()
}

func allZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// Fetch streams the chunks asked for, all of them named by ws's changeset From..To.
func (h *Home) Fetch(ctx context.Context, w io.Writer, ws core.Workspace, req FetchRequest) error {
	if req.WS != 0 && req.WS != ws.ID {
		return fmt.Errorf("fetch: workspace %s is no longer the one pulled (id %d, now %d): %w", ws.Name, req.WS, ws.ID, core.ErrUnknownRevision)
	}
	d, err := h.Store.OpenDiff(ctx, ws.ID, req.From, req.To)
	if err != nil {
		return err
	}
	defer d.Close()
	want := map[core.Hash]bool{}
	for _, hash := range req.Hashes {
		want[hash] = true
	}
	enc := NewEncoder(w)
	if err := enc.Header(PullHeader{WS: ws.ID, From: req.From, To: req.To, Inline: true}); err != nil {
		return err
	}
	n, bytes, err := sendDiffChunks(ctx, enc, d, want, h.Store.ChunkSizeBytes())
	h.observe("pull", n, bytes)
	if err != nil {
		return err
	}
	if err := enc.Changeset(&core.Changeset{From: req.From, To: req.To}); err != nil {
		return err
	}
	return enc.Close()
}

// lock takes workspace ws's push lock; the func it returns releases it.
// A lock no push holds or waits for goes, so the map holds only
// workspaces being pushed to (not every id ever pushed to, deleted ones
// included).
func (h *Home) lock(ws int64) func() {
	h.mu.Lock()
	if h.locks == nil {
		h.locks = map[int64]*pushLock{}
	}
	l := h.locks[ws]
	if l == nil {
		l = &pushLock{}
		h.locks[ws] = l
	}
	l.users++
	h.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		h.mu.Lock()
		if l.users--; l.users == 0 {
			delete(h.locks, ws)
		}
		h.mu.Unlock()
	}
}

// Push reads a push stream for ws and applies it as one revision, or, if
// it conflicts, keeps it as one revision of a new workspace (see
// PushResult); or finds what an earlier attempt with the same push id made.
func (h *Home) Push(ctx context.Context, r io.Reader, ws core.Workspace, tenant string) (PushResult, error) {
	dec := NewDecoder(r)
	var hdr PushHeader
	if err := dec.Header(&hdr); err != nil {
		return PushResult{}, err
	}
	if hdr.PushID == "" || hdr.Base <= 0 {
		return PushResult{}, fmt.Errorf("%w: push needs a push id and a base revision", ErrMalformed)
	}
	switch hdr.Source {
	case "":
		hdr.Source = core.SourceSync
	case core.SourceSync, core.SourceExec, core.SourceInterrupted:
	default:
		return PushResult{}, fmt.Errorf("%w: push source %q", ErrMalformed, hdr.Source)
	}
	left, err := h.Store.Remaining(ctx, tenant)
	if err != nil {
		return PushResult{}, err
	}
	up := h.Store.NewUploader()
	defer up.Close() // the pushed chunks stay safe from GC until the push is applied
	up.Meter(left)
	var nchunks int
	var nbytes int64
	var cs *Received
	for cs == nil {
		hash, data, c, err := dec.Next()
		if err != nil {
			return PushResult{}, err
		}
		if c != nil {
			cs = c
			break
		}
		if err := storeChunk(ctx, up, hash, data); err != nil {
			return PushResult{}, err
		}
		nchunks++
		nbytes += int64(len(data))
	}
	if err := up.Flush(ctx); err != nil {
		return PushResult{}, err
	}
	up.IdentifyPacked(cs.Ops)
	h.observe("push", nchunks, nbytes)
	unlock := h.lock(ws.ID)
	defer unlock()
	if rev, err := h.Store.ExecRevision(ctx, ws.ID, hdr.PushID); err != nil {
		return PushResult{}, err
	} else if rev > 0 {
		r, err := h.Store.RevisionInfo(ctx, ws.ID, rev)
		if err == nil {
			return PushResult{Revision: r, Duplicate: true}, nil
		}
		if !errors.Is(err, core.ErrUnknownRevision) {
			return PushResult{}, err
		}
		// Pruned since: applied again, as a new push.
	}
	if cs.Ops.Len() == 0 {
		return PushResult{}, nil
	}
	info := fsstore.CommitInfo{
		Source: hdr.Source, Tenant: tenant, ExecID: hdr.PushID, Base: hdr.Base, Message: hdr.Message, Metered: true,
		// A hash is no key to the home's chunks: the changeset may name
		// only those the push sent or the tenant's workspaces hold.
		Confine: true, Sent: up,
	}
	copyName := ConflictCopyName(ws.Name, hdr.PushID)
	if hdr.Whole {
		res, err := h.Store.KeepTreePacked(ctx, ws.ID, cs.Ops, info, copyName)
		if err != nil {
			return PushResult{}, err
		}
		return PushResult{Revision: res.Revision, Duplicate: res.Duplicate, KeptAs: res.Copy.Name}, nil
	}
	if hdr.WS != 0 && hdr.WS != ws.ID {
		return PushResult{BaseGone: fmt.Sprintf("its base is revision %d of workspace id %d, deleted since; %s is now workspace id %d", hdr.Base, hdr.WS, ws.Name, ws.ID)}, nil
	}
	// A conflict is kept here, in the push's own transaction, rather than
	// left to the pusher: an executor would need the API (and two more
	// round trips that a crash could split) to fork and push again.
	res, err := h.Store.ApplyOrKeepPacked(ctx, ws.ID, cs.From, cs.Ops, info, copyName)
	if errors.Is(err, core.ErrUnknownRevision) {
		// Only the base is looked up: it was pruned (or never was).
		return PushResult{BaseGone: fmt.Sprintf("its base, revision %d of %s, is no longer kept (%v)", hdr.Base, ws.Name, err)}, nil
	}
	if err != nil {
		return PushResult{}, err
	}
	return PushResult{Revision: res.Revision, Duplicate: res.Duplicate, Conflict: res.Conflict, KeptAs: res.Copy.Name}, nil
}

// ConflictCopyName names the workspace that keeps a conflicting push of
// ws: "WS.conflict-PUSHID", as the copies of conflicting execs and mounts
// are named (fsstore.CopyName, which shortens what would not be a
// workspace name). The store adds -2, -3, ... if the name is taken.
func ConflictCopyName(ws, pushID string) string {
	return fsstore.CopyName(ws, "conflict", pushID)
}

// storeChunk stores one received chunk; the decoder has checked its hash.
// A chunk the store refuses is malformed; any other failure (the quota, a
// full disk, one of the batch before) is the store's.
func storeChunk(ctx context.Context, up *fsstore.Uploader, hash core.Hash, data []byte) error {
	err := up.PutChunk(ctx, hash, data)
	if errors.Is(err, core.ErrInvalidArgument) {
		return fmt.Errorf("%w: chunk %s: %w", ErrMalformed, hash, err)
	}
	return err
}

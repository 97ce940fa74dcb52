package syncproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// DefaultInlineMax is how many chunk bytes a pull takes in its first answer
// before switching to asking for only the chunks it lacks.
const DefaultInlineMax = 4 << 20

// Client talks to a home computerd as one tenant.
type Client struct {
	URL   string
	Token string
	HTTP  *http.Client
}

// caller is c's request path: the API clients' own, plus the protocol
// version on every request. Its failures are *wire.Error values that
// classify by the core sentinels (a conflict as a *core.ConflictError).
func (c *Client) caller() *wire.Caller {
	return &wire.Caller{BaseURL: c.URL, Token: c.Token, HTTP: c.HTTP,
		Header: http.Header{HeaderVersion: {strconv.Itoa(Version)}}}
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	resp, err := c.caller().Do(ctx, wire.Request{Method: method, Path: path, Body: body})
	if err != nil {
		return nil, homeError(err)
	}
	return resp, nil
}

// homeError names what went wrong on the way to the home. An answer the
// home gave (wire's JSON error body) keeps its kind. Anything else is
// ErrUnreachable: no answer (refused, reset, cut, timed out), or an
// answer the home's API did not make (a bare status from an HTTP server
// that could not read the request, a proxy's page, a gateway's 502) —
// either way the transport failed, and says nothing of the request.
func homeError(err error) error {
	var we *wire.Error
	switch {
	case errors.As(err, &we) && !we.Foreign:
		return fmt.Errorf("home: %w", err)
	case errors.As(err, &we):
		return fmt.Errorf("%w: answered %s", ErrUnreachable, we.Message)
	case errors.Is(err, context.Canceled):
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnreachable, transportCause(err))
}

// transportCause is err less the method and URL net/http puts before it
// (the URL is the home's, which the caller's message names already).
func transportCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (c *Client) post(ctx context.Context, path string, in any) (*http.Response, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, "POST", path, bytes.NewReader(b))
}

// syncPath is the URL path of sync call op on workspace ws; a name that is
// not one path segment is refused (wire.PathSegment), before any request.
func syncPath(ws, op string) (string, error) {
	seg, err := wire.PathSegment("workspace", ws)
	if err != nil {
		return "", err
	}
	return "/v1/sync/" + seg + "/" + op, nil
}

// Hello checks that the home speaks this protocol and returns its parameters.
func (c *Client) Hello(ctx context.Context) (Hello, error) {
	resp, err := c.do(ctx, "GET", "/v1/sync/hello", nil)
	if err != nil {
		return Hello{}, err
	}
	defer resp.Body.Close()
	var h Hello
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h, err
	}
	if h.Version != Version {
		return h, fmt.Errorf("home speaks sync protocol version %d, this computerd %d", h.Version, Version)
	}
	return h, nil
}

// Mirror keeps workspaces of a local store equal to the home's: the store
// records which home workspace and revision each mirror's head equals
// (fsstore's Store.Mirror), in the transaction of the pull that made it.
// Pulls of one workspace run one at a time.
type Mirror struct {
	Client *Client
	Store  *fsstore.Store
	Tenant string
	// InlineMax overrides DefaultInlineMax.
	InlineMax int64
	// Progress, if set, hears about received chunks.
	Progress func(chunks int, bytes int64)

	mu    sync.Mutex
	pulls map[string]*pullLock // per workspace name while a pull holds or waits for it
}

// pullLock makes the pulls of one workspace run one at a time: two at
// once would each read the mirror's head and commit on it, and the
// second commit would conflict with the first.
type pullLock struct {
	sync.Mutex
	users int // pulls holding or waiting for it, under Mirror.mu
}

// lock takes workspace ws's pull lock; the func it returns releases it.
func (m *Mirror) lock(ws string) func() {
	m.mu.Lock()
	if m.pulls == nil {
		m.pulls = map[string]*pullLock{}
	}
	l := m.pulls[ws]
	if l == nil {
		l = &pullLock{}
		m.pulls[ws] = l
	}
	l.users++
	m.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		m.mu.Lock()
		if l.users--; l.users == 0 {
			delete(m.pulls, ws)
		}
		m.mu.Unlock()
	}
}

// PullStats describe one pull.
type PullStats struct {
	HomeRev  int64 // the home revision the mirror now equals
	HomeWS   int64 // the id of the home workspace it is a revision of
	Local    core.Workspace
	Chunks   int   // chunks received
	Bytes    int64 // chunk bytes received
	Requests int   // round trips
}

// State returns the local mirror of ws, the home revision its head
// equals (0 when it was never pulled, or changed locally since) and the
// id of the home workspace that revision is of (0: not known).
func (m *Mirror) State(ctx context.Context, ws string) (core.Workspace, fsstore.Mirrored, error) {
	local, err := m.Store.Workspace(ctx, m.Tenant, ws)
	if errors.Is(err, core.ErrWorkspaceNotFound) {
		if local, err = m.Store.CreateWorkspace(ctx, m.Tenant, ws); err != nil {
			return local, fsstore.Mirrored{}, err
		}
	}
	if err != nil {
		return local, fsstore.Mirrored{}, err
	}
	rec, err := m.Store.Mirror(ctx, local.ID)
	if err != nil || rec.Rev != local.Head {
		return local, fsstore.Mirrored{HomeWS: rec.HomeWS}, err
	}
	return local, rec, nil
}

// Pull brings the mirror of ws up to the home's head. Pulls of one
// workspace wait for each other: the second finds the mirror at the
// head (or near it) and has little or nothing to do.
func (m *Mirror) Pull(ctx context.Context, ws string) (PullStats, error) {
	defer m.lock(ws)()
	st, err := m.pull(ctx, ws)
	if errors.Is(err, ErrCut) {
		err = fmt.Errorf("%w: the answer was cut: %w", ErrUnreachable, err)
	}
	return st, err
}

func (m *Mirror) pull(ctx context.Context, ws string) (PullStats, error) {
	local, rec, err := m.State(ctx, ws)
	if err != nil {
		return PullStats{}, err
	}
	have := rec.HomeRev
	st := PullStats{Local: local, HomeRev: have, HomeWS: rec.HomeWS}
	inline := m.InlineMax
	if inline <= 0 {
		inline = DefaultInlineMax
	}
	p, err := syncPath(ws, "pull")
	if err != nil {
		return st, err
	}
	resp, err := m.Client.post(ctx, p, PullRequest{Have: have, WS: rec.HomeWS, InlineMax: inline})
	st.Requests++
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	dec := NewDecoder(resp.Body)
	var hdr PullHeader
	if err := dec.Header(&hdr); err != nil {
		return st, err
	}
	// One Uploader for every chunk of the pull, held until the commit: its
	// leases keep GC off them meanwhile.
	up := m.Store.NewUploader()
	defer up.Close()
	cs, err := m.receiveChunks(ctx, up, dec, &st, nil)
	if err != nil {
		return st, err
	}
	if !hdr.Inline {
		if err := m.fetchMissing(ctx, up, ws, hdr, cs, &st); err != nil {
			return st, err
		}
	}
	if !hdr.Full && hdr.WS != rec.HomeWS {
		// Only a full tree may come from a workspace the mirror does not copy.
		return st, fmt.Errorf("%w: the home answered a pull of workspace id %d with a diff of workspace id %d", ErrMalformed, rec.HomeWS, hdr.WS)
	}
	if hdr.To == have && !hdr.Full {
		return st, nil // nothing new
	}
	if !hdr.Full && cs.Ops.Len() == 0 {
		// The home has new revisions but nothing the mirror lacks: record
		// that the head equals the new home revision, and commit nothing.
		if err := m.Store.RecordMirror(ctx, local.ID, fsstore.Mirrored{Rev: local.Head, HomeRev: hdr.To, HomeWS: hdr.WS}); err != nil {
			return st, err
		}
		st.HomeRev, st.HomeWS = hdr.To, hdr.WS
		return st, nil
	}
	info := fsstore.CommitInfo{Source: core.SourceSync, Tenant: m.Tenant, HomeRev: hdr.To, HomeWS: hdr.WS, Message: fmt.Sprintf("pull of home@%d", hdr.To)}
	// The ops are committed as they came, packed: never a []core.Op.
	if hdr.Full {
		_, err = m.Store.ReplaceTreePacked(ctx, local.ID, cs.Ops, info)
	} else {
		info.Base = local.Head
		_, err = m.Store.ApplyPacked(ctx, local.ID, cs.From, cs.Ops, info)
	}
	if err != nil {
		return st, fmt.Errorf("apply pull of home@%d: %w", hdr.To, err)
	}
	st.HomeRev, st.HomeWS = hdr.To, hdr.WS
	st.Local, err = m.Store.WorkspaceByID(ctx, local.ID)
	return st, err
}

// receiveChunks stores the chunks of a stream and returns its changeset.
// The row ids of the chunks stored are noted in the changeset named, or
// else in the stream's own (see fsstore.Uploader.Identify).
func (m *Mirror) receiveChunks(ctx context.Context, up *fsstore.Uploader, dec *Decoder, st *PullStats, named *Received) (*Received, error) {
	for {
		hash, data, cs, err := dec.Next()
		if err != nil {
			return nil, err
		}
		if cs != nil {
			if err := up.Flush(ctx); err != nil {
				return nil, err
			}
			if named == nil {
				named = cs
			}
			up.IdentifyPacked(named.Ops)
			return cs, nil
		}
		if err := storeChunk(ctx, up, hash, data); err != nil {
			return nil, err
		}
		st.Chunks++
		st.Bytes += int64(len(data))
		if m.Progress != nil {
			m.Progress(st.Chunks, st.Bytes)
		}
	}
}

// fetchMissing asks the home for the chunks cs names that the store lacks.
func (m *Mirror) fetchMissing(ctx context.Context, up *fsstore.Uploader, ws string, hdr PullHeader, cs *Received, st *PullStats) error {
	var hashes []core.Hash
	seen := map[core.Hash]bool{}
	contentRefs(cs.Ops.Each, func(_ string, ref core.ChunkRef) error {
		if !seen[ref.Hash] {
			seen[ref.Hash] = true
			hashes = append(hashes, ref.Hash)
		}
		return nil
	})
	have, err := up.HasChunks(ctx, hashes) // and holds them until the commit
	if err != nil {
		return err
	}
	var want []core.Hash
	for i, h := range hashes {
		if !have[i] {
			want = append(want, h)
		}
	}
	if len(want) == 0 {
		return nil
	}
	p, err := syncPath(ws, "fetch")
	if err != nil {
		return err
	}
	resp, err := m.Client.post(ctx, p, FetchRequest{WS: hdr.WS, From: hdr.From, To: hdr.To, Hashes: want})
	st.Requests++
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := NewDecoder(resp.Body)
	var fh PullHeader
	if err := dec.Header(&fh); err != nil {
		return err
	}
	_, err = m.receiveChunks(ctx, up, dec, st, cs)
	return err
}

// Push sends the changeset cs of the local workspace (whose bytes are read
// at revision cs.To of local) to the home, based on home revision
// hdr.Base. A conflict is no error: the home kept the changes in a new
// workspace, and the result's Conflict and KeptAs say so.
//
// An answer with BaseGone set applied nothing: the caller sends the whole
// tree instead (PushWhole). Any error says nothing was learnt of the
// push's fate: it may have been applied (a retry with the same push id
// finds it) or not.
func (m *Mirror) Push(ctx context.Context, ws string, local int64, cs *core.Changeset, hdr PushHeader) (PushResult, error) {
	sn, err := m.Store.Snapshot(ctx, local, cs.To)
	if err != nil {
		return PushResult{}, err
	}
	hdr.Whole = false
	return m.push(ctx, ws, hdr, func(enc *Encoder) error {
		if _, _, err := sendChunks(ctx, enc, chunkSource{sn: sn, chunkSize: m.Store.ChunkSizeBytes()}, cs); err != nil {
			return err
		}
		if err := enc.Changeset(cs); err != nil {
			return err
		}
		return enc.Close()
	})
}

// PushWhole sends the whole tree of revision rev of the local workspace
// (every chunk it names, then the ops that build it), which the home keeps
// as a conflict copy of ws forked at its head, never applying it to ws:
// for changes whose base the home no longer has (PushResult.BaseGone).
// hdr is the push's, whose push id makes a retry find the copy.
func (m *Mirror) PushWhole(ctx context.Context, ws string, local, rev int64, hdr PushHeader) (PushResult, error) {
	sn, err := m.Store.Snapshot(ctx, local, rev)
	if err != nil {
		return PushResult{}, err
	}
	hdr.Whole = true
	return m.push(ctx, ws, hdr, func(enc *Encoder) error {
		_, _, err := writeTree(ctx, enc, m.Store, sn)
		return err
	})
}

// push streams a push of ws (hdr, then what body writes) and reads the answer.
func (m *Mirror) push(ctx context.Context, ws string, hdr PushHeader, body func(*Encoder) error) (PushResult, error) {
	p, err := syncPath(ws, "push")
	if err != nil {
		return PushResult{}, err
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		enc := NewEncoder(pw)
		err := enc.Header(hdr)
		if err == nil {
			err = body(enc)
		}
		pw.CloseWithError(err)
	}()
	resp, err := m.Client.do(ctx, "POST", p, pr)
	pr.CloseWithError(errPushOver)
	<-done // the snapshot is read no more once push returns
	if err != nil {
		return PushResult{}, err
	}
	defer resp.Body.Close()
	var res PushResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		// The answer was cut: the push may have been applied or not.
		return PushResult{}, fmt.Errorf("%w: the answer to a push was cut: %v", ErrUnreachable, err)
	}
	return res, nil
}

// errPushOver ends the writing of a push's body once its answer came
// (or the request failed).
var errPushOver = errors.New("sync: push over")

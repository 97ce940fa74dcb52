package syncproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

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
		return nil, fmt.Errorf("home: %w", err)
	}
	return resp, nil
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
// records which home revision each mirror's head equals (fsstore's
// Store.Mirror), in the transaction of the pull that made it.
type Mirror struct {
	Client *Client
	Store  *fsstore.Store
	Tenant string
	// InlineMax overrides DefaultInlineMax.
	InlineMax int64
	// Progress, if set, hears about received chunks.
	Progress func(chunks int, bytes int64)
}

// PullStats describe one pull.
type PullStats struct {
	HomeRev  int64 // the home revision the mirror now equals
	Local    core.Workspace
	Chunks   int   // chunks received
	Bytes    int64 // chunk bytes received
	Requests int   // round trips
}

// State returns the local mirror of ws and the home revision its head
// equals (0 when it was never pulled, or changed locally since).
func (m *Mirror) State(ctx context.Context, ws string) (core.Workspace, int64, error) {
	local, err := m.Store.Workspace(ctx, m.Tenant, ws)
	if errors.Is(err, core.ErrWorkspaceNotFound) {
		if local, err = m.Store.CreateWorkspace(ctx, m.Tenant, ws); err != nil {
			return local, 0, err
		}
	}
	if err != nil {
		return local, 0, err
	}
	rev, home, err := m.Store.Mirror(ctx, local.ID)
	if err != nil || rev != local.Head {
		return local, 0, err
	}
	return local, home, nil
}

// Pull brings the mirror of ws up to the home's head.
func (m *Mirror) Pull(ctx context.Context, ws string) (PullStats, error) {
	local, have, err := m.State(ctx, ws)
	if err != nil {
		return PullStats{}, err
	}
	st := PullStats{Local: local, HomeRev: have}
	inline := m.InlineMax
	if inline <= 0 {
		inline = DefaultInlineMax
	}
	p, err := syncPath(ws, "pull")
	if err != nil {
		return st, err
	}
	resp, err := m.Client.post(ctx, p, PullRequest{Have: have, InlineMax: inline})
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
	if hdr.To == have && !hdr.Full {
		return st, nil // nothing new
	}
	if !hdr.Full && cs.Ops.Len() == 0 {
		// The home has new revisions but nothing the mirror lacks: record
		// that the head equals the new home revision, and commit nothing.
		if err := m.Store.RecordMirror(ctx, local.ID, local.Head, hdr.To); err != nil {
			return st, err
		}
		st.HomeRev = hdr.To
		return st, nil
	}
	info := fsstore.CommitInfo{Source: core.SourceSync, Tenant: m.Tenant, HomeRev: hdr.To, Message: fmt.Sprintf("pull of home@%d", hdr.To)}
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
	st.HomeRev = hdr.To
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
	resp, err := m.Client.post(ctx, p, FetchRequest{From: hdr.From, To: hdr.To, Hashes: want})
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
func (m *Mirror) Push(ctx context.Context, ws string, local int64, cs *core.Changeset, hdr PushHeader) (PushResult, error) {
	p, err := syncPath(ws, "push")
	if err != nil {
		return PushResult{}, err
	}
	sn, err := m.Store.Snapshot(ctx, local, cs.To)
	if err != nil {
		return PushResult{}, err
	}
	pr, pw := io.Pipe()
	go func() {
		enc := NewEncoder(pw)
		err := enc.Header(hdr)
		if err == nil {
			_, _, err = sendChunks(ctx, enc, chunkSource{sn: sn, chunkSize: m.Store.ChunkSizeBytes()}, cs)
		}
		if err == nil {
			err = enc.Changeset(cs)
		}
		if err == nil {
			err = enc.Close()
		}
		pw.CloseWithError(err)
	}()
	resp, err := m.Client.do(ctx, "POST", p, pr)
	pr.Close()
	if err != nil {
		return PushResult{}, err
	}
	defer resp.Body.Close()
	var res PushResult
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

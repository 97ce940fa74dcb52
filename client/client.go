// Package client is the Go client of computerd's HTTP API (v1): every call
// agentctl makes, and every tool call a model makes through package tools,
// goes through it. Bodies stream in both directions.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"computerd/core"
	"computerd/wire"
)

// Client calls one computerd as one tenant. Its failures are
// *wire.Error values that errors.Is and errors.As classify by the core
// sentinels, exactly as the store's own errors.
type Client struct {
	wire.Caller
	// ExecBusyRetries bounds how often Exec asks again after a busy
	// answer (the server at its bound on running execs, which journals
	// nothing, so asking again is safe); 0 means DefaultExecBusyRetries,
	// a negative value never.
	ExecBusyRetries int
}

// DefaultExecBusyRetries lets Exec ride out a burst of about half a minute
// at the server's usual Retry-After of a second.
const DefaultExecBusyRetries = 30

// maxBusyWait caps one wait for Retry-After, however long the server asks.
const maxBusyWait = 30 * time.Second

// New returns a client for the server at baseURL using token.
func New(baseURL, token string) *Client {
	return &Client{Caller: wire.Caller{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{}}}
}

// IsNotFound reports whether err says that what a call named does not
// exist: a path, a workspace or a revision.
func IsNotFound(err error) bool {
	return errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrWorkspaceNotFound) || errors.Is(err, core.ErrUnknownRevision)
}

// escapePath validates a workspace path and escapes each segment for a
// URL; "." and ".." never reach the server (whose router would clean them).
func escapePath(p string) (string, error) {
	clean, err := core.CleanPath(p)
	if err != nil {
		return "", err
	}
	segs := strings.Split(clean, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/"), nil
}

// fileURL is the URL path of p under one of a workspace's path routes.
func fileURL(ws, route, p string) (string, error) {
	e, err := escapePath(p)
	if err != nil {
		return "", err
	}
	return wsPath(ws, route, e)
}

// wsPath is the URL path of workspace ws's route rest (fixed text, or
// segments already escaped); a workspace name that is not one path
// segment is refused (wire.PathSegment), before any request.
func wsPath(ws string, rest ...string) (string, error) {
	seg, err := wire.PathSegment("workspace", ws)
	if err != nil {
		return "", err
	}
	return "/v1/workspaces/" + seg + strings.Join(rest, ""), nil
}

// execPath is the URL path of exec id of workspace ws, then rest.
func execPath(ws, id string, rest ...string) (string, error) {
	seg, err := wire.PathSegment("exec id", id)
	if err != nil {
		return "", err
	}
	return wsPath(ws, append([]string{"/execs/", seg}, rest...)...)
}

func revQuery(rev int64) url.Values {
	q := url.Values{}
	if rev > 0 {
		q.Set("rev", strconv.FormatInt(rev, 10))
	}
	return q
}

// Workspaces lists the tenant's workspaces.
func (c *Client) Workspaces(ctx context.Context) ([]core.Workspace, error) {
	var out []core.Workspace
	return out, c.Call(ctx, "GET", "/v1/workspaces", nil, nil, &out)
}

// CreateWorkspace makes an empty workspace.
func (c *Client) CreateWorkspace(ctx context.Context, name string) (core.Workspace, error) {
	var out core.Workspace
	return out, c.Call(ctx, "POST", "/v1/workspaces", nil, wire.CreateWorkspace{Name: name}, &out)
}

// Workspace describes one workspace.
func (c *Client) Workspace(ctx context.Context, name string) (core.Workspace, error) {
	var out core.Workspace
	p, err := wsPath(name)
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "GET", p, nil, nil, &out)
}

// DeleteWorkspace removes a workspace and its history.
func (c *Client) DeleteWorkspace(ctx context.Context, name string) error {
	p, err := wsPath(name)
	if err != nil {
		return err
	}
	return c.Call(ctx, "DELETE", p, nil, nil, nil)
}

// Fork makes workspace name from src at rev (0: head), copying no bytes.
func (c *Client) Fork(ctx context.Context, src, name string, rev int64) (core.Workspace, error) {
	var out core.Workspace
	p, err := wsPath(src, "/fork")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, wire.Fork{Name: name, Rev: rev}, &out)
}

// Log lists revisions, newest first (limit 0: all).
func (c *Client) Log(ctx context.Context, ws string, limit int) ([]core.Revision, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	p, err := wsPath(ws, "/log")
	if err != nil {
		return nil, err
	}
	var out []core.Revision
	return out, c.Call(ctx, "GET", p, q, nil, &out)
}

func diffQuery(from, to int64, format string) url.Values {
	q := url.Values{"format": {format}}
	if from > 0 {
		q.Set("from", strconv.FormatInt(from, 10))
	}
	if to > 0 {
		q.Set("to", strconv.FormatInt(to, 10))
	}
	return q
}

// Diff streams the unified diff from..to (0 for to: head; 0 for from: the revision before to).
func (c *Client) Diff(ctx context.Context, ws string, from, to int64) (io.ReadCloser, error) {
	p, err := wsPath(ws, "/diff")
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: p, Query: diffQuery(from, to, "unified")})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// DiffStat summarises from..to per file.
func (c *Client) DiffStat(ctx context.Context, ws string, from, to int64) ([]core.FileChange, error) {
	p, err := wsPath(ws, "/diff")
	if err != nil {
		return nil, err
	}
	var out []core.FileChange
	return out, c.Call(ctx, "GET", p, diffQuery(from, to, "stat"), nil, &out)
}

// Changeset returns the ops from..to.
func (c *Client) Changeset(ctx context.Context, ws string, from, to int64) (*core.Changeset, error) {
	p, err := wsPath(ws, "/diff")
	if err != nil {
		return nil, err
	}
	var out core.Changeset
	return &out, c.Call(ctx, "GET", p, diffQuery(from, to, "changeset"), nil, &out)
}

// Restore makes p (or the whole tree when p is "") as it was at rev, as a new revision.
func (c *Client) Restore(ctx context.Context, ws string, rev int64, p string) (core.Revision, error) {
	var out core.Revision
	u, err := wsPath(ws, "/restore")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", u, nil, wire.Restore{Rev: rev, Path: p}, &out)
}

// ReadOptions select what Read returns.
type ReadOptions struct {
	Rev   int64 // 0: head
	Line  int64 // first line, 1-based (0: the whole file)
	Lines int64 // number of lines (0: to the end)
}

// Read streams a file; the caller closes it.
func (c *Client) Read(ctx context.Context, ws, p string, opt ReadOptions) (io.ReadCloser, error) {
	q := revQuery(opt.Rev)
	if opt.Line > 0 {
		q.Set("line", strconv.FormatInt(opt.Line, 10))
	}
	if opt.Lines > 0 {
		q.Set("lines", strconv.FormatInt(opt.Lines, 10))
	}
	u, err := fileURL(ws, "/files/", p)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: u, Query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteOptions tune Write.
type WriteOptions struct {
	Mode      uint32 // permission bits; 0 keeps an existing file's (0644 for a new one)
	Base      int64  // fail with a conflict if p changed after this revision
	NoParents bool   // fail instead of creating missing parent directories
	Key       string // idempotency key: a retry with the same key writes nothing again
}

// Write replaces p's contents with r, streaming, as one revision.
func (c *Client) Write(ctx context.Context, ws, p string, r io.Reader, opt WriteOptions) (core.Revision, error) {
	q := url.Values{}
	if opt.Mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(opt.Mode), 8))
	}
	if opt.Base > 0 {
		q.Set("base", strconv.FormatInt(opt.Base, 10))
	}
	if opt.NoParents {
		q.Set("parents", "0")
	}
	u, err := fileURL(ws, "/files/", p)
	if err != nil {
		return core.Revision{}, err
	}
	req := wire.Request{Method: "PUT", Path: u, Query: q, Body: r, ContentType: "application/octet-stream"}
	if opt.Key != "" {
		req.Header = http.Header{wire.HeaderIdempotencyKey: {opt.Key}}
	}
	resp, err := c.Do(ctx, req)
	if err != nil {
		return core.Revision{}, err
	}
	defer resp.Body.Close()
	var out core.Revision
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// Stat describes p.
func (c *Client) Stat(ctx context.Context, ws, p string, rev int64) (core.Stat, error) {
	var out core.Stat
	u, err := fileURL(ws, "/stat/", p)
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "GET", u, revQuery(rev), nil, &out)
}

// List returns the entries of directory p (or p itself if it is not one).
func (c *Client) List(ctx context.Context, ws, p string, rev int64, recursive bool) ([]core.Stat, error) {
	out := []core.Stat{}
	return out, c.ListEach(ctx, ws, p, rev, recursive, func(st core.Stat) error {
		out = append(out, st)
		return nil
	})
}

// ListEach calls fn with each entry List would return, as the server
// streams them; an error from fn ends the listing.
func (c *Client) ListEach(ctx context.Context, ws, p string, rev int64, recursive bool, fn func(core.Stat) error) error {
	q := revQuery(rev)
	if recursive {
		q.Set("recursive", "1")
	}
	u, err := fileURL(ws, "/list/", p)
	if err != nil {
		return err
	}
	return eachOf(ctx, c, u, q, "list", fn)
}

// eachOf calls fn with each element of the JSON array the GET of path
// answers, decoding one element at a time as it arrives.
func eachOf[T any](ctx context.Context, c *Client, path string, q url.Values, what string, fn func(T) error) error {
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: path, Query: q})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return fmt.Errorf("%s: bad answer: want a JSON array (%v)", what, err)
	}
	for dec.More() {
		var v T
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("%s: answer cut short: %w", what, err)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%s: answer cut short: %w", what, err)
	}
	return nil
}

// Ops commits a batch of ops as one revision.
func (c *Client) Ops(ctx context.Context, ws string, batch wire.Ops) (core.Revision, error) {
	var out core.Revision
	p, err := wsPath(ws, "/ops")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, batch, &out)
}

// Edit replaces old by new in p (exactly one match unless all).
func (c *Client) Edit(ctx context.Context, ws string, e wire.Edit) (wire.EditResult, error) {
	var out wire.EditResult
	p, err := wsPath(ws, "/edit")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, e, &out)
}

// FindOptions select Find's results.
type FindOptions struct {
	Path string // where to look (default the root)
	Name string // glob on the base name, or on the relative path if it has a slash ("**" spans directories)
	Type string // f, d or l (empty: any)
	Rev  int64
}

// Find lists matching paths.
func (c *Client) Find(ctx context.Context, ws string, opt FindOptions) ([]string, error) {
	out := []string{}
	return out, c.FindEach(ctx, ws, opt, func(p string) error {
		out = append(out, p)
		return nil
	})
}

// FindEach calls fn with each path Find would return, as the server
// streams them; an error from fn ends the search.
func (c *Client) FindEach(ctx context.Context, ws string, opt FindOptions, fn func(string) error) error {
	q := revQuery(opt.Rev)
	for k, v := range map[string]string{"path": opt.Path, "name": opt.Name, "type": opt.Type} {
		if v != "" {
			q.Set(k, v)
		}
	}
	p, err := wsPath(ws, "/find")
	if err != nil {
		return err
	}
	return eachOf(ctx, c, p, q, "find", fn)
}

// GrepOptions select Grep's search.
type GrepOptions struct {
	Pattern    string // RE2 regular expression
	Path       string // where to look (default the root)
	Glob       string // only files matching this glob
	IgnoreCase bool
	Context    int // lines around each match
	Max        int // stop after this many matches (0: all)
	Rev        int64
}

// Grep calls fn for each match (and context line) as the server finds them.
func (c *Client) Grep(ctx context.Context, ws string, opt GrepOptions, fn func(wire.Match) error) error {
	q := revQuery(opt.Rev)
	q.Set("pattern", opt.Pattern)
	if opt.Path != "" {
		q.Set("path", opt.Path)
	}
	if opt.Glob != "" {
		q.Set("glob", opt.Glob)
	}
	if opt.IgnoreCase {
		q.Set("i", "1")
	}
	if opt.Context > 0 {
		q.Set("context", strconv.Itoa(opt.Context))
	}
	if opt.Max > 0 {
		q.Set("max", strconv.Itoa(opt.Max))
	}
	p, err := wsPath(ws, "/grep")
	if err != nil {
		return err
	}
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: p, Query: q})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var m wire.Match
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("grep: bad answer line: %w", err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("grep: answer cut: %w", err)
	}
	return nil
}

// ExportOptions select what Export archives.
type ExportOptions struct {
	Rev  int64
	Path string // subtree (default the root)
	Gzip bool
}

// Export streams a tar archive; the caller closes it.
func (c *Client) Export(ctx context.Context, ws string, opt ExportOptions) (io.ReadCloser, error) {
	q := revQuery(opt.Rev)
	if opt.Path != "" {
		q.Set("path", opt.Path)
	}
	if opt.Gzip {
		q.Set("gzip", "1")
	}
	p, err := wsPath(ws, "/export")
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: p, Query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// AttachOptions tune Attach.
type AttachOptions struct {
	Into  string // place the archive under this directory
	Merge bool   // keep what the archive does not name (default: the tree becomes the archive)
}

// Attach uploads a tar (or tar.gz) stream as one revision.
func (c *Client) Attach(ctx context.Context, ws string, archive io.Reader, opt AttachOptions) (wire.AttachResult, error) {
	q := url.Values{}
	if opt.Into != "" {
		q.Set("into", opt.Into)
	}
	if opt.Merge {
		q.Set("merge", "1")
	}
	p, err := wsPath(ws, "/attach")
	if err != nil {
		return wire.AttachResult{}, err
	}
	resp, err := c.Do(ctx, wire.Request{Method: "POST", Path: p, Query: q, Body: archive, ContentType: "application/x-tar"})
	if err != nil {
		return wire.AttachResult{}, err
	}
	defer resp.Body.Close()
	var out wire.AttachResult
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// Exec runs a command in a sandbox and calls fn with each event as it
// arrives; it returns the exec's record from the exit event. A retry with
// the same req.Key returns the recorded result (or attaches to the run).
// A busy answer is asked again after its Retry-After (see
// ExecBusyRetries); when ctx ends during that wait, or the retries run
// out, Exec returns the busy error.
func (c *Client) Exec(ctx context.Context, ws string, req wire.ExecRequest, fn func(wire.ExecEvent) error) (core.Exec, error) {
	resp, err := c.startExec(ctx, ctx, ws, req)
	if err != nil {
		return core.Exec{}, err
	}
	return readEvents(resp, fn)
}

// startExec asks for an exec and returns the answer whose body streams
// its events, asking again after a busy answer while busyCtx lasts.
func (c *Client) startExec(ctx, busyCtx context.Context, ws string, req wire.ExecRequest) (*http.Response, error) {
	p, err := wsPath(ws, "/exec")
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	retries := c.ExecBusyRetries
	if retries == 0 {
		retries = DefaultExecBusyRetries
	}
	for try := 0; ; try++ {
		resp, err := c.Do(ctx, wire.Request{Method: "POST", Path: p, Body: bytes.NewReader(b), ContentType: "application/json"})
		if err == nil {
			return resp, nil
		}
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeBusy || try >= retries {
			return nil, err
		}
		if !sleep(busyCtx, busyWait(we)) {
			return nil, err
		}
	}
}

// busyWait is how long to wait before asking again after a busy answer:
// its Retry-After, or wire.BusyRetryAfter without one, capped.
func busyWait(we *wire.Error) time.Duration {
	d := we.RetryAfter
	if d <= 0 {
		d = wire.BusyRetryAfter * time.Second
	}
	return min(d, maxBusyWait)
}

// sleep waits d, or until ctx ends; it reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// FollowExec streams the events of exec id from its start.
func (c *Client) FollowExec(ctx context.Context, ws, id string, fn func(wire.ExecEvent) error) (core.Exec, error) {
	p, err := execPath(ws, id, "/events")
	if err != nil {
		return core.Exec{}, err
	}
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: p})
	if err != nil {
		return core.Exec{}, err
	}
	return readEvents(resp, fn)
}

func readEvents(resp *http.Response, fn func(wire.ExecEvent) error) (core.Exec, error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var ev wire.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return core.Exec{}, fmt.Errorf("exec: bad event: %w", err)
		}
		if fn != nil {
			if err := fn(ev); err != nil {
				return core.Exec{}, err
			}
		}
		if ev.Type == "exit" && ev.Exec != nil {
			return *ev.Exec, nil
		}
	}
	if err := sc.Err(); err != nil {
		return core.Exec{}, fmt.Errorf("exec: event stream cut: %w", err)
	}
	return core.Exec{}, errors.New("exec: event stream ended without an exit event")
}

// Execs lists a workspace's execs, newest first.
func (c *Client) Execs(ctx context.Context, ws string, limit int) ([]core.Exec, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	p, err := wsPath(ws, "/execs")
	if err != nil {
		return nil, err
	}
	var out []core.Exec
	return out, c.Call(ctx, "GET", p, q, nil, &out)
}

// Undelivered lists a workspace's execs whose writes have not reached the
// home yet (an executor's pending execs), oldest first.
func (c *Client) Undelivered(ctx context.Context, ws string) ([]core.Exec, error) {
	p, err := wsPath(ws, "/execs")
	if err != nil {
		return nil, err
	}
	var out []core.Exec
	return out, c.Call(ctx, "GET", p, url.Values{"undelivered": {"1"}}, nil, &out)
}

// ExecRecord returns one exec's journal record.
func (c *Client) ExecRecord(ctx context.Context, ws, id string) (core.Exec, error) {
	var out core.Exec
	p, err := execPath(ws, id)
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "GET", p, nil, nil, &out)
}

// KillExec ends a running exec.
func (c *Client) KillExec(ctx context.Context, ws, id string) error {
	p, err := execPath(ws, id, "/kill")
	if err != nil {
		return err
	}
	return c.Call(ctx, "POST", p, nil, nil, nil)
}

// Mount has the daemon serve ws at dir (an absolute, empty directory on its host).
func (c *Client) Mount(ctx context.Context, ws, dir string) (wire.MountInfo, error) {
	var out wire.MountInfo
	p, err := wsPath(ws, "/mount")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, wire.Mount{Dir: dir}, &out)
}

// Unmount commits what is pending at dir and unmounts it.
func (c *Client) Unmount(ctx context.Context, dir string) error {
	return c.Call(ctx, "POST", "/v1/mounts/unmount", nil, wire.Mount{Dir: dir}, nil)
}

// Mounts lists the tenant's live mounts.
func (c *Client) Mounts(ctx context.Context) ([]wire.MountInfo, error) {
	var out []wire.MountInfo
	return out, c.Call(ctx, "GET", "/v1/mounts", nil, nil, &out)
}

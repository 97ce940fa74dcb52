// Package api serves computerd's HTTP+JSON API (v1, documented in
// docs/API.md): workspaces, file tools, revisions, attach and export, all
// scoped to the tenant of the caller's bearer token.
package api

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"computerd/computerd/metrics"
	"computerd/computerd/runner"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// Limits bound what one caller can ask for.
type Limits struct {
	// MaxJSONBody bounds JSON request bodies (default DefaultMaxJSONBody).
	MaxJSONBody int64
	// MaxUpload bounds streamed bodies: file writes and attach (default
	// DefaultMaxUpload).
	MaxUpload int64
	// MaxEditSize bounds the files edit reads whole and the files it
	// would write (default DefaultMaxEditSize).
	MaxEditSize int64
}

// Defaults of Limits (computerd serve's flags name them too).
const (
	DefaultMaxJSONBody = 8 << 20
	DefaultMaxUpload   = 8 << 30
	DefaultMaxEditSize = 64 << 20
)

func (l *Limits) defaults() {
	if l.MaxJSONBody <= 0 {
		l.MaxJSONBody = DefaultMaxJSONBody
	}
	if l.MaxUpload <= 0 {
		l.MaxUpload = DefaultMaxUpload
	}
	if l.MaxEditSize <= 0 {
		l.MaxEditSize = DefaultMaxEditSize
	}
}

// Server answers the API from one store.
type Server struct {
	Store   *fsstore.Store
	Limits  Limits
	Metrics *metrics.Metrics // may be nil
	Log     *slog.Logger     // may be nil
	// Runner runs execs; nil answers exec calls with 503.
	Runner *runner.Runner
	// Mounts serves host mounts; nil answers mount calls with 503.
	Mounts Mounter
	// Home, if set, makes this an executor's API: exec calls are served
	// here, everything else is passed to the home through this handler.
	Home http.Handler
	// Authenticate, if set, replaces the store's token check; the tokens
	// it accepts have no scopes.
	Authenticate func(ctx context.Context, secret string) (tenant string, err error)

	mux           http.Handler   // the routes behind the path check (Handler)
	hidden        *regexp.Regexp // the data directory's paths (hidePaths)
	homeOnce      sync.Once
	home          *syncproto.Home
	mcpOnce       sync.Once
	mcpHandler    http.Handler
	mcpStreams    context.Context // done when the MCP event streams must end
	endMCPStreams context.CancelFunc
}

// route is one API endpoint: a ServeMux pattern and its handler.
type route struct {
	pattern string
	h       func(http.ResponseWriter, *http.Request) error
}

type tokenKey struct{}

// tokenOf returns the token authenticated for this request.
func tokenOf(ctx context.Context) fsstore.Token { return ctx.Value(tokenKey{}).(fsstore.Token) }

// tenantOf returns the tenant authenticated for this request.
func tenantOf(ctx context.Context) string { return tokenOf(ctx).Tenant }

// needScope refuses the request unless its token has scope.
func needScope(r *http.Request, scope, what string) error {
	if !tokenOf(r.Context()).HasScope(scope) {
		return failure(core.ErrForbidden, "%s needs a token with the %s scope (computerd token create --scope %s TENANT)", what, scope, scope)
	}
	return nil
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler {
	s.Limits.defaults()
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	s.hidden = dataDirPaths(s.Store)
	mux := http.NewServeMux()
	s.mcpStreams, s.endMCPStreams = context.WithCancel(context.Background())
	routes := []route{
		{"GET /v1/workspaces", s.listWorkspaces},
		{"POST /v1/workspaces", s.createWorkspace},
		{"GET /v1/workspaces/{ws}", s.getWorkspace},
		{"DELETE /v1/workspaces/{ws}", s.deleteWorkspace},
		{"POST /v1/workspaces/{ws}/fork", s.fork},
		{"GET /v1/workspaces/{ws}/log", s.log},
		{"GET /v1/workspaces/{ws}/diff", s.diff},
		{"POST /v1/workspaces/{ws}/restore", s.restore},
		{"GET /v1/workspaces/{ws}/files/{path...}", s.readFile},
		{"PUT /v1/workspaces/{ws}/files/{path...}", s.writeFile},
		{"GET /v1/workspaces/{ws}/stat/{path...}", s.stat},
		{"GET /v1/workspaces/{ws}/list/{path...}", s.list},
		{"POST /v1/workspaces/{ws}/ops", s.ops},
		{"POST /v1/workspaces/{ws}/edit", s.edit},
		{"GET /v1/workspaces/{ws}/find", s.find},
		{"GET /v1/workspaces/{ws}/grep", s.grep},
		{"GET /v1/workspaces/{ws}/export", s.export},
		{"POST /v1/workspaces/{ws}/attach", s.attach},
		{"/v1/mcp", s.mcp},
	}
	routes = append(routes, s.syncRoutes()...)
	routes = append(routes, s.execRoutes()...)
	routes = append(routes, s.mountRoutes()...)
	routes = append(routes, s.runRoutes()...)
	if s.Home != nil {
		// An executor: its own execs, the home's everything else.
		routes = s.execRoutes()
		mux.Handle("/", s.Home)
	} else {
		mux.Handle("/", s.wrap("other", func(w http.ResponseWriter, r *http.Request) error {
			return failure(core.ErrNotFound, "no such API route: %s %s", r.Method, r.URL.Path)
		}))
	}
	for _, r := range routes {
		mux.Handle(r.pattern, s.wrap(r.pattern, r.h))
	}
	mux.Handle("GET /v1/version", s.versionRoute()) // an executor's own, too
	s.mux = s.cleanPaths(mux)
	return s.mux
}

// cleanPaths refuses (400 invalid_path) a request whose path has an
// empty, "." or ".." segment, percent-encoded or not (r.URL.Path is
// decoded): ServeMux would clean it and redirect to the cleaned path,
// another route than the one the caller built (an exec id ".." reached
// its workspace's route). No client of computerd's sends such a path.
func (s *Server) cleanPaths(mux http.Handler) http.Handler {
	refuse := s.wrap("other", func(w http.ResponseWriter, r *http.Request) error {
		return failure(core.ErrInvalidPath, "request path %q has an empty, . or .. segment: the API takes only clean paths", r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isCleanPath(r.URL.Path) {
			mux.ServeHTTP(w, r)
		} else {
			refuse.ServeHTTP(w, r)
		}
	})
}

// isCleanPath reports whether p is a path ServeMux serves as it is: rooted,
// and unchanged by path.Clean but for a final slash.
func isCleanPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return strings.HasPrefix(p, "/") && c == p
}

// statusWriter remembers the status code for metrics and whether anything was written.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.code, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap authenticates, times and counts a handler, and turns its error into a JSON answer.
func (s *Server) wrap(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		tok, err := s.authenticate(r)
		authenticated := err == nil
		if authenticated {
			r = r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok))
			err = h(w, r)
		}
		if err != nil {
			if w.wrote {
				// The answer has started: the client sees a cut stream.
				s.Log.Warn("request failed mid-answer", "route", route, "err", err)
				panic(http.ErrAbortHandler)
			}
			body, id := s.tenantError(err)
			writeError(w, body)
			if authenticated && s.Metrics != nil {
				s.Metrics.Errors.WithLabelValues(errorLabel(err)).Inc()
			}
			switch st := body.Status; {
			case id != "":
				s.Log.Error("request failed", "route", route, "error_id", id, "err", err)
			case st >= 500:
				s.Log.Error("request failed", "route", route, "err", err)
			case st == http.StatusRequestTimeout:
				// A slow or vanished client, not the server's fault: at
				// error level, many of them would fill the log.
				s.Log.Debug("request body cut", "route", route, "err", err)
			}
		}
		s.observe(route, r.Method, w.code, authenticated, start)
	})
}

// observe counts a request by its route pattern, method and code. A
// request without a valid token counts only in the one unlabelled
// counter: what no tenant stands behind must not add series (every label
// value is one, kept until the process ends). For the same reason a
// method outside HTTP's own set counts as "other".
func (s *Server) observe(route, method string, code int, authenticated bool, start time.Time) {
	if s.Metrics == nil {
		return
	}
	if !authenticated {
		s.Metrics.Unauthenticated.Inc()
		return
	}
	method = methodLabel(method)
	s.Metrics.Requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	s.Metrics.Latency.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
}

// errorLabel is err's code as a metric label: one of wire's codes (a
// home's answer an executor proxies may carry any code; one outside the
// table counts as internal).
func errorLabel(err error) string {
	code := wire.ErrorOf(err).Code
	if _, ok := wire.KindByCode(code); !ok {
		return wire.CodeInternal
	}
	return code
}

// methodLabel is method as a metric label: one of HTTP's methods, or "other".
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// authenticate checks the bearer token and returns it.
func (s *Server) authenticate(r *http.Request) (fsstore.Token, error) {
	auth := r.Header.Get("Authorization")
	secret, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || secret == "" {
		return fsstore.Token{}, failure(core.ErrBadToken, "missing bearer token (set COMPUTER_TOKEN or agentctl --token-file; create one with `computerd token create TENANT`)")
	}
	secret = strings.TrimSpace(secret)
	var tok fsstore.Token
	var err error
	if s.Authenticate != nil {
		tok.Tenant, err = s.Authenticate(r.Context(), secret)
	} else {
		tok, err = s.Store.CheckToken(r.Context(), secret)
	}
	if errors.Is(err, core.ErrBadToken) {
		// A token of another data directory's is the usual mistake:
		// computerd token create writes to the directory it is given.
		return fsstore.Token{}, failure(core.ErrBadToken, "invalid or revoked token: this computerd does not know it "+
			"(a token is known only to the computerd serving the data directory it was made in: "+
			"make one with computerd token create --data DIR, DIR being the --data of this computerd serve)")
	}
	return tok, err
}

// httpError is a failure of a kind from wire's table (kind, a sentinel)
// with a message of its own.
type httpError struct {
	kind error
	msg  string
}

func (e *httpError) Error() string { return e.msg }
func (e *httpError) Unwrap() error { return e.kind }

// failure returns an error of kind (a sentinel of core or wire) that reads as the message.
func failure(kind error, format string, args ...any) error {
	return &httpError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// bodyCut returns a timeout failure for err when it is a request body's
// read deadline passing (the daemon cuts a stalled or trickling upload),
// and nil when it is not.
func bodyCut(err error, what string) error {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded)) {
		return failure(wire.ErrTimeout, "%s: the request body stopped arriving or came too slowly; nothing was committed", what)
	}
	return nil
}

func badRequest(format string, args ...any) error {
	return failure(core.ErrInvalidArgument, format, args...)
}

// tenantError is the answer to a request that failed with err, by wire's
// table: the status and code of its kind (a home's answer, proxied by an
// executor, keeps its own). An internal error's message is the
// operator's, not the tenant's: it may name the data directory, SQL or
// the home. Its answer says only that it happened and gives id, under
// which the caller logs the whole error. Every other message keeps its
// words, less the data directory's paths (hidePaths).
func (s *Server) tenantError(err error) (body *wire.Error, id string) {
	body = wire.ErrorOf(err)
	if body.Code != wire.CodeInternal && body.Status != http.StatusInternalServerError {
		body.Message = s.hidePaths(body.Message)
		return body, ""
	}
	var b [6]byte
	rand.Read(b[:])
	id = hex.EncodeToString(b[:])
	body.Message = "internal error; computerd logged it as error_id=" + id
	return body, id
}

// hiddenPath stands for a path of the data directory in what a tenant reads.
const hiddenPath = "[data directory]"

// dataDirPaths matches the paths of st's data directory, as given and
// with its symbolic links resolved, each with whatever path follows it up
// to a space, quote or other punctuation that ends a path in a message
// (nil when there is no directory to hide).
func dataDirPaths(st *fsstore.Store) *regexp.Regexp {
	if st == nil || st.Dir == "" {
		return nil
	}
	var roots []string
	if abs, err := filepath.Abs(st.Dir); err == nil {
		roots = append(roots, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			roots = append(roots, real)
		}
	}
	var alts []string
	for _, r := range roots {
		if r != "/" {
			alts = append(alts, regexp.QuoteMeta(r))
		}
	}
	if len(alts) == 0 {
		return nil
	}
	return regexp.MustCompile("(?:" + strings.Join(alts, "|") + ")[^\\s\"'`:;,()\\[\\]{}<>]*")
}

// hidePaths replaces each path of the data directory in msg (the daemon's
// own layout, which a tenant has no use for and should not learn).
func (s *Server) hidePaths(msg string) string {
	if s.hidden == nil {
		return msg
	}
	return s.hidden.ReplaceAllLiteralString(msg, hiddenPath)
}

// writeError answers body, with its status.
func writeError(w http.ResponseWriter, body *wire.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.Header().Del("Content-Disposition")
	if body.Code == wire.CodeBusy {
		w.Header().Set("Retry-After", strconv.Itoa(wire.BusyRetryAfter))
	}
	w.WriteHeader(body.Status)
	json.NewEncoder(w).Encode(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// readJSON decodes a bounded JSON body into v, refusing unknown fields.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.Limits.MaxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return failure(wire.ErrTooLarge, "request body over the limit of %d bytes", s.Limits.MaxJSONBody)
		}
		if cut := bodyCut(err, "read JSON body"); cut != nil {
			return cut
		}
		return badRequest("bad JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("bad JSON body: trailing data")
	}
	return nil
}

// workspace resolves {ws} among the caller's workspaces. Another tenant's
// workspace is not found, so names do not leak.
func (s *Server) workspace(r *http.Request) (core.Workspace, error) {
	return s.Store.Workspace(r.Context(), tenantOf(r.Context()), r.PathValue("ws"))
}

// intParam parses an optional integer query parameter.
func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("query parameter %s=%q: want a non-negative integer", name, v)
	}
	return n, nil
}

func boolParam(r *http.Request, name string) bool {
	switch r.URL.Query().Get(name) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// snapshot opens {ws} at ?rev= (head when absent).
func (s *Server) snapshot(r *http.Request) (*fsstore.Snapshot, error) {
	ws, err := s.workspace(r)
	if err != nil {
		return nil, err
	}
	rev, err := intParam(r, "rev", core.Head)
	if err != nil {
		return nil, err
	}
	return s.Store.Snapshot(r.Context(), ws.ID, rev)
}

// commitInfo is the record of an API mutation by the caller, with the
// request's idempotency key; it is metered against the tenant's quota.
func commitInfo(r *http.Request, base int64, message string) fsstore.CommitInfo {
	return fsstore.CommitInfo{Source: core.SourceAPI, Tenant: tenantOf(r.Context()), Base: base, Message: message,
		Key: r.Header.Get(wire.HeaderIdempotencyKey), Metered: true}
}

// meteredUploader is an Uploader for the caller's bytes that stops once
// they would take the tenant over its byte quota (see Uploader.Meter).
func (s *Server) meteredUploader(r *http.Request) (*fsstore.Uploader, error) {
	left, err := s.Store.Remaining(r.Context(), tenantOf(r.Context()))
	if err != nil {
		return nil, err
	}
	up := s.Store.NewUploader()
	up.Meter(left)
	return up, nil
}

// maxKeyLen bounds an idempotency key, for mutations and execs alike.
const maxKeyLen = 256

// requestKey is a request's idempotency key: the Idempotency-Key header,
// or body, a key given in the request's body (which must then agree).
func requestKey(r *http.Request, body string) (string, error) {
	key := body
	if h := r.Header.Get(wire.HeaderIdempotencyKey); h != "" {
		if key != "" && key != h {
			return "", badRequest("the key in the body and the Idempotency-Key header differ")
		}
		key = h
	}
	if len(key) > maxKeyLen {
		return "", badRequest("idempotency key: at most %d bytes", maxKeyLen)
	}
	return key, nil
}

// replayed finds the revision an earlier mutation of ws with idempotency
// key (from requestKey) committed: a retry answers it and applies nothing
// again. (The commit also checks, in its transaction, for two retries
// racing.) message is the one this request would commit with: a key
// whose revision has another was used for another mutation (keyReused).
func (s *Server) replayed(r *http.Request, ws core.Workspace, key, message string) (core.Revision, bool, error) {
	if key == "" {
		return core.Revision{}, false, nil
	}
	rev, err := s.Store.RevisionByKey(r.Context(), ws.ID, key)
	if errors.Is(err, core.ErrNotFound) {
		return core.Revision{}, false, nil
	}
	if err == nil && rev.Message != message {
		return core.Revision{}, false, keyReused(key, rev)
	}
	return rev, err == nil, err
}

// keyReused refuses a mutation whose idempotency key already names
// revision rev of another mutation. What a keyed revision keeps of its
// request is its message (the operation and its path: "write a.txt",
// "edit main.go", an ops batch's message), so that is what is compared:
// a retry that sends other bytes to the same path is not told apart.
func keyReused(key string, rev core.Revision) error {
	return fmt.Errorf("idempotency key %q already names revision %d (%s), made by another request: a retry sends the same request, a new change a new key: %w",
		key, rev.Rev, rev.Message, core.ErrConflict)
}

// answerRevision reports a committed revision.
func (s *Server) answerRevision(w http.ResponseWriter, status int, rev core.Revision) error {
	s.Metrics.Committed(rev)
	return answerReplay(w, status, rev)
}

// answerReplay reports the revision a retried mutation's key holds: it
// committed nothing now, so it counts no revision.
func answerReplay(w http.ResponseWriter, status int, rev core.Revision) error {
	w.Header().Set(wire.HeaderRevision, strconv.FormatInt(rev.Rev, 10))
	return writeJSON(w, status, rev)
}

// answerCommit reports what CommitOnce answered.
func (s *Server) answerCommit(w http.ResponseWriter, rev core.Revision, replayed bool) error {
	if replayed {
		return answerReplay(w, http.StatusOK, rev)
	}
	return s.answerRevision(w, http.StatusOK, rev)
}

// drain discards the rest of a body so a keep-alive connection stays usable.
func drain(r io.Reader) { io.Copy(io.Discard, io.LimitReader(r, 1<<20)) }

// lines writes an answer of JSON lines (NDJSON) that the client reads as
// it comes: each flush reaches the client at once.
type lines struct {
	bw      *bufio.Writer
	enc     *json.Encoder
	flusher http.Flusher
}

// startLines answers 200 with an NDJSON body.
func startLines(w http.ResponseWriter) *lines {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	l := &lines{bw: bw, enc: json.NewEncoder(bw)}
	l.flusher, _ = w.(http.Flusher)
	return l
}

// add buffers one line.
func (l *lines) add(v any) error { return l.enc.Encode(v) }

// flush sends what is buffered to the client.
func (l *lines) flush() error {
	if err := l.bw.Flush(); err != nil {
		return err
	}
	if l.flusher != nil {
		l.flusher.Flush()
	}
	return nil
}

// array writes an answer that is one JSON array, element by element as
// they are produced, so that a long listing is never held whole: its
// memory is a buffer, whatever the number of elements. The answer starts
// (200) with the first element or end; a failure after that cuts the
// stream, which the client sees as a broken array.
type array struct {
	w       http.ResponseWriter
	bw      *bufio.Writer
	enc     *json.Encoder
	started bool
	n       int
}

// arrayFlushEvery is how many elements array buffers between flushes to
// the client.
const arrayFlushEvery = 1024

func newArray(w http.ResponseWriter) *array { return &array{w: w} }

func (a *array) start() {
	if a.started {
		return
	}
	a.started = true
	a.w.Header().Set("Content-Type", "application/json")
	a.w.WriteHeader(http.StatusOK)
	a.bw = bufio.NewWriterSize(a.w, 32<<10)
	a.enc = json.NewEncoder(a.bw)
	a.bw.WriteByte('[')
}

// add writes one element.
func (a *array) add(v any) error {
	a.start()
	if a.n > 0 {
		a.bw.WriteByte(',')
	}
	a.n++
	if err := a.enc.Encode(v); err != nil {
		return err
	}
	if a.n%arrayFlushEvery == 0 {
		if err := a.bw.Flush(); err != nil {
			return err
		}
		if f, ok := a.w.(http.Flusher); ok {
			f.Flush()
		}
	}
	return nil
}

// end closes the array (an empty one if nothing was added).
func (a *array) end() error {
	a.start()
	a.bw.WriteString("]\n")
	return a.bw.Flush()
}

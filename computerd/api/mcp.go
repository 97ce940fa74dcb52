package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"computerd/client"
	"computerd/mcpserver"
	"computerd/wire"
)

// mcpSessionTimeout ends an MCP session that has had no request this long.
const mcpSessionTimeout = 30 * time.Minute

// mcp serves the Model Context Protocol over streamable HTTP (docs/MCP.md).
// wrap has authenticated the caller already. Each session gets an MCP
// server whose client calls this same API in process with the session's
// bearer token, so every tool call is authorised, scoped to its tenant
// and answered with its error codes exactly as a call over the network
// would be. A session is bound to the token that opened it: a request
// with another token cannot use it.
func (s *Server) mcp(w http.ResponseWriter, r *http.Request) error {
	s.mcpOnce.Do(func() {
		h := mcp.NewStreamableHTTPHandler(s.mcpServer, &mcp.StreamableHTTPOptions{
			Logger: s.Log, SessionTimeout: mcpSessionTimeout, MaxRequestBodyBytes: s.Limits.MaxJSONBody,
		})
		bind := auth.RequireBearerToken(func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
			sum := sha256.Sum256([]byte(token))
			return &auth.TokenInfo{UserID: tenantOf(ctx) + "/" + hex.EncodeToString(sum[:8])}, nil
		}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
		s.mcpHandler = bind(h)
	})
	if r.Method == http.MethodGet {
		// The event stream a client holds open ends at shutdown (the
		// client reconnects to the next computerd); calls in flight, on
		// POSTs, may finish within the grace.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(s.mcpStreams, cancel)()
		r = r.WithContext(ctx)
	}
	s.mcpHandler.ServeHTTP(w, r)
	return nil
}

// EndMCPStreams ends the MCP event streams clients hold open (GET
// /v1/mcp) and any opened later, so that a graceful shutdown waits only
// for calls in flight.
func (s *Server) EndMCPStreams() { s.endMCPStreams() }

// mcpServer builds the MCP server for a request: its client carries the
// request's token, its workspace is ?workspace= (or none: each call then
// names one). The SDK asks for a server on every request, but keeps only
// the one made when a session starts.
func (s *Server) mcpServer(r *http.Request) *mcp.Server {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	c := &client.Client{Caller: wire.Caller{BaseURL: "http://computerd.in-process", Token: strings.TrimSpace(token),
		HTTP: &http.Client{Transport: loopback{s.mux}}}}
	return mcpserver.New(c, r.URL.Query().Get("workspace"))
}

// loopback is an http.RoundTripper that serves each request with h in
// process, streaming the answer's body as h writes it.
type loopback struct{ h http.Handler }

func (l loopback) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	in := req.Clone(ctx)
	in.RequestURI, in.RemoteAddr = req.URL.RequestURI(), "in-process"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, started: make(chan struct{})}
	go func() {
		err := io.ErrUnexpectedEOF // the handler aborted its answer
		defer func() {
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				err = fmt.Errorf("handler panic: %v", p)
			}
			in.Body.Close()
			w.WriteHeader(http.StatusOK)
			pw.CloseWithError(err)
		}()
		l.h.ServeHTTP(w, in)
		err = nil
	}()
	select {
	case <-w.started:
	case <-ctx.Done():
		cancel()
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	return &http.Response{
		Status: strconv.Itoa(w.code) + " " + http.StatusText(w.code), StatusCode: w.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: &pipeBody{PipeReader: pr, cancel: cancel}, ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is the handler's side of a loopback answer.
type pipeWriter struct {
	header  http.Header
	sent    http.Header // the header as it was when the answer started
	code    int
	body    *io.PipeWriter
	once    sync.Once
	started chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return
	}
	w.once.Do(func() {
		w.code, w.sent = code, w.header.Clone()
		close(w.started)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush starts the answer; the pipe delivers each write as it is made.
func (w *pipeWriter) Flush() { w.WriteHeader(http.StatusOK) }

// pipeBody is the client's side: closing it early ends the handler's context.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}

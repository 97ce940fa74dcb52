// Package modeltest is a scripted model server for tests. It listens on
// loopback and speaks both real wire formats: OpenAI's Chat Completions
// (POST /v1/chat/completions) and Anthropic's Messages (POST /v1/messages),
// each streamed as server-sent events or answered whole, as the request
// asks. Each request gets the script's next step: a text answer, tool
// calls, an HTTP error, or a stream cut mid-answer. Every request is
// recorded so a test can check what the client sent.
package modeltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Call is a tool call in a scripted answer.
type Call struct {
	ID   string // made up when empty
	Name string
	Args string // JSON text, sent in pieces when streamed
}

// Usage is the token count a scripted answer reports.
type Usage struct {
	Input, Output int64
}

// Step answers one request.
type Step struct {
	// Text is the answer's text.
	Text string
	// Calls are tool calls after the text; several are parallel calls.
	Calls []Call
	// Usage is reported with the answer.
	Usage Usage
	// Stop overrides the wire's stop reason (stop/tool_calls for OpenAI,
	// end_turn/tool_use for Anthropic).
	Stop string
	// WholeCalls streams each tool call whole in one chunk, all at index
	// 0, told apart only by id, as some OpenAI-compatible servers do.
	WholeCalls bool
	// Piece is how many bytes of text or arguments each stream delta
	// carries; zero means 3, so answers arrive in many chunks.
	Piece int

	// Status, when not zero, answers with this HTTP error instead, its
	// body in the provider's error format with Message.
	Status     int
	Message    string
	RetryAfter string // the Retry-After header, with Status

	// CutAfter, when not zero, sends only this many stream events (or,
	// answering whole, this many bytes of the body) and then closes the
	// connection abruptly.
	CutAfter int
	// EndEarly, with CutAfter, ends the response cleanly instead: a
	// stream that just stops before its final event.
	EndEarly bool
	// StreamError, with CutAfter, sends the provider's error event with
	// this message (an overload mid-answer, say) and ends the stream.
	StreamError string

	// Reading, when set, makes the answer from the request's body (the
	// conversation so far) instead: a model that reads what its tools
	// answered, such as an id to pass on.
	Reading func(body []byte) Step
}

// Reply is a step that answers with text.
func Reply(text string, u Usage) Step { return Step{Text: text, Usage: u} }

// ToolCalls is a step that answers with tool calls, in parallel if several.
func ToolCalls(u Usage, calls ...Call) Step { return Step{Calls: calls, Usage: u} }

// Fail is a step that answers with an HTTP error.
func Fail(status int, message string) Step { return Step{Status: status, Message: message} }

// Request is a request the server got.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	// Stream says whether the body asked for a streamed answer.
	Stream bool
}

// Decode decodes the request's JSON body into v, failing tb if it cannot.
func (r Request) Decode(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		tb.Fatalf("decode %s body: %v\n%s", r.Path, err, r.Body)
	}
}

// Server is a scripted model server.
type Server struct {
	// URL is the server's root: the Anthropic base URL. OpenAI's is
	// OpenAIURL.
	URL string

	tb    reporter
	srv   *httptest.Server
	mu    sync.Mutex
	steps []Step
	reqs  []Request
	n     int // answers given, for ids
	// byTurn: answer with the step the conversation has reached (see ByTurn).
	byTurn bool
}

// ByTurn makes the server answer each request with the step numbered by
// the assistant turns its conversation already holds (0 for the first
// question), rather than in the order requests come, without using steps
// up: a question asked again (by a client that died before it recorded the
// answer) gets the same answer, as from a deterministic model.
func (s *Server) ByTurn() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byTurn = true
	return s
}

// reporter hears of requests the script cannot answer (a testing.TB).
type reporter interface {
	Errorf(format string, args ...any)
}

// New starts a server that answers with steps in order; tb.Cleanup closes it.
func New(tb testing.TB, steps ...Step) *Server {
	tb.Helper()
	s := start(tb, steps)
	tb.Cleanup(s.Close)
	return s
}

// Start starts a server outside a test (a demo's scripted model), which
// reports what it cannot answer to log; Close stops it.
func Start(log func(format string, args ...any), steps ...Step) *Server {
	return start(logReporter(log), steps)
}

type logReporter func(format string, args ...any)

func (l logReporter) Errorf(format string, args ...any) { l(format, args...) }

func start(r reporter, steps []Step) *Server {
	s := &Server{tb: r, steps: steps}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.serve(openAIWire{}))
	mux.HandleFunc("POST /v1/messages", s.serve(anthropicWire{}))
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// OpenAIURL is the base URL for an OpenAI client: the root plus /v1.
func (s *Server) OpenAIURL() string { return s.URL + "/v1" }

// AnthropicURL is the base URL for an Anthropic client: the root.
func (s *Server) AnthropicURL() string { return s.URL }

// Add appends steps to the script.
func (s *Server) Add(steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, steps...)
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Left is how many steps are still unanswered.
func (s *Server) Left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

// wire is one provider's wire format.
type wire interface {
	// errorBody is an error body in the provider's format.
	errorBody(status int, message string) any
	// whole is a non-streamed answer.
	whole(id, model string, st Step) any
	// events are a streamed answer's server-sent events, whole lines.
	events(id, model string, st Step, usage bool) []string
	// streamError is an error event in a stream.
	streamError(message string) string
}

func (s *Server) serve(w wire) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		var head struct {
			Model         string `json:"model"`
			Stream        bool   `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		_ = json.Unmarshal(body, &head)
		var conv struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &conv)
		turn := 0
		for _, m := range conv.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}

		s.mu.Lock()
		s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Stream: head.Stream})
		var st Step
		var ok bool
		if s.byTurn {
			if ok = turn < len(s.steps); ok {
				st = s.steps[turn]
			}
		} else if ok = len(s.steps) > 0; ok {
			st, s.steps = s.steps[0], s.steps[1:]
		}
		s.n++
		id := fmt.Sprintf("%d", s.n)
		if s.byTurn {
			id = fmt.Sprintf("t%d", turn+1) // the same answer, the same ids
		}
		s.mu.Unlock()

		if ok && st.Reading != nil {
			st = st.Reading(body)
		}
		if !ok {
			// Errorf, not Fatalf: this is not the test's goroutine. A 400
			// so that the client gives up at once.
			s.tb.Errorf("modeltest: request %d to %s: the script has no step left", len(s.Requests()), r.URL.Path)
			writeJSON(rw, http.StatusBadRequest, w.errorBody(http.StatusBadRequest, "modeltest: script exhausted"))
			return
		}
		if st.Status != 0 {
			if st.RetryAfter != "" {
				rw.Header().Set("Retry-After", st.RetryAfter)
			}
			writeJSON(rw, st.Status, w.errorBody(st.Status, st.Message))
			return
		}
		if !head.Stream {
			s.writeWhole(rw, w.whole(id, head.Model, st), st)
			return
		}
		events := w.events(id, head.Model, st, head.StreamOptions.IncludeUsage)
		if st.StreamError != "" && st.CutAfter > 0 && st.CutAfter < len(events) {
			events = append(events[:st.CutAfter:st.CutAfter], w.streamError(st.StreamError))
			st.CutAfter = 0
		}
		s.writeEvents(rw, events, st)
	}
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}

func (s *Server) writeWhole(rw http.ResponseWriter, v any, st Step) {
	b, err := json.Marshal(v)
	if err != nil {
		s.tb.Errorf("modeltest: %v", err)
		return
	}
	if st.CutAfter == 0 || st.CutAfter >= len(b) {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(b)
		return
	}
	// Promise the whole body, send part of it, then drop the connection.
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Content-Length", fmt.Sprint(len(b)))
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(b[:st.CutAfter])
	s.cut(rw, st)
}

func (s *Server) writeEvents(rw http.ResponseWriter, events []string, st Step) {
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(rw)
	for i, e := range events {
		if st.CutAfter > 0 && i == st.CutAfter {
			s.cut(rw, st)
			return
		}
		if _, err := io.WriteString(rw, e); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// cut ends an answer early: cleanly with EndEarly, else by closing the
// connection under the half-sent response.
func (s *Server) cut(rw http.ResponseWriter, st Step) {
	rc := http.NewResponseController(rw)
	_ = rc.Flush()
	if st.EndEarly {
		return
	}
	conn, _, err := rc.Hijack()
	if err != nil {
		s.tb.Errorf("modeltest: hijack: %v", err)
		return
	}
	_ = conn.Close()
}

// pieces splits s into pieces of n bytes (the last may be shorter).
func pieces(s string, n int) []string {
	if n <= 0 {
		n = 3
	}
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// sse is one server-sent event: an optional event name and its JSON data.
func sse(event string, data any) string {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	var sb strings.Builder
	if event != "" {
		sb.WriteString("event: " + event + "\n")
	}
	sb.WriteString("data: " + string(b) + "\n\n")
	return sb.String()
}

package daemon

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// HTTPTimeouts bound how long a connection may hold the API or metrics
// server without making progress. Streams that keep sending, and streams
// that are quiet (an exec printing nothing, a run follow waiting), live
// as long as their call does: a deadline only runs while the server waits
// on the client. Zero fields take the defaults below.
type HTTPTimeouts struct {
	// ReadHeader bounds reading a request's header.
	ReadHeader time.Duration
	// Idle bounds the wait for the next request on a kept-alive connection.
	Idle time.Duration
	// Body bounds one wait for more of a request's body; it is also the
	// grace before BodyMinRate applies.
	Body time.Duration
	// BodyMinRate is the slowest a request body may arrive, in bytes per
	// second of the time the server spends waiting for it: a trickle is
	// cut, however regular.
	BodyMinRate int64
	// Write bounds one write of an answer that the client does not read;
	// every write moves the deadline on.
	Write time.Duration
}

// Defaults of HTTPTimeouts (computerd serve's --http-* flags name these).
const (
	DefaultHTTPReadHeaderTimeout = 10 * time.Second
	DefaultHTTPIdleTimeout       = 2 * time.Minute
	DefaultHTTPBodyTimeout       = 30 * time.Second
	DefaultHTTPBodyMinRate       = 1 << 10
	DefaultHTTPWriteTimeout      = time.Minute
)

func (t *HTTPTimeouts) defaults() {
	if t.ReadHeader <= 0 {
		t.ReadHeader = DefaultHTTPReadHeaderTimeout
	}
	if t.Idle <= 0 {
		t.Idle = DefaultHTTPIdleTimeout
	}
	if t.Body <= 0 {
		t.Body = DefaultHTTPBodyTimeout
	}
	if t.BodyMinRate <= 0 {
		t.BodyMinRate = DefaultHTTPBodyMinRate
	}
	if t.Write <= 0 {
		t.Write = DefaultHTTPWriteTimeout
	}
}

// newHTTPServer returns a server of h bounded by t. It sets no
// ReadTimeout or WriteTimeout: those bound a whole request and would cut
// every long stream; the deadlines move with the transfer instead.
func newHTTPServer(h http.Handler, t HTTPTimeouts, log *slog.Logger) *http.Server {
	t.defaults()
	return &http.Server{
		Handler:           t.bound(h),
		ReadHeaderTimeout: t.ReadHeader,
		IdleTimeout:       t.Idle,
		ErrorLog:          serverErrorLog(log),
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateActive {
				// What the server writes before a handler runs (an
				// error for a bad header, 100 Continue) is bounded too.
				c.SetWriteDeadline(time.Now().Add(t.Write))
			}
		},
	}
}

// bound moves a request's read deadline as its body arrives and its write
// deadline as its answer is written.
func (t HTTPTimeouts) bound(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, d: t.Write}
		dw.arm()
		if r.Body != nil && r.Body != http.NoBody {
			b := &deadlineBody{ReadCloser: r.Body, rc: rc, wait: t.Body, rate: t.BodyMinRate}
			rc.SetReadDeadline(time.Now().Add(t.Body))
			r.Body = b
		}
		// The server sends what is still buffered after the handler returns.
		defer dw.rearm()
		h.ServeHTTP(dw, r)
	})
}

// deadlineBody is a request body whose every read may wait at most wait,
// and all of them together wait + bytes/rate: the time counted is the
// server's waiting on the client, not its own work between reads.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	wait   time.Duration
	rate   int64
	n      int64         // bytes read
	waited time.Duration // spent in reads
	done   bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	budget := min(b.wait, b.wait+time.Duration(b.n)*time.Second/time.Duration(b.rate)-b.waited)
	start := time.Now()
	b.rc.SetReadDeadline(start.Add(budget)) // in the past when the rate fell short: the read fails
	n, err := b.ReadCloser.Read(p)
	b.waited += time.Since(start)
	b.n += int64(n)
	if err == io.EOF {
		// The server now reads in the background, with no deadline, to
		// see the client go; one set under it would end a long
		// answer's context, so no later read sets any.
		b.done = true
	}
	return n, err
}

// deadlineWriter moves the write deadline on before each write or flush,
// so a write blocks at most d, and a quiet answer, which attempts none,
// is never cut.
type deadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	d     time.Duration
	armed atomic.Int64 // when the deadline was last moved, Unix ns
}

// arm moves the deadline to d from now, unless it moved within the last
// eighth of d (so a fast stream sets it rarely).
func (w *deadlineWriter) arm() {
	now := time.Now()
	if now.UnixNano()-w.armed.Load() < int64(w.d/8) {
		return
	}
	w.rearm()
}

func (w *deadlineWriter) rearm() {
	now := time.Now()
	w.armed.Store(now.UnixNano())
	w.rc.SetWriteDeadline(now.Add(w.d))
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Flush() { w.FlushError() }

func (w *deadlineWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

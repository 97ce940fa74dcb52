package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// serverTLS loads the API's certificate and key (PEM files); with neither
// the API speaks plain HTTP.
func serverTLS(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	// HTTP/1.1 only: the API's body and write deadlines are those of a
	// connection (see HTTPTimeouts), one request at a time.
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

// http1Only is the protocol set of an API server over TLS.
func http1Only() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	return p
}

// warnExposed logs what crosses the network unprotected: a plain-HTTP API
// (bearer tokens in the clear), metrics (served to anyone who connects)
// on an address beyond loopback, a home reached in plain HTTP.
func (d *Daemon) warnExposed() {
	if d.tls == nil && !isLoopback(d.apiLn.Addr().String()) {
		d.cfg.Log.Warn("the API serves plain HTTP beyond loopback: tokens and files cross the network in the clear (serve it with --tls-cert and --tls-key)", "api", d.URL())
	}
	if d.metricLn != nil && !isLoopback(d.metricLn.Addr().String()) {
		d.cfg.Log.Warn("metrics are served without authentication beyond loopback", "metrics", d.MetricsURL())
	}
	if d.remote != nil && d.remote.home.Scheme == "http" && !isLoopback(d.remote.home.Host) {
		d.cfg.Log.Warn("the home is reached in plain HTTP: this executor's token crosses the network in the clear (an https home URL)", "home", d.remote.home.String())
	}
}

// isLoopback reports whether a host:port (or a host) names only this
// machine: a loopback IP or "localhost". An empty host is every address.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// homeURL checks an executor's --home.
func homeURL(home string) (*url.URL, error) {
	u, err := url.Parse(home)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--home %q: want a URL such as https://home:7777", home)
	}
	return u, nil
}

// serverErrorLog is an HTTP server's log of its own errors: warnings,
// except a failed TLS handshake, which anyone who can connect can cause
// at will (a port scan, a client without the CA): that is at debug level,
// so that it cannot fill the log.
func serverErrorLog(l *slog.Logger) *log.Logger {
	return log.New(errorLogWriter{l}, "", 0)
}

type errorLogWriter struct{ log *slog.Logger }

func (w errorLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// homeTransport is base made into the pool of an executor's own calls to
// its home (hello, token checks, pull, fetch, push): none waits longer
// than timeout for progress. Every read and write of a connection moves
// its deadline timeout ahead: a home that stops reading a push, stops
// sending a pull, or holds a request without answering fails the call
// with a timeout after that long, however large the transfer, while a
// transfer that moves is never cut. An answer is awaited for timeout
// plus the time the bytes the request sent may still take to arrive
// (answerAllowance): what the executor has written may still sit in
// buffers on the way. An idle connection is closed before its deadline
// could pass.
func homeTransport(base *http.Transport, timeout time.Duration) *http.Transport {
	tr := base.Clone()
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &progressConn{Conn: c, timeout: timeout}, nil
	}
	tr.ResponseHeaderTimeout = timeout + answerAllowance(maxInFlight)
	tr.TLSHandshakeTimeout = timeout
	tr.IdleConnTimeout = timeout / 2
	return tr
}

// What the bytes of a request may still need to reach the home once the
// executor has written them: up to maxInFlight of them sit in buffers
// (the kernels' and any proxy's) and arrive at minHomeRate or faster. A
// link slower than that needs a longer --home-timeout.
const (
	maxInFlight = 16 << 20
	minHomeRate = 256 << 10 // bytes a second
)

// answerAllowance is how much longer than the home timeout an answer may
// take after a request of n bytes.
func answerAllowance(n int64) time.Duration {
	return time.Duration(min(n, maxInFlight)) * time.Second / minHomeRate
}

// progressConn is a connection whose every read and write must make
// progress within timeout of the last one (and an answer, within
// timeout plus the allowance of the request's bytes).
type progressConn struct {
	net.Conn
	timeout time.Duration
	mu      sync.Mutex
	sent    int64 // bytes written since a read last returned some
}

func (c *progressConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout + answerAllowance(c.sent)))
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.sent = 0
		c.mu.Unlock()
	}
	return n, err
}

func (c *progressConn) Write(p []byte) (int, error) {
	now := time.Now()
	c.Conn.SetWriteDeadline(now.Add(c.timeout))
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.sent += int64(n)
	// A read waiting for the answer waits from the last write on.
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout + answerAllowance(c.sent)))
	c.mu.Unlock()
	return n, err
}

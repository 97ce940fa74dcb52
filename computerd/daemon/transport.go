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

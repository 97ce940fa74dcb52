package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestServerErrorLog(t *testing.T) {
	var out bytes.Buffer
	l := serverErrorLog(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Printf("http: TLS handshake error from 127.0.0.1:5555: remote error: tls: bad certificate")
	if out.Len() != 0 {
		t.Fatalf("a failed handshake logged above debug level: %q", out.String())
	}
	l.Printf("http: panic serving 127.0.0.1:5555: boom")
	if got := out.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "panic serving") {
		t.Fatalf("the server's other errors: %q, want a warning", got)
	}
}

func TestIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7778", true}, {"[::1]:7778", true}, {"localhost:7778", true}, {"127.0.0.2", true},
		{":7778", false}, {"0.0.0.0:7778", false}, {"[::]:7778", false}, {"10.0.0.5:7778", false}, {"home:7777", false},
	} {
		if got := isLoopback(tc.addr); got != tc.want {
			t.Errorf("isLoopback(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

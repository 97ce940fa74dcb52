package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"computerd/computerd/api"
	"computerd/fsstore"
	"computerd/wire"
)

// logBuffer is a log many goroutines may write.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mustStore opens a fresh store in a data directory whose path is easy to
// look for: ".../data-dir-canary".
func mustStore(tb testing.TB) *fsstore.Store {
	tb.Helper()
	st := fsstore.New(filepath.Join(tb.TempDir(), "data-dir-canary"))
	if err := st.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// parts are the components of dir a message must not show (the
// temporary directory's own, the test's name among them). A number of a
// few digits (t.TempDir's "001") names nothing and could stand in a
// random error id by chance.
func parts(dir string) []string {
	var out []string
	for _, p := range strings.Split(dir, "/") {
		if p != "" && p != "tmp" && strings.Trim(p, "0123456789") != "" {
			out = append(out, p)
		}
	}
	return out
}

// get sends GET path to srv with a token and decodes the error answer.
func get(t *testing.T, srv *httptest.Server, path string) (*http.Response, wire.Error) {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer cdt_x")
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body wire.Error
	json.NewDecoder(resp.Body).Decode(&body)
	return resp, body
}

// TestErrorsHideDataDir checks what a tenant reads of a failure that
// names the data directory: an internal one is a generic message with an
// error id, under which the log holds the whole error; any other keeps
// its words without the directory's paths.
func TestErrorsHideDataDir(t *testing.T) {
	st := mustStore(t)
	for _, tc := range []struct {
		name     string
		err      error
		status   int
		internal bool
	}{
		{"internal", fmt.Errorf("open %s/store.db: disk on fire", st.Dir), http.StatusInternalServerError, true},
		{"unavailable", fmt.Errorf("open %s/run/output/x.ndjson: %w", st.Dir, wire.ErrUnavailable), http.StatusServiceUnavailable, false},
		{"quoted", fmt.Errorf("stat %q (%s): %w", st.Dir+"/run", st.Dir, wire.ErrBusy), http.StatusTooManyRequests, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuffer{}
			srv := httptest.NewServer((&api.Server{Store: st, Log: slog.New(slog.NewJSONHandler(logs, nil)),
				Authenticate: func(context.Context, string) (string, error) { return "", tc.err }}).Handler())
			t.Cleanup(srv.Close)
			resp, body := get(t, srv, "/v1/workspaces")
			if resp.StatusCode != tc.status || body.Message == "" {
				t.Fatalf("answer %d %+v, want %d", resp.StatusCode, body, tc.status)
			}
			for _, p := range parts(st.Dir) {
				if strings.Contains(body.Message, p) {
					t.Errorf("the tenant's message %q names %q of the data directory %s", body.Message, p, st.Dir)
				}
			}
			if !tc.internal {
				if !strings.Contains(body.Message, "[data directory]") {
					t.Errorf("message %q: want the path replaced by [data directory]", body.Message)
				}
				return
			}
			_, id, ok := strings.Cut(body.Message, "error_id=")
			if !ok || len(id) != 12 {
				t.Fatalf("internal error's message %q: want an error_id", body.Message)
			}
			var line struct {
				Msg     string `json:"msg"`
				ErrorID string `json:"error_id"`
				Err     string `json:"err"`
			}
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if json.Unmarshal([]byte(l), &line) == nil && line.ErrorID == id {
					break
				}
			}
			if line.ErrorID != id || line.Err != tc.err.Error() {
				t.Fatalf("the log has no line with error_id %s and the whole error %q:\n%s", id, tc.err, logs)
			}
		})
	}
}

// TestUncleanPathsRefused checks that a path ServeMux would clean and
// redirect to another route is refused with 400 invalid_path instead.
func TestUncleanPathsRefused(t *testing.T) {
	st := mustStore(t)
	srv := httptest.NewServer((&api.Server{Store: st, Authenticate: func(context.Context, string) (string, error) { return "alice", nil }}).Handler())
	t.Cleanup(srv.Close)
	for _, p := range []string{
		"/v1/workspaces/w/execs/..",
		"/v1/workspaces/w/execs/.",
		"/v1/workspaces/w/execs/%2e%2e",
		"/v1/workspaces/w/execs/%2E%2e/events",
		"/v1/workspaces/./w",
		"/v1//workspaces",
		"/v1/workspaces/w/files/a/../b",
		"/v1/workspaces/w/files/a//b",
		"/v1/workspaces/a%2F..%2Fb/log",
		"/v1/runs/../workspaces",
		"/v1/skills/%2e%2e",
		"/v1/sync/../workspaces",
	} {
		resp, body := get(t, srv, p)
		if resp.StatusCode != http.StatusBadRequest || body.Code != wire.CodeInvalidPath || resp.Header.Get("Location") != "" {
			t.Errorf("GET %s: %d %+v (Location %q), want 400 invalid_path", p, resp.StatusCode, body, resp.Header.Get("Location"))
		}
	}
	for _, p := range []string{"/v1/workspaces", "/v1/workspaces/", "/v1/workspaces/w/files/", "/v1/workspaces/w/files/a...b/..."} {
		if resp, body := get(t, srv, p); resp.StatusCode == http.StatusBadRequest && body.Code == wire.CodeInvalidPath {
			t.Errorf("GET %s: refused as unclean: %+v", p, body)
		}
	}
}

package wire_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"computerd/core"
	"computerd/wire"
)

// Every kind round-trips: an error wrapping its sentinel gets its code and
// status, and a *wire.Error of that code is errors.Is the same sentinel.
func TestKindsRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range wire.Kinds() {
		t.Run(k.Code, func(t *testing.T) {
			if seen[k.Code] {
				t.Fatalf("code %s twice in the table", k.Code)
			}
			seen[k.Code] = true
			err := &core.PathError{Op: "op", Path: "p", Err: k.Err}
			got := wire.ErrorOf(fmt.Errorf("wrapped: %w", err))
			if got.Code != k.Code || got.Status != k.Status {
				t.Fatalf("ErrorOf(%v) = %s %d, want %s %d", k.Err, got.Code, got.Status, k.Code, k.Status)
			}
			back := &wire.Error{Code: k.Code, Message: "m", Status: k.Status}
			if !errors.Is(back, k.Err) {
				t.Fatalf("wire.Error{%s} is not %v", k.Code, k.Err)
			}
		})
	}
}

func TestKindOfOthers(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"closed store", fmt.Errorf("read: %w", core.ErrClosed), wire.CodeUnavailable},
		{"cancelled", context.Canceled, wire.CodeUnavailable},
		{"max bytes", &http.MaxBytesError{Limit: 1}, wire.CodeTooLarge},
		{"conflict error", &core.ConflictError{Paths: []string{"a"}}, wire.CodeConflict},
		{"workspace not found before not found", fmt.Errorf("%w: %w", core.ErrNotFound, core.ErrWorkspaceNotFound), wire.CodeWorkspaceNotFound},
		{"file system full", &os.PathError{Op: "write", Path: "f", Err: syscall.ENOSPC}, wire.CodeNoSpace},
		{"file system quota", fmt.Errorf("spool: %w", syscall.EDQUOT), wire.CodeNoSpace},
		{"plain", errors.New("disk on fire"), wire.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wire.KindOf(tc.err).Code; got != tc.want {
				t.Fatalf("KindOf(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

// A conflict comes back from a Caller as a *core.ConflictError with its paths.
func TestCallerConflict(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("X-Extra") != "1" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"code":"conflict","error":"changed meanwhile","paths":["a","b"]}`)
	}))
	defer srv.Close()
	c := &wire.Caller{BaseURL: srv.URL + "/", Token: "tok", Header: http.Header{"X-Extra": {"1"}}}
	err := c.Call(context.Background(), "POST", "/v1/x", nil, map[string]int{"a": 1}, nil)
	var ce *core.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, core.ErrConflict) {
		t.Fatalf("got %v, want a conflict", err)
	}
	if got, want := fmt.Sprint(ce.Paths), "[a b]"; got != want {
		t.Fatalf("paths %s, want %s", got, want)
	}
	var we *wire.Error
	if !errors.As(err, &we) || we.Status != http.StatusConflict || we.Error() != "changed meanwhile" {
		t.Fatalf("got %#v", we)
	}
}

// An answer that is not the API's still classifies, by its status.
func TestCallerForeignAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer srv.Close()
	err := (&wire.Caller{BaseURL: srv.URL}).Call(context.Background(), "GET", "/v1/x", nil, nil, nil)
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("got %v, want unavailable", err)
	}
}

// A Caller keeps a failed answer's Retry-After, and a foreign 408 is a timeout.
func TestCallerRetryAfterAndTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/slow" {
			http.Error(w, "request timeout", http.StatusRequestTimeout)
			return
		}
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"code":"busy","error":"at the bound"}`)
	}))
	defer srv.Close()
	c := &wire.Caller{BaseURL: srv.URL}
	err := c.Call(context.Background(), "POST", "/v1/exec", nil, nil, nil)
	var we *wire.Error
	if !errors.As(err, &we) || !errors.Is(err, wire.ErrBusy) || we.RetryAfter != 7*time.Second {
		t.Fatalf("got %#v, want busy with RetryAfter 7s", err)
	}
	if err := c.Call(context.Background(), "PUT", "/v1/slow", nil, nil, nil); !errors.Is(err, wire.ErrTimeout) {
		t.Fatalf("got %v, want timeout", err)
	}
}

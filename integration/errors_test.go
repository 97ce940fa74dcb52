package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	agentcmd "computerd/agentctl/command"
	"computerd/client"
	"computerd/computerd/api"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// Every kind of failure survives HTTP: a real request provokes it in a
// real computerd, and the client sees the code and status docs/API.md
// promises and an error that errors.Is the store's own sentinel.
func TestErrorKinds(t *testing.T) {
	// Short HTTP timeouts, so a stalled upload is cut in seconds.
	e := startWith(t, daemon.Config{Limits: api.Limits{MaxJSONBody: 4 << 10}, Quota: fsstore.Quota{MaxWorkspaces: 2}, HTTP: short})
	ctx := context.Background()
	cl := client.New(e.d.URL(), e.token)
	e.ok("ws", "create", "w")
	e.write("w", "f", "data")
	e.write("w", "d/inner", "x")
	stale := e.head("w")
	e.write("w", "f", "newer")
	// A bare API server on the same store: no runner, and a token check that fails.
	bare := httptest.NewServer((&api.Server{Store: e.d.Store}).Handler())
	t.Cleanup(bare.Close)
	broken := httptest.NewServer((&api.Server{Store: e.d.Store, Authenticate: func(context.Context, string) (string, error) {
		return "", errors.New("token service down")
	}}).Handler())
	t.Cleanup(broken.Close)
	ops := func(op ...core.Op) error {
		_, err := cl.Ops(ctx, "w", wire.Ops{Ops: op})
		return err
	}
	read := func(p string, rev int64) error {
		r, err := cl.Read(ctx, "w", p, client.ReadOptions{Rev: rev})
		if err == nil {
			r.Close()
		}
		return err
	}

	for _, tc := range []struct {
		name   string
		call   func() error
		code   string
		status int
		want   error
	}{
		{"not_found", func() error { return read("missing", 0) },
			"not_found", http.StatusNotFound, core.ErrNotFound},
		{"exists", func() error { return ops(core.Op{Kind: core.OpMkdir, Path: "d", Mode: 0o755}) },
			"exists", http.StatusConflict, core.ErrExists},
		{"not_dir", func() error { return ops(core.Op{Kind: core.OpMkdir, Path: "f/sub", Mode: 0o755}) },
			"not_dir", http.StatusBadRequest, core.ErrNotDir},
		{"is_dir", func() error { return read("d", 0) },
			"is_dir", http.StatusBadRequest, core.ErrIsDir},
		{"not_empty", func() error { return ops(core.Op{Kind: core.OpDelete, Path: "d"}) },
			"not_empty", http.StatusBadRequest, core.ErrNotEmpty},
		{"invalid_path", func() error { return ops(core.Op{Kind: core.OpMkdir, Path: "../up", Mode: 0o755}) },
			"invalid_path", http.StatusBadRequest, core.ErrInvalidPath},
		{"invalid", func() error {
			_, err := cl.Edit(ctx, "w", wire.Edit{Path: "f", Old: "absent", New: "x"})
			return err
		}, "invalid", http.StatusBadRequest, core.ErrInvalidArgument},
		{"conflict", func() error {
			_, err := cl.Write(ctx, "w", "f", strings.NewReader("stale"), client.WriteOptions{Base: stale})
			return err
		}, "conflict", http.StatusConflict, core.ErrConflict},
		{"too_large", func() error {
			_, err := cl.Ops(ctx, "w", wire.Ops{Ops: []core.Op{{Kind: core.OpMkdir, Path: "big", Mode: 0o755}}, Message: strings.Repeat("m", 8<<10)})
			return err
		}, "too_large", http.StatusRequestEntityTooLarge, wire.ErrTooLarge},
		{"timeout", func() error {
			// A body that sends a byte and stalls: the client is still
			// there when computerd cuts it.
			stall := make(chan struct{})
			defer close(stall)
			_, err := cl.Write(ctx, "w", "stalled", &stalledReader{stall: stall}, client.WriteOptions{})
			return err
		}, "timeout", http.StatusRequestTimeout, wire.ErrTimeout},
		{"unknown_revision", func() error { return read("f", 999) },
			"unknown_revision", http.StatusNotFound, core.ErrUnknownRevision},
		{"workspace_not_found", func() error {
			_, err := cl.Workspace(ctx, "nope")
			return err
		}, "workspace_not_found", http.StatusNotFound, core.ErrWorkspaceNotFound},
		{"workspace_exists", func() error {
			_, err := cl.CreateWorkspace(ctx, "w")
			return err
		}, "workspace_exists", http.StatusConflict, core.ErrWorkspaceExists},
		{"missing_chunk", func() error {
			return ops(core.Op{Kind: core.OpCreate, Path: "m", Mode: 0o644,
				Content: &core.Content{Size: 4, Chunks: []core.ChunkRef{{Index: 0, Hash: core.Hash{1, 2, 3}, Len: 4}}}})
		}, "missing_chunk", http.StatusBadRequest, core.ErrMissingChunk},
		{"unauthorized", func() error {
			_, err := client.New(e.d.URL(), "cdt_bad").Workspaces(ctx)
			return err
		}, "unauthorized", http.StatusUnauthorized, core.ErrBadToken},
		{"forbidden", func() error {
			_, err := cl.Mount(ctx, "w", e.t.TempDir())
			return err
		}, "forbidden", http.StatusForbidden, core.ErrForbidden},
		{"quota_exceeded", func() error {
			if _, err := cl.CreateWorkspace(ctx, "second"); err != nil {
				return err
			}
			_, err := cl.CreateWorkspace(ctx, "third")
			return err
		}, "quota_exceeded", http.StatusForbidden, core.ErrQuota},
		{"unavailable", func() error {
			_, err := client.New(bare.URL, e.token).Exec(ctx, "w", wire.ExecRequest{Argv: []string{"true"}}, nil)
			return err
		}, "unavailable", http.StatusServiceUnavailable, wire.ErrUnavailable},
		{"internal", func() error {
			_, err := client.New(broken.URL, e.token).Workspaces(ctx)
			return err
		}, "internal", http.StatusInternalServerError, wire.ErrInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.head("w")
			err := tc.call()
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("got %v (%T), want a *wire.Error", err, err)
			}
			if got, want := we.Code, tc.code; got != want {
				t.Errorf("code %q, want %q (%v)", got, want, err)
			}
			if got, want := we.Status, tc.status; got != want {
				t.Errorf("status %d, want %d (%v)", got, want, err)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.want)
			}
			for _, k := range wire.Kinds() {
				if k.Code != tc.code && k.Err != tc.want && errors.Is(err, k.Err) {
					t.Errorf("%v is also %v", err, k.Err)
				}
			}
			if after := e.head("w"); after != before {
				t.Errorf("the failed call moved the head from %d to %d", before, after)
			}
		})
	}
	t.Run("every kind is covered", func(t *testing.T) {
		covered := []string{"not_found", "exists", "not_dir", "is_dir", "not_empty", "invalid_path", "invalid", "conflict",
			"too_large", "unknown_revision", "workspace_not_found", "workspace_exists", "missing_chunk", "unauthorized",
			"forbidden", "quota_exceeded", "unavailable", "internal",
			"timeout",
			"busy",     // TestExecBusy (exec_limits_test.go)
			"no_space"} // TestFullDisk (fulldisk_test.go)
		for _, k := range wire.Kinds() {
			if !slices.Contains(covered, k.Code) {
				t.Errorf("no request provokes %s here", k.Code)
			}
		}
	})
}

// stalledReader yields one byte, then blocks until stall closes.
type stalledReader struct {
	stall chan struct{}
	sent  bool
}

func (r *stalledReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		p[0] = 'x'
		return 1, nil
	}
	<-r.stall
	return 0, io.ErrUnexpectedEOF
}

// A conflict keeps its paths on the way back, as a *core.ConflictError.
func TestErrorConflictPaths(t *testing.T) {
	e := start(t, api.Limits{})
	cl := client.New(e.d.URL(), e.token)
	e.ok("ws", "create", "w")
	e.write("w", "f", "one")
	base := e.head("w")
	e.write("w", "f", "two")
	_, err := cl.Write(context.Background(), "w", "f", strings.NewReader("stale"), client.WriteOptions{Base: base})
	var ce *core.ConflictError
	if !errors.As(err, &ce) || !slices.Contains(ce.Paths, "f") {
		t.Fatalf("got %v, want a conflict on f", err)
	}
}

// agentctl --json reports a failure as one JSON object on stdout with the
// server's code, and exits 1; without --json, a message on stderr.
func TestErrorJSONOutput(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "d/inner", "x")
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode string
	}{
		{"not empty", []string{"rm", "w", "d", "--json"}, wire.CodeNotEmpty},
		{"is a directory", []string{"--json", "read", "w", "d"}, wire.CodeIsDir},
		{"no workspace", []string{"log", "nope", "--json"}, wire.CodeWorkspaceNotFound},
		{"unknown revision", []string{"read", "w", "d/inner", "--rev", "99", "--json"}, wire.CodeUnknownRevision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			full := append([]string{"agentctl", "--server", e.d.URL(), "--token-file", tokenFile(t, e.token)}, tc.args...)
			status := agentcmd.Main(context.Background(), full, agentcmd.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
			if status != 1 {
				t.Errorf("status %d, want 1", status)
			}
			var body map[string]any
			dec := json.NewDecoder(&out)
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("stdout %q: %v", out.String(), err)
			}
			if _, err := dec.Token(); err != io.EOF {
				t.Errorf("more than one JSON value on stdout: %q", out.String())
			}
			if got := body["code"]; got != tc.wantCode {
				t.Errorf("code %v, want %s", got, tc.wantCode)
			}
			if msg, _ := body["error"].(string); msg == "" {
				t.Errorf("no error message in %v", body)
			}
			if errb.Len() != 0 {
				t.Errorf("stderr %q, want nothing", errb.String())
			}
		})
	}
	var out, errb bytes.Buffer
	full := []string{"agentctl", "--server", e.d.URL(), "--token-file", tokenFile(t, e.token), "rm", "w", "d"}
	if status := agentcmd.Main(context.Background(), full, agentcmd.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}); status != 1 {
		t.Errorf("status %d, want 1", status)
	}
	if out.Len() != 0 || !strings.HasPrefix(errb.String(), "agentctl: ") || !strings.Contains(errb.String(), "not empty") {
		t.Errorf("without --json: stdout %q, stderr %q", out.String(), errb.String())
	}
}

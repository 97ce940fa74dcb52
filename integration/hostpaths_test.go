package integration

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"computerd/client"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/wire"
)

// pathParts are the components of dir that a tenant's message must not
// show: each but "tmp" (the temporary directory's own, named after the
// test, among them) and short numbers (t.TempDir's "001", which names
// nothing and could stand in a random id by chance).
func pathParts(dir string) []string {
	var out []string
	for _, p := range strings.Split(dir, "/") {
		if p != "" && p != "tmp" && strings.Trim(p, "0123456789") != "" {
			out = append(out, p)
		}
	}
	return out
}

// showsPath fails the test if msg shows any part of dir.
func showsPath(t *testing.T, what, msg, dir string) {
	t.Helper()
	for _, p := range pathParts(dir) {
		if strings.Contains(msg, p) {
			t.Errorf("%s %q shows %q of the data directory %s", what, msg, p, dir)
		}
	}
}

// TestExecFailureHidesDataDir makes execs fail inside computerd (their
// output logs' directory is gone): the tenant's answer, through the API
// and MCP, is an internal error with an id and no part of the data
// directory's path, the log has that id with the whole error, and the
// failed exec's journal record reads without the path.
func TestExecFailureHidesDataDir(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data-dir-canary")
	logs := &syncBuffer{}
	e := startIn(t, dir, daemon.Config{Log: slog.New(slog.NewJSONHandler(logs, nil))})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	outputs := filepath.Join(dir, "run", "output")
	if err := os.RemoveAll(outputs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.MkdirAll(outputs, 0o700) })

	_, err := cl.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"true"}}, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeInternal || we.Status != http.StatusInternalServerError {
		t.Fatalf("exec without an output directory: %v, want a 500 internal error", err)
	}
	showsPath(t, "the exec's error", we.Message, dir)
	_, id, ok := strings.Cut(we.Message, "error_id=")
	if !ok || id == "" {
		t.Fatalf("the exec's error %q gives no error_id", we.Message)
	}
	var logged bool
	for _, l := range strings.Split(logs.String(), "\n") {
		var line struct {
			ErrorID string `json:"error_id"`
			Err     string `json:"err"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && line.ErrorID == id {
			logged = strings.Contains(line.Err, outputs)
			break
		}
	}
	if !logged {
		t.Fatalf("the log has no line with error_id %s naming %s:\n%s", id, outputs, logs)
	}

	// The journal keeps the failed exec; its error reads without the path.
	list, err := cl.Execs(ctx, "w", 0)
	if err != nil || len(list) != 1 || list[0].State != core.ExecFailed || list[0].Error == "" {
		t.Fatalf("execs after the failure: %+v %v", list, err)
	}
	showsPath(t, "the journal's error", list[0].Error, dir)
	rec, err := cl.ExecRecord(ctx, "w", list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	showsPath(t, "the exec record's error", rec.Error, dir)

	// The same through MCP.
	cs, _ := mcpClient(t, e.httpTransport(e.token, "w"))
	text, res := call(t, cs, "exec", map[string]any{"command": "true"})
	if !res.IsError || !strings.HasPrefix(text, "error (internal): ") || !strings.Contains(text, "error_id=") {
		t.Errorf("MCP exec without an output directory: %q, want an internal error with an id", text)
	}
	showsPath(t, "MCP exec", text, dir)
	text, _ = call(t, cs, "exec_show", map[string]any{"id": list[0].ID})
	showsPath(t, "MCP exec_show", text, dir)
	text, _ = call(t, cs, "execs", nil)
	showsPath(t, "MCP execs", text, dir)
}

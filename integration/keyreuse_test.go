package integration

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/wire"
)

// A mutation's idempotency key reused for another mutation (another
// path, another operation) answers 409 conflict and changes nothing; the
// same request again is replayed.
func TestKeyReusedForAnotherMutation(t *testing.T) {
	e := startCLI(t)
	ctx := context.Background()
	cl := client.New(e.d.URL(), e.token)
	e.ok("ws", "create", "w")
	rev, err := cl.Write(ctx, "w", "a.txt", strings.NewReader("one\n"), client.WriteOptions{Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := cl.Write(ctx, "w", "a.txt", strings.NewReader("one\n"), client.WriteOptions{Key: "k1"}); err != nil || again.Rev != rev.Rev {
		t.Fatalf("the same write again: %+v %v, want revision %d replayed", again, err, rev.Rev)
	}
	head := e.head("w")
	_, err = cl.Write(ctx, "w", "b.txt", strings.NewReader("two\n"), client.WriteOptions{Key: "k1"})
	if !errors.Is(err, core.ErrConflict) || !strings.Contains(err.Error(), `idempotency key "k1" already names revision`) || !strings.Contains(err.Error(), "write a.txt") {
		t.Fatalf("k1 for another path: %v, want a conflict naming the revision", err)
	}
	_, err = cl.Edit(ctx, "w", wire.Edit{Path: "a.txt", Old: "one", New: "uno", Key: "k1"})
	if !errors.Is(err, core.ErrConflict) {
		t.Fatalf("k1 for an edit: %v, want a conflict", err)
	}
	status, _ := e.mustHTTP("POST", "/v1/workspaces/w/ops", map[string]string{wire.HeaderIdempotencyKey: "k1"},
		`{"ops": [{"op": "mkdir", "path": "d", "mode": 493}]}`)
	if status != http.StatusConflict {
		t.Fatalf("k1 for ops: %d, want 409", status)
	}
	if e.head("w") != head {
		t.Fatalf("a refused reuse moved the head from %d to %d", head, e.head("w"))
	}
	if tree := e.tree("w"); tree["b.txt"] != "" || tree["a.txt"] != "one\n" {
		t.Fatalf("tree after refused reuses: %v", tree)
	}
}

// An exec's key reused for another command answers 409 conflict and
// runs nothing; the same command again replays the recorded result.
func TestExecKeyReusedForAnotherCommand(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	if out := e.ok("exec", "w", "--key", "k", "--", "sh", "-c", "echo ran >> log; cat log"); out != "ran\n" {
		t.Fatalf("first exec: %q", out)
	}
	if out := e.ok("exec", "w", "--key", "k", "--", "sh", "-c", "echo ran >> log; cat log"); out != "ran\n" {
		t.Fatalf("the same exec again: %q, want the recorded output", out)
	}
	for _, args := range [][]string{
		{"exec", "w", "--key", "k", "--", "sh", "-c", "echo other >> log"},
		{"exec", "w", "--key", "k", "--cwd", "sub", "--", "sh", "-c", "echo ran >> log; cat log"},
		{"exec", "w", "--key", "k", "--env", "A=1", "--", "sh", "-c", "echo ran >> log; cat log"},
	} {
		e.fails("w", `exec key "k" already names exec`, args...)
	}
	if got := e.tree("w")["log"]; got != "ran\n" {
		t.Fatalf("log %q: a refused exec ran", got)
	}
	execs := e.ok("execs", "w")
	if n := strings.Count(execs, "\n") - 1; n != 1 {
		t.Fatalf("journal has %d execs, want 1:\n%s", n, execs)
	}
}

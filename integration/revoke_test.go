package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"computerd/client"
	daemoncmd "computerd/computerd/command"
	"computerd/computerd/daemon"
	"computerd/core"
)

// tokenWithID creates a token for tenant in dir through `computerd token
// create --json` and returns its secret and id.
func tokenWithID(t *testing.T, dir, tenant string) (secret, id string) {
	t.Helper()
	var out strings.Builder
	if err := daemoncmd.Run(context.Background(), []string{"computerd", "token", "create", "--json", "--data", dir, tenant}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token, ID string }
	if err := json.Unmarshal([]byte(out.String()), &tok); err != nil || tok.Token == "" || tok.ID == "" {
		t.Fatalf("token create --json: %q %v", out.String(), err)
	}
	return tok.Token, tok.ID
}

// TestExecutorRefusesRevokedToken revokes at the home, with `computerd
// token revoke`, a token an executor has just accepted: the executor
// refuses it from its next call on (docs/SYNC.md, Tokens). While the home
// is away, a token it accepted lately still passes and the revoked one
// does not.
func TestExecutorRefusesRevokedToken(t *testing.T) {
	ctx := context.Background()
	home := startWith(t, daemon.Config{NoExec: true})
	home.ok("ws", "create", "w")
	secret, id := tokenWithID(t, home.dir, "alice")
	other, _ := tokenWithID(t, home.dir, "alice")
	unchecked, _ := tokenWithID(t, home.dir, "alice")
	ex := launch(t, t.TempDir(), daemon.Config{NoExec: true, Home: home.d.URL(), HomeToken: home.token})
	// GET .../execs is one of the executor's own routes: it checks the
	// token itself (the home's routes it passes on, the home checks).
	call := func(token string) error {
		_, err := client.New(ex.d.URL(), token).Execs(ctx, "w", 0)
		if errors.Is(err, core.ErrWorkspaceNotFound) {
			return nil // no mirror of w yet: the token passed
		}
		return err
	}
	var took []time.Duration
	for range 200 {
		start := time.Now()
		if err := call(secret); err != nil {
			t.Fatalf("the executor refused a live token: %v", err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("a call the executor serves: median %v, 90th percentile %v", took[len(took)/2], took[len(took)*9/10])

	if err := daemoncmd.Run(ctx, []string{"computerd", "token", "revoke", "--data", home.dir, id}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	err := call(secret)
	window := time.Since(revoked)
	if !errors.Is(err, core.ErrBadToken) {
		t.Fatalf("the executor's first call %v after the revocation: %v, want unauthorized", window, err)
	}
	t.Logf("revoked at the home; the executor's next call refused it %v later", window)

	// The home goes away: the token it accepted a moment ago still
	// passes (homeAwayGrace); the revoked one stays refused.
	if err := call(other); err != nil {
		t.Fatal(err)
	}
	if err := home.d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := call(other); err != nil {
		t.Errorf("with the home away, a token it accepted lately: %v", err)
	}
	if err := call(secret); err == nil {
		t.Errorf("with the home away, the revoked token passed")
	}
	if err := call(unchecked); err == nil {
		t.Errorf("with the home away, a token never checked passed")
	}
}

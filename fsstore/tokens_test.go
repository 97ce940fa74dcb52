package fsstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// A token's id is random and shares nothing with its secret; its scopes
// come back sorted and without repeats; unknown scopes are refused.
func TestTokenIDAndScopes(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	ids := map[string]bool{}
	for range 20 {
		secret, tok, err := s.CreateToken(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if sharesPrefix(secret, tok.ID) {
			t.Fatalf("token id %s shares a prefix with its secret %s", tok.ID, secret)
		}
		if ids[tok.ID] {
			t.Fatalf("token id %s twice", tok.ID)
		}
		ids[tok.ID] = true
		if len(tok.ID) != 16 {
			t.Fatalf("token id %q: want 16 hex digits", tok.ID)
		}
	}
	secret, tok, err := s.CreateToken(ctx, "bob", fsstore.ScopeMount, fsstore.ScopeMount)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Scopes, []string{fsstore.ScopeMount}; !slices.Equal(got, want) {
		t.Fatalf("scopes %v, want %v", got, want)
	}
	got, err := s.CheckToken(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != tok.ID || got.Tenant != "bob" || !got.HasScope(fsstore.ScopeMount) {
		t.Fatalf("CheckToken = %+v, want %+v", got, tok)
	}
	plain, _, err := s.CreateToken(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.CheckToken(ctx, plain); err != nil || got.HasScope(fsstore.ScopeMount) || got.Scopes == nil {
		t.Fatalf("a token made without scopes: %+v, %v", got, err)
	}
	before, _ := s.Tokens(ctx)
	if _, _, err := s.CreateToken(ctx, "bob", "admin"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("unknown scope: %v, want invalid argument", err)
	}
	if after, _ := s.Tokens(ctx); len(after) != len(before) {
		t.Fatalf("a refused token was stored: %d tokens, want %d", len(after), len(before))
	}
}

// A store whose tokens were made when an id was the start of the secret
// (testdata/README.md) opens: each secret still works, for its tenant and
// with no scope, under a new id that shares nothing with it; a revoked
// token stays revoked.
func TestMigrateTokenIDs(t *testing.T) {
	ctx := context.Background()
	s := openFixture(t, "store-v22-tokens.db.gz")
	for _, tc := range []struct{ tenant, oldID, secret string }{
		{"alice", "1b3b2452", "cdt_1b3b2452fd27e08532f43ccfcc9cdb22bc97ac1aef0eb749"},
		{"bob", "130d299d", "cdt_130d299d447f57e9b7ae79b0bc31cdfec4faee62a387f587"},
	} {
		tok, err := s.CheckToken(ctx, tc.secret)
		if err != nil {
			t.Fatalf("%s's token after migration: %v", tc.tenant, err)
		}
		if tok.Tenant != tc.tenant || len(tok.Scopes) != 0 {
			t.Fatalf("%s's token after migration: %+v", tc.tenant, tok)
		}
		if tok.ID == tc.oldID || sharesPrefix(tc.secret, tok.ID) || len(tok.ID) != 16 {
			t.Fatalf("%s's token id %q after migration: want a new random one (old %q)", tc.tenant, tok.ID, tc.oldID)
		}
	}
	if _, err := s.CheckToken(ctx, "cdt_03ea3314858078126818cf8a0ec310ca67773f15de9a9ada"); !errors.Is(err, core.ErrBadToken) {
		t.Fatalf("revoked token after migration: %v, want refused", err)
	}
	toks, err := s.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 3 || !toks[2].Revoked || toks[2].Tenant != "carol" {
		t.Fatalf("tokens after migration: %+v", toks)
	}
	if err := s.RevokeToken(ctx, toks[0].ID); err != nil {
		t.Fatalf("revoke by the new id: %v", err)
	}
	if _, err := s.CheckToken(ctx, "cdt_1b3b2452fd27e08532f43ccfcc9cdb22bc97ac1aef0eb749"); !errors.Is(err, core.ErrBadToken) {
		t.Fatalf("token revoked by its new id still works: %v", err)
	}
}

// sharesPrefix reports whether the secret's random part starts with the
// id's first 8 hex digits (as ids once were), or holds the id anywhere.
// Two independent random strings agree on 8 hex digits once in 2^32.
func sharesPrefix(secret, id string) bool {
	raw := strings.TrimPrefix(secret, fsstore.TokenPrefix)
	return len(id) < 8 || strings.HasPrefix(raw, id[:8]) || strings.Contains(secret, id)
}

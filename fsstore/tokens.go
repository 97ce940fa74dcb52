package fsstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"computerd/core"
)

// TokenPrefix starts every bearer token, so a leaked one is easy to spot.
const TokenPrefix = "cdt_"

// Token describes a bearer token; the secret itself is never stored. Its
// ID is random, drawn apart from the secret, so showing it gives nothing
// of the secret away.
type Token struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Scopes are what the token may do beyond its tenant's workspaces
	// (ScopeMount), sorted.
	Scopes  []string  `json:"scopes"`
	Created time.Time `json:"created"`
	Revoked bool      `json:"revoked,omitempty"`
}

// Scopes a token may be given. Every token may use its tenant's
// workspaces (files, revisions, execs, runs, sync); a scope grants more.
const (
	// ScopeMount: serve the tenant's workspaces as directories on the
	// daemon's host, under the roots the operator configured.
	ScopeMount = "mount"
)

// Scopes lists every scope a token may be given.
var Scopes = []string{ScopeMount}

// HasScope reports whether the token was given scope.
func (t Token) HasScope(scope string) bool { return slices.Contains(t.Scopes, scope) }

// tokenIDBytes is the size of a token's random id (16 hex digits).
const tokenIDBytes = 8

// checkScopes sorts scopes and drops repeats, refusing unknown names.
func checkScopes(scopes []string) ([]string, error) {
	out := []string{}
	for _, sc := range scopes {
		if !slices.Contains(Scopes, sc) {
			return nil, fmt.Errorf("scope %q: want one of %s: %w", sc, strings.Join(Scopes, ", "), core.ErrInvalidArgument)
		}
		out = append(out, sc)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// randomHex returns n random bytes as hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func tokenHash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// ValidTenant reports whether name can name a tenant (the rule for workspace names).
func ValidTenant(name string) bool { return validWorkspaceName(name) }

// CreateToken makes a bearer token for tenant with scopes (names from
// Scopes) and returns its secret, which is shown only this once: the store
// keeps its SHA-256.
func (s *Store) CreateToken(ctx context.Context, tenant string, scopes ...string) (string, Token, error) {
	if !ValidTenant(tenant) {
		return "", Token{}, fmt.Errorf("tenant %q: want 1-128 of [A-Za-z0-9._-]: %w", tenant, core.ErrInvalidArgument)
	}
	scopes, err := checkScopes(scopes)
	if err != nil {
		return "", Token{}, err
	}
	raw, err := randomHex(24)
	if err != nil {
		return "", Token{}, err
	}
	id, err := randomHex(tokenIDBytes)
	if err != nil {
		return "", Token{}, err
	}
	secret := TokenPrefix + raw
	tok := Token{ID: id, Tenant: tenant, Scopes: scopes, Created: s.Now()}
	err = s.writeShared(ctx, func() error {
		_, err := s.wconn.ExecContext(ctx, `INSERT INTO tokens(hash, id, tenant, scopes, created_ns) VALUES (?, ?, ?, ?, ?)`,
			tokenHash(secret), tok.ID, tenant, strings.Join(scopes, " "), tok.Created.UnixNano())
		return wrapDB("create token", err)
	})
	if err != nil {
		return "", Token{}, err
	}
	return secret, tok, nil
}

// CheckToken returns the live token whose secret this is, or core.ErrBadToken.
func (s *Store) CheckToken(ctx context.Context, secret string) (Token, error) {
	if !strings.HasPrefix(secret, TokenPrefix) {
		return Token{}, core.ErrBadToken
	}
	t, err := scanToken(s.rq.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ? AND revoked_ns IS NULL`, tokenHash(secret)))
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, core.ErrBadToken
	}
	if err != nil {
		return Token{}, wrapDB("check token", err)
	}
	return t, nil
}

// TokenTenant returns the tenant a live token belongs to, or core.ErrBadToken.
func (s *Store) TokenTenant(ctx context.Context, secret string) (string, error) {
	t, err := s.CheckToken(ctx, secret)
	return t.Tenant, err
}

// tokenColumns are the columns scanToken reads.
const tokenColumns = `id, tenant, scopes, created_ns, revoked_ns IS NOT NULL`

// scanToken reads one row of tokenColumns.
func scanToken(row interface{ Scan(...any) error }) (Token, error) {
	var t Token
	var scopes string
	var created int64
	if err := row.Scan(&t.ID, &t.Tenant, &scopes, &created, &t.Revoked); err != nil {
		return Token{}, err
	}
	t.Scopes = strings.Fields(scopes)
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	t.Created = time.Unix(0, created)
	return t, nil
}

// Tokens lists every token (secrets are not stored, so not shown).
func (s *Store) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_ns`)
	if err != nil {
		return nil, wrapDB("list tokens", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, wrapDB("list tokens", err)
		}
		out = append(out, t)
	}
	return out, wrapDB("list tokens", rows.Err())
}

// RevokeToken disables the token with the given id; calls made with it fail from now on.
func (s *Store) RevokeToken(ctx context.Context, id string) error {
	return s.writeShared(ctx, func() error {
		res, err := s.wconn.ExecContext(ctx, `UPDATE tokens SET revoked_ns = ? WHERE id = ? AND revoked_ns IS NULL`, s.Now().UnixNano(), id)
		if err != nil {
			return wrapDB("revoke token", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("token %q: %w", id, core.ErrNotFound)
		}
		return nil
	})
}

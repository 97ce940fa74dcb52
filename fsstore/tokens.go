package fsstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"computerd/core"
)

// TokenPrefix starts every bearer token, so a leaked one is easy to spot.
const TokenPrefix = "cdt_"

// Token describes a bearer token; the secret itself is never stored.
type Token struct {
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Created time.Time `json:"created"`
	Revoked bool      `json:"revoked,omitempty"`
}

func tokenHash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// ValidTenant reports whether name can name a tenant (the rule for workspace names).
func ValidTenant(name string) bool { return validWorkspaceName(name) }

// CreateToken makes a bearer token for tenant and returns its secret, which
// is shown only this once: the store keeps its SHA-256.
func (s *Store) CreateToken(ctx context.Context, tenant string) (string, Token, error) {
	if !ValidTenant(tenant) {
		return "", Token{}, fmt.Errorf("tenant %q: want 1-128 of [A-Za-z0-9._-]: %w", tenant, core.ErrInvalidArgument)
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", Token{}, err
	}
	secret := TokenPrefix + hex.EncodeToString(raw[:])
	tok := Token{ID: hex.EncodeToString(raw[:4]), Tenant: tenant, Created: s.Now()}
	err := s.writeShared(ctx, func() error {
		_, err := s.wconn.ExecContext(ctx, `INSERT INTO tokens(hash, id, tenant, created_ns) VALUES (?, ?, ?, ?)`,
			tokenHash(secret), tok.ID, tenant, tok.Created.UnixNano())
		return wrapDB("create token", err)
	})
	if err != nil {
		return "", Token{}, err
	}
	return secret, tok, nil
}

// TokenTenant returns the tenant a live token belongs to, or core.ErrBadToken.
func (s *Store) TokenTenant(ctx context.Context, secret string) (string, error) {
	if !strings.HasPrefix(secret, TokenPrefix) {
		return "", core.ErrBadToken
	}
	var tenant string
	err := s.rdb.QueryRowContext(ctx, `SELECT tenant FROM tokens WHERE hash = ? AND revoked_ns IS NULL`, tokenHash(secret)).Scan(&tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return "", core.ErrBadToken
	}
	if err != nil {
		return "", wrapDB("check token", err)
	}
	return tenant, nil
}

// Tokens lists every token (secrets are not stored, so not shown).
func (s *Store) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, tenant, created_ns, revoked_ns IS NOT NULL FROM tokens ORDER BY created_ns`)
	if err != nil {
		return nil, wrapDB("list tokens", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		var t Token
		var created int64
		if err := rows.Scan(&t.ID, &t.Tenant, &created, &t.Revoked); err != nil {
			return nil, wrapDB("list tokens", err)
		}
		t.Created = time.Unix(0, created)
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

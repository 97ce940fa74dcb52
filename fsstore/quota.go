package fsstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"computerd/core"
)

// Quota bounds what one tenant may hold; a zero field sets no limit.
type Quota struct {
	// MaxBytes bounds the tenant's stored bytes (Usage.Bytes).
	MaxBytes int64 `json:"max_bytes"`
	// MaxWorkspaces bounds its live workspaces (Usage.Workspaces).
	MaxWorkspaces int64 `json:"max_workspaces"`
}

// QuotaSetting is a tenant's own quota where it differs from the
// server's (Store.DefaultQuota): a nil field takes the default, zero sets
// no limit.
type QuotaSetting struct {
	MaxBytes      *int64 `json:"max_bytes,omitempty"`
	MaxWorkspaces *int64 `json:"max_workspaces,omitempty"`
}

// Usage is what a tenant holds.
//
// Bytes are the sizes of the distinct chunks that the rows of its
// workspaces reference: every retained revision of every live workspace,
// conflict and interrupted copies included, the drafts of its execs and
// mounts, and the rows of deleted workspaces that forks still read
// through. A chunk counts once however many files, revisions and
// workspaces of the tenant hold it, and in full for each tenant holding
// it: what one tenant is charged never depends on what another stores
// (shared chunks divided among their holders would let a tenant learn
// from its own usage whether someone else holds some content, and see
// its usage move when they delete it). Metadata (names, inodes) is not
// counted. Deleting a file frees its bytes when retention prunes the last
// revision holding it; deleting a workspace frees them at once (unless a
// fork still reads them).
type Usage struct {
	Bytes  int64 `json:"bytes"`
	Chunks int64 `json:"chunks"`
	// Records are the bytes of everything else the tenant makes the
	// daemon keep: its exec journal with the output logs on disk, agent
	// runs and their steps, memories and skills, each row counted as 100
	// bytes plus its text (migration 0051).
	Records int64 `json:"records"`
	// Total is what the byte quota bounds: Bytes plus Records.
	Total int64 `json:"total"`
	// Workspaces counts the live workspaces the tenant can name (conflict
	// and interrupted copies included; the hidden drafts of running execs
	// not).
	Workspaces int64 `json:"workspaces"`
}

// Tenant is one tenant's usage and quota, as `computerd tenant ls` shows them.
type Tenant struct {
	Name    string       `json:"tenant"`
	Usage   Usage        `json:"usage"`
	Quota   Quota        `json:"quota"`   // in force: Setting over the default
	Setting QuotaSetting `json:"setting"` // the tenant's own
}

// owner is the tenant that a workspace row's tenant belongs to: a draft's
// owner, or the tenant itself.
func owner(tenant string) string { return strings.TrimPrefix(tenant, draftTenantPrefix) }

// Usage returns what tenant holds.
func (s *Store) Usage(ctx context.Context, tenant string) (Usage, error) {
	return s.usageOn(ctx, s.rq, tenant)
}

func (s *Store) usageOn(ctx context.Context, db rowQuerier, tenant string) (Usage, error) {
	var u Usage
	err := db.QueryRowContext(ctx, `SELECT
		COALESCE((SELECT bytes FROM tenant_usage WHERE tenant = ?1), 0),
		COALESCE((SELECT chunks FROM tenant_usage WHERE tenant = ?1), 0),
		COALESCE((SELECT records FROM tenant_usage WHERE tenant = ?1), 0),
		(SELECT count(*) FROM workspaces WHERE tenant = ?1 AND deleted_ns IS NULL)`, tenant).
		Scan(&u.Bytes, &u.Chunks, &u.Records, &u.Workspaces)
	u.Total = u.Bytes + u.Records
	return u, wrapDB("usage", err)
}

// QuotaOf returns the quota in force for tenant: its setting over DefaultQuota.
func (s *Store) QuotaOf(ctx context.Context, tenant string) (Quota, error) {
	set, err := s.quotaSetting(ctx, s.rq, tenant)
	return set.over(s.DefaultQuota), err
}

func (q QuotaSetting) over(def Quota) Quota {
	if q.MaxBytes != nil {
		def.MaxBytes = *q.MaxBytes
	}
	if q.MaxWorkspaces != nil {
		def.MaxWorkspaces = *q.MaxWorkspaces
	}
	return def
}

// QuotaSetting returns tenant's own quota (SetQuota).
func (s *Store) QuotaSetting(ctx context.Context, tenant string) (QuotaSetting, error) {
	return s.quotaSetting(ctx, s.rq, tenant)
}

func (s *Store) quotaSetting(ctx context.Context, db rowQuerier, tenant string) (QuotaSetting, error) {
	var set QuotaSetting
	var b, w sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT max_bytes, max_workspaces FROM tenant_quotas WHERE tenant = ?`, tenant).Scan(&b, &w)
	if errors.Is(err, sql.ErrNoRows) {
		return set, nil
	} else if err != nil {
		return set, wrapDB("quota", err)
	}
	if b.Valid {
		set.MaxBytes = &b.Int64
	}
	if w.Valid {
		set.MaxWorkspaces = &w.Int64
	}
	return set, nil
}

// SetQuota records tenant's own quota (a setting with no field set goes
// back to the default). Like tokens it can be written beside the store's
// holder (a shared store): the daemon reads it at every check.
func (s *Store) SetQuota(ctx context.Context, tenant string, set QuotaSetting) error {
	if !ValidTenant(tenant) {
		return fmt.Errorf("tenant %q: want 1-128 of [A-Za-z0-9._-]: %w", tenant, core.ErrInvalidArgument)
	}
	for _, v := range []*int64{set.MaxBytes, set.MaxWorkspaces} {
		if v != nil && *v < 0 {
			return fmt.Errorf("quota %d: want 0 (no limit) or more: %w", *v, core.ErrInvalidArgument)
		}
	}
	return s.writeShared(ctx, func() error {
		var err error
		if set.MaxBytes == nil && set.MaxWorkspaces == nil {
			_, err = s.wconn.ExecContext(ctx, `DELETE FROM tenant_quotas WHERE tenant = ?`, tenant)
		} else {
			_, err = s.wconn.ExecContext(ctx, `INSERT INTO tenant_quotas(tenant, max_bytes, max_workspaces) VALUES (?, ?, ?)
				ON CONFLICT(tenant) DO UPDATE SET max_bytes = excluded.max_bytes, max_workspaces = excluded.max_workspaces`,
				tenant, set.MaxBytes, set.MaxWorkspaces)
		}
		return wrapDB("set quota", err)
	})
}

// Tenants lists every tenant that has a token, a workspace, stored bytes
// or a quota setting, by name. The hidden workspaces of drafts and of
// imports' stages (whose tenants start with '~', which no tenant's name
// holds) are no tenants of their own.
func (s *Store) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT tenant FROM (SELECT tenant FROM tokens UNION SELECT tenant FROM tenant_usage
		UNION SELECT tenant FROM tenant_quotas
		UNION SELECT tenant FROM workspaces WHERE deleted_ns IS NULL) WHERE substr(tenant, 1, 1) != '~' ORDER BY 1`)
	if err != nil {
		return nil, wrapDB("list tenants", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, wrapDB("list tenants", err)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrapDB("list tenants", err)
	}
	out := make([]Tenant, 0, len(names))
	for _, n := range names {
		t := Tenant{Name: n}
		if t.Usage, err = s.Usage(ctx, n); err != nil {
			return nil, err
		}
		if t.Setting, err = s.quotaSetting(ctx, s.rq, n); err != nil {
			return nil, err
		}
		t.Quota = t.Setting.over(s.DefaultQuota)
		out = append(out, t)
	}
	return out, nil
}

// Remaining is what tenant may still add to its stored bytes before its
// quota: negative when it is over, and max int64 when it has no byte quota.
func (s *Store) Remaining(ctx context.Context, tenant string) (int64, error) {
	q, err := s.QuotaOf(ctx, tenant)
	if err != nil || q.MaxBytes == 0 {
		return 1<<63 - 1, err
	}
	u, err := s.Usage(ctx, tenant)
	return q.MaxBytes - u.Total, err
}

// storedBytes reads what a tenant stores (Usage.Total) inside the writer's transaction.
func (t *wtx) storedBytes(tenant string) (int64, error) { return t.s.storedTotal(t.ctx, tenant) }

func (s *Store) storedTotal(ctx context.Context, tenant string) (int64, error) {
	var n int64
	err := s.wq.QueryRowContext(ctx, `SELECT COALESCE((SELECT bytes + records FROM tenant_usage WHERE tenant = ?), 0)`, tenant).Scan(&n)
	return n, wrapDB("usage", err)
}

// writeMetered runs fn, a write of records of tenant (runs, steps,
// memories, skills), in a write transaction, and fails it with
// core.ErrQuota if it added to what the tenant stores and left that over
// its byte quota. Writes that add nothing (an end of a step that shrinks
// it, a delete) always go through.
func (s *Store) writeMetered(ctx context.Context, tenant string, fn func() error) error {
	return s.write(ctx, func() error {
		before, err := s.storedTotal(ctx, tenant)
		if err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
		return s.checkTotal(ctx, tenant, before)
	})
}

// checkTotal fails with core.ErrQuota when what tenant stores grew from
// before to more than its byte quota; in the writer's transaction.
func (s *Store) checkTotal(ctx context.Context, tenant string, before int64) error {
	set, err := s.quotaSetting(ctx, s.wq, tenant)
	if err != nil {
		return err
	}
	q := set.over(s.DefaultQuota)
	if q.MaxBytes == 0 {
		return nil
	}
	after, err := s.storedTotal(ctx, tenant)
	if err != nil {
		return err
	}
	if after > before && after > q.MaxBytes {
		return fmt.Errorf("tenant %s would store %d bytes, over its quota of %d (it stores %d): delete workspaces (or files, and let retention prune them), runs, memories or skills: %w",
			tenant, after, q.MaxBytes, before, core.ErrQuota)
	}
	return nil
}

// checkQuota fails a metered commit (CommitInfo.Metered) with
// core.ErrQuota if it added stored bytes to its tenant and left them
// over the tenant's byte quota; before is what the tenant stored when the
// transaction began. A commit that adds nothing (a delete, a rename, a
// restore of bytes the tenant still holds) always goes through, so a
// tenant over its quota can still clean up.
func (t *wtx) checkQuota(info CommitInfo, before int64) error {
	if !info.Metered {
		return nil
	}
	return t.s.checkTotal(t.ctx, owner(t.ws.tenant), before)
}

// CheckWorkspaceQuota fails with core.ErrQuota when tenant already has as
// many live workspaces as its quota allows. Only new workspaces a caller
// asks for are checked (create, fork): the copies that keep conflicting
// or interrupted writes are made regardless, since they hold writes that
// were already accepted, and count from then on.
func (s *Store) CheckWorkspaceQuota(ctx context.Context, tenant string) error {
	q, err := s.QuotaOf(ctx, tenant)
	if err != nil || q.MaxWorkspaces == 0 {
		return err
	}
	u, err := s.Usage(ctx, tenant)
	if err != nil {
		return err
	}
	if u.Workspaces >= q.MaxWorkspaces {
		return fmt.Errorf("tenant %s has %d workspaces, its quota is %d: remove one first: %w", tenant, u.Workspaces, q.MaxWorkspaces, core.ErrQuota)
	}
	return nil
}

// Meter makes u stop with core.ErrQuota once the bytes of the chunks it
// wrote that the store did not hold before come to more than budget (a
// tenant's Remaining): an upload over the quota ends early rather than
// at its commit, when it would have filled the disk with chunks no one
// can commit. Those bytes are a lower bound of what the commit adds
// (chunks new to the store are no tenant's yet), so nothing that would
// fit is stopped; the commit (CommitInfo.Metered) checks exactly.
func (u *Uploader) Meter(budget int64) {
	u.metered, u.budget = true, budget
}

// overBudget is the error of an upload past its Meter.
func (u *Uploader) overBudget() error {
	if !u.metered || u.added <= u.budget {
		return nil
	}
	return fmt.Errorf("upload of %d bytes of new content is over the %d bytes the tenant's quota leaves: %w", u.added, max(u.budget, 0), core.ErrQuota)
}

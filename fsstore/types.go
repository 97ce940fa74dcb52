package fsstore

import "computerd/core"

// CommitInfo is recorded with the revision a commit creates.
type CommitInfo struct {
	Source  core.Source
	Tenant  string
	ExecID  string
	Message string
	// Key, when set, is the mutation's idempotency key: a commit with a
	// key some revision of the workspace already holds applies nothing and
	// returns that revision.
	Key string
	// Base, when non-zero, is the revision the changes were made against. If
	// the head has moved past it, the commit succeeds only when none of its
	// paths changed in between; otherwise it fails with a *ConflictError.
	Base int64
	// HomeRev, when non-zero, records that the new revision is a mirror of
	// this revision of a home's workspace (see Store.Mirror), in the
	// commit's own transaction; HomeWS is that workspace's id at the home.
	HomeRev, HomeWS int64
	// Confine, when set, takes the chunk hashes of the content ops as the
	// claims of a caller who may not hold those bytes (an API request, a
	// sync push): each must name a chunk the workspace's tenant already
	// references, or one sent with the request (Sent, and the data of the
	// commit's own write ops). Any other hash is core.ErrMissingChunk, with
	// the same answer after the same work whether or not the store holds
	// the chunk for someone else (reach.go).
	Confine bool
	// Sent is the Uploader whose PutChunk stored the chunks the request
	// carried (nil: it carried none); it counts only with Confine, and
	// must be flushed before the commit.
	Sent *Uploader
	// Metered makes the commit fail with core.ErrQuota when it adds to
	// what the workspace's tenant stores and leaves it over the tenant's
	// byte quota (Store.QuotaOf). API mutations and pushes are metered;
	// the commits of writes a command or a mount already accepted (execs,
	// mounts, their conflict and interrupted copies) are not, since
	// refusing them would lose those writes: their writes are bounded as
	// they are made instead.
	Metered bool
	// Bound, when set, counts the zeros the commit's ops open past the
	// ends of files (a truncate that lengthens one, a write past its end,
	// content whose size or chunks run past what it held) as made by the
	// request: past the Bound's limit the commit fails with a
	// *BoundError and changes nothing. Opening them costs the store
	// nothing, but every reader of the file gets them.
	Bound *Bound
}

package core

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; classify with errors.Is.
var (
	// ErrNotFound: a path, inode or workspace does not exist at the revision read.
	ErrNotFound = errors.New("not found")
	// ErrExists: the target name is taken.
	ErrExists = errors.New("already exists")
	// ErrNotDir: a path component, or the operand, is not a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a file operation named a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrNotEmpty: a directory to be removed or replaced still has entries.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrInvalidPath: a path escapes the workspace, holds NUL, or has an over-long component.
	ErrInvalidPath = errors.New("invalid path")
	// ErrInvalidArgument: an operation's arguments make no sense (negative size, rename into itself, ...).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknownRevision: the revision was never committed, or has been pruned.
	ErrUnknownRevision = errors.New("unknown revision")
	// ErrWorkspaceNotFound: no live workspace has that name or id.
	ErrWorkspaceNotFound = errors.New("workspace not found")
	// ErrWorkspaceExists: the tenant already has a workspace of that name.
	ErrWorkspaceExists = errors.New("workspace already exists")
	// ErrConflict: a commit based on an older revision touches paths changed since.
	ErrConflict = errors.New("conflict")
	// ErrMissingChunk: a changeset names a chunk the store does not hold,
	// or, in a commit of a tenant's request, one the tenant neither sent
	// nor holds in its workspaces (whether or not the store has it).
	ErrMissingChunk = errors.New("missing chunk")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store closed")
	// ErrLocked: another store (a running computerd serve, or an offline
	// computerd store command) holds the data directory's lock.
	ErrLocked = errors.New("data directory in use")
	// ErrBadToken: a bearer token is unknown or revoked.
	ErrBadToken = errors.New("invalid or revoked token")
	// ErrForbidden: the caller's token is good but may not do this (it
	// lacks the scope, or the operator's configuration does not allow it).
	ErrForbidden = errors.New("forbidden")
	// ErrQuota: the change would take the tenant over one of its quotas
	// (bytes stored, number of workspaces); nothing was written.
	ErrQuota = errors.New("quota exceeded")
	// ErrNoSpace: the data directory's file system is full (ENOSPC, or
	// SQLite's SQLITE_FULL); nothing was written, and the same request
	// succeeds once space is freed.
	ErrNoSpace = errors.New("no space left on device")
	// ErrTooLarge: a request asks for more than a limit allows (a body,
	// a file read whole, the bytes it would make beyond those it sent);
	// nothing was written.
	ErrTooLarge = errors.New("too large")
)

// PathError records the operation and path that failed.
type PathError struct {
	Op   string
	Path string
	Err  error
}

func (e *PathError) Error() string { return fmt.Sprintf("%s %q: %v", e.Op, e.Path, e.Err) }
func (e *PathError) Unwrap() error { return e.Err }

// ConflictError lists the paths a rejected commit shares with changes made since its base.
type ConflictError struct {
	Base, Head int64
	Paths      []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("conflict: base revision %d, head %d; changed meanwhile: %s", e.Base, e.Head, strings.Join(e.Paths, ", "))
}
func (e *ConflictError) Unwrap() error { return ErrConflict }

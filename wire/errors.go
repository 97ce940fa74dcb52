package wire

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"time"

	"computerd/core"
)

// Sentinel errors for the kinds of failure the API reports that core has
// no sentinel for; classify with errors.Is, on either side.
var (
	// ErrTooLarge: a request body, a file an operation must read whole,
	// or what a request would make beyond the bytes it sent, is over a
	// limit. It is core's, so that the store's refusals classify too.
	ErrTooLarge = core.ErrTooLarge
	// ErrTimeout: the request's body stopped arriving, or arrived too
	// slowly, and the server cut it; nothing was committed.
	ErrTimeout = errors.New("timeout")
	// ErrBusy: the server is at a concurrency limit (running execs, per
	// tenant or in total); the same request may succeed after Retry-After.
	ErrBusy = errors.New("busy")
	// ErrUnavailable: the server cannot serve this now (shutting down, or the feature is off).
	ErrUnavailable = errors.New("unavailable")
	// ErrInternal: the server failed in a way the caller cannot fix.
	ErrInternal = errors.New("internal error")
)

// Error codes: one per kind of failure, the code of wire.Error.
const (
	CodeNotFound          = "not_found"
	CodeExists            = "exists"
	CodeNotDir            = "not_dir"
	CodeIsDir             = "is_dir"
	CodeNotEmpty          = "not_empty"
	CodeInvalidPath       = "invalid_path"
	CodeInvalid           = "invalid"
	CodeConflict          = "conflict"
	CodeTooLarge          = "too_large"
	CodeUnknownRevision   = "unknown_revision"
	CodeWorkspaceNotFound = "workspace_not_found"
	CodeWorkspaceExists   = "workspace_exists"
	CodeMissingChunk      = "missing_chunk"
	CodeUnauthorized      = "unauthorized"
	CodeForbidden         = "forbidden"
	CodeQuota             = "quota_exceeded"
	CodeNoSpace           = "no_space"
	CodeBusy              = "busy"
	CodeTimeout           = "timeout"
	CodeUnavailable       = "unavailable"
	CodeInternal          = "internal"
)

// Kind is one kind of failure: its code, its HTTP status, and the
// sentinel error both ends classify it by.
type Kind struct {
	Code   string
	Status int
	Err    error
}

// kinds is the table. KindOf takes the first kind an error matches, so a
// sentinel that may be wrapped together with a broader one comes first.
var kinds = []Kind{
	{CodeConflict, http.StatusConflict, core.ErrConflict},
	{CodeWorkspaceNotFound, http.StatusNotFound, core.ErrWorkspaceNotFound},
	{CodeWorkspaceExists, http.StatusConflict, core.ErrWorkspaceExists},
	{CodeUnknownRevision, http.StatusNotFound, core.ErrUnknownRevision},
	{CodeMissingChunk, http.StatusBadRequest, core.ErrMissingChunk},
	{CodeNotFound, http.StatusNotFound, core.ErrNotFound},
	{CodeExists, http.StatusConflict, core.ErrExists},
	{CodeNotDir, http.StatusBadRequest, core.ErrNotDir},
	{CodeIsDir, http.StatusBadRequest, core.ErrIsDir},
	{CodeNotEmpty, http.StatusBadRequest, core.ErrNotEmpty},
	{CodeInvalidPath, http.StatusBadRequest, core.ErrInvalidPath},
	{CodeInvalid, http.StatusBadRequest, core.ErrInvalidArgument},
	{CodeUnauthorized, http.StatusUnauthorized, core.ErrBadToken},
	{CodeForbidden, http.StatusForbidden, core.ErrForbidden},
	{CodeQuota, http.StatusForbidden, core.ErrQuota},
	{CodeNoSpace, http.StatusInsufficientStorage, core.ErrNoSpace},
	{CodeTooLarge, http.StatusRequestEntityTooLarge, ErrTooLarge},
	{CodeBusy, http.StatusTooManyRequests, ErrBusy},
	{CodeTimeout, http.StatusRequestTimeout, ErrTimeout},
	{CodeUnavailable, http.StatusServiceUnavailable, ErrUnavailable},
	{CodeInternal, http.StatusInternalServerError, ErrInternal},
}

// BusyRetryAfter is the Retry-After, in seconds, of every busy answer:
// what it waits for is a running exec to end, and a second's poll costs a
// client little while it keeps a queue of retries from hammering the server.
const BusyRetryAfter = 1

// Kinds returns the table, in the order KindOf tries it.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// KindOf classifies err by the table; an error of no kind is internal.
// A few errors of other packages count too: a closed store and a
// cancelled request are unavailable, a body over http.MaxBytesReader's
// limit too large, a file system out of space or quota (ENOSPC, EDQUOT)
// no_space, and a *Error keeps the kind of its code.
func KindOf(err error) Kind {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return kindOf(CodeTooLarge)
	case errors.Is(err, core.ErrClosed), errors.Is(err, context.Canceled):
		return kindOf(CodeUnavailable)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return kindOf(CodeNoSpace)
	}
	for _, k := range kinds {
		if errors.Is(err, k.Err) {
			return k
		}
	}
	return kindOf(CodeInternal)
}

// KindByCode returns the kind a code names.
func KindByCode(code string) (Kind, bool) {
	for _, k := range kinds {
		if k.Code == code {
			return k, true
		}
	}
	return Kind{}, false
}

func kindOf(code string) Kind {
	k, _ := KindByCode(code)
	return k
}

// Error is the body of every failed call, and the error a client returns
// for it: it unwraps to its kind's sentinel (a conflict to a
// *core.ConflictError with the paths), so errors.Is and errors.As
// classify it exactly as they classify the error the server met.
type Error struct {
	Code    string   `json:"code"`            // machine-readable: see Kinds
	Message string   `json:"error"`           // human-readable, shown by agentctl
	Paths   []string `json:"paths,omitempty"` // for conflicts: the paths that changed since the base
	// Status is the HTTP status the error came with (0 when it did not
	// come over HTTP); not part of the body.
	Status int `json:"-"`
	// RetryAfter is the wait the answer's Retry-After header asked for
	// (0 without one); not part of the body.
	RetryAfter time.Duration `json:"-"`
	// Foreign: the answer was not the API's own (no JSON error body): a
	// bare status from an HTTP server that could not read the request, or
	// a proxy's page. Its code is the broadest of its status; not part of
	// the body.
	Foreign bool `json:"-"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message
}

// Unwrap returns the sentinel of e's code (nil for a code it does not know).
func (e *Error) Unwrap() error {
	k, ok := KindByCode(e.Code)
	switch {
	case !ok:
		return nil
	case k.Err == core.ErrConflict:
		return &core.ConflictError{Paths: e.Paths}
	}
	return k.Err
}

// ErrorOf is the answer to a call that failed with err: the code and
// status of its kind, its message, and a conflict's paths. An *Error
// (one a remote server answered) passes through with its own code and
// status, so a proxied failure reads as it did at its source.
func ErrorOf(err error) *Error {
	var we *Error
	if errors.As(err, &we) && we.Code != "" {
		out := &Error{Code: we.Code, Message: err.Error(), Paths: we.Paths, Status: we.Status}
		if out.Status == 0 {
			out.Status = kindOf(CodeInternal).Status
			if k, ok := KindByCode(we.Code); ok {
				out.Status = k.Status
			}
		}
		return out
	}
	k := KindOf(err)
	out := &Error{Code: k.Code, Message: err.Error(), Status: k.Status}
	var ce *core.ConflictError
	if errors.As(err, &ce) {
		out.Paths = ce.Paths
	}
	return out
}

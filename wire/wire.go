// Package wire defines computerd's HTTP API (v1) as both ends speak it:
// the JSON bodies, the error codes and their table (errors.go), the one
// request path every Go client takes (caller.go), and where a client
// finds its token and which certificates it trusts (credentials.go). The server
// (computerd/api) and the clients (client, syncproto) share it, so
// a kind of failure means the same on both sides of the connection.
package wire

import "computerd/core"

// Version is the API version in every path: /v1/...
const Version = "v1"

// Header names the API uses besides the standard ones.
const (
	// HeaderRevision carries the revision a read was served from, or the
	// revision a write committed.
	HeaderRevision = "Computerd-Revision"
	// HeaderIdempotencyKey makes a retried mutation return the first answer.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// CreateWorkspace is the body of POST /v1/workspaces.
type CreateWorkspace struct {
	Name string `json:"name"`
}

// Fork is the body of POST /v1/workspaces/{ws}/fork.
type Fork struct {
	Name string `json:"name"`
	Rev  int64  `json:"rev,omitempty"` // 0: head
}

// Ops is the body of POST /v1/workspaces/{ws}/ops: a batch committed as one revision.
type Ops struct {
	Ops     []core.Op `json:"ops"`
	Base    int64     `json:"base,omitempty"` // fail with a conflict if these paths changed after Base
	Message string    `json:"message,omitempty"`
}

// Edit is the body of POST /v1/workspaces/{ws}/edit: replace Old by New in Path.
type Edit struct {
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
	All  bool   `json:"all,omitempty"` // replace every match; otherwise exactly one must exist
	Key  string `json:"key,omitempty"` // idempotency key (or the Idempotency-Key header)
}

// EditResult answers an Edit.
type EditResult struct {
	Revision     core.Revision `json:"revision"`
	Replacements int           `json:"replacements"`
	// Replayed: an edit with this idempotency key had committed already;
	// Revision is its revision and nothing was applied again.
	Replayed bool `json:"replayed,omitempty"`
}

// Restore is the body of POST /v1/workspaces/{ws}/restore.
type Restore struct {
	Rev  int64  `json:"rev"`
	Path string `json:"path,omitempty"` // empty: the whole tree
}

// Match is one line of GET /v1/workspaces/{ws}/grep's NDJSON answer.
type Match struct {
	Path    string `json:"path"`
	Line    int    `json:"line"`
	Text    string `json:"text"`
	Context bool   `json:"context,omitempty"` // a context line, not a match
	Break   bool   `json:"break,omitempty"`   // a gap between groups of lines ("--")
}

// AttachResult answers POST /v1/workspaces/{ws}/attach.
type AttachResult struct {
	Revision core.Revision `json:"revision"`
	Files    int           `json:"files"`
	Bytes    int64         `json:"bytes"`
}

// ExecRequest is the body of POST /v1/workspaces/{ws}/exec.
type ExecRequest struct {
	Argv    []string          `json:"argv"`
	Cwd     string            `json:"cwd,omitempty"` // relative to /workspace
	Env     map[string]string `json:"env,omitempty"`
	Stdin   []byte            `json:"stdin,omitempty"`
	Timeout string            `json:"timeout,omitempty"` // a Go duration: "30s", "5m"
	Key     string            `json:"key,omitempty"`     // idempotency key (or the Idempotency-Key header)
	Memory  int64             `json:"memory,omitempty"`  // bytes
	Pids    int64             `json:"pids,omitempty"`
	CPUs    float64           `json:"cpus,omitempty"`
}

// ExecEvent is one line of an exec's NDJSON event stream: output as it
// is produced, then exactly one "exit" event carrying the journal record.
type ExecEvent struct {
	Seq    uint64     `json:"seq"`
	Type   string     `json:"type"`               // "output", "truncated" (the output log reached its cap; Data says so) or "exit"
	Stream string     `json:"stream,omitempty"`   // "stdout" or "stderr"
	Data   string     `json:"data,omitempty"`     // the bytes, when they are valid UTF-8
	Data64 []byte     `json:"data_b64,omitempty"` // otherwise, base64
	Exec   *core.Exec `json:"exec,omitempty"`     // with "exit"
}

// Bytes returns an output event's bytes.
func (e ExecEvent) Bytes() []byte {
	if e.Data64 != nil {
		return e.Data64
	}
	return []byte(e.Data)
}

// Mount is the body of POST /v1/workspaces/{ws}/mount, and MountInfo the
// answer and each entry of GET /v1/mounts.
type Mount struct {
	Dir string `json:"dir"` // absolute, an existing empty directory on the daemon's host
}

// MountInfo describes a live host mount.
type MountInfo struct {
	Dir       string `json:"dir"`
	Workspace string `json:"workspace"`
	Base      int64  `json:"base"` // the revision the mount shows (plus its own writes)
	Error     string `json:"error,omitempty"`
}

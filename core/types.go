package core

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"time"
)

// Head names the newest revision of a workspace wherever a revision is asked for.
const Head int64 = 0

// Source says what produced a revision.
type Source string

// Revision sources.
const (
	SourceCreate  Source = "create"
	SourceAPI     Source = "api"
	SourceExec    Source = "exec"
	SourceMount   Source = "mount"
	SourceSync    Source = "sync"
	SourceRestore Source = "restore"
	SourceFork    Source = "fork"
	// SourceInterrupted: writes an exec made before computerd or its container died.
	SourceInterrupted Source = "interrupted"
)

// Workspace is a named, revisioned tree owned by one tenant.
type Workspace struct {
	ID      int64     `json:"id"`
	Tenant  string    `json:"tenant"`
	Name    string    `json:"name"`
	Head    int64     `json:"head"`
	BaseID  int64     `json:"base_id,omitempty"`  // fork source workspace, 0 if none
	BaseRev int64     `json:"base_rev,omitempty"` // fork source revision
	Created time.Time `json:"created"`
}

// Revision describes one committed state of a workspace.
type Revision struct {
	Rev     int64     `json:"rev"`
	Time    time.Time `json:"time"`
	Source  Source    `json:"source"`
	Tenant  string    `json:"tenant"`
	ExecID  string    `json:"exec_id,omitempty"`
	Message string    `json:"message,omitempty"`
	Changes int       `json:"changes"` // number of ops applied
}

// Hash is the SHA-256 of a chunk's bytes.
type Hash [32]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText encodes the hash as hex.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes a hex hash.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) != 64 {
		return fmt.Errorf("hash %q: want 64 hex digits", b)
	}
	_, err := hex.Decode(h[:], b)
	return err
}

// ChunkRef places one stored chunk at chunk index Index of a file.
type ChunkRef struct {
	Index int64 `json:"i"`
	Hash  Hash  `json:"h"`
	Len   int   `json:"n"`
	// Row is the chunk's row id in the store that made or received this
	// ref: a hint that saves a hash lookup, checked before use, never sent.
	Row int64 `json:"-"`
}

// Content is a sequence of chunks already in a store (see fsstore.Store.Put).
type Content struct {
	Size   int64      `json:"size"`
	Chunks []ChunkRef `json:"chunks"`
}

// Stat describes a file, directory, symlink or special file (a FIFO, a
// socket, a character or block device) at some revision.
type Stat struct {
	Path   string      `json:"path,omitempty"`
	Name   string      `json:"name"`
	Ino    uint64      `json:"ino"`
	Mode   fs.FileMode `json:"mode"`
	UID    uint32      `json:"uid"`
	GID    uint32      `json:"gid"`
	Nlink  uint32      `json:"nlink"`
	Size   int64       `json:"size"`
	Mtime  time.Time   `json:"mtime"`
	Ctime  time.Time   `json:"ctime"`
	Target string      `json:"target,omitempty"` // symlink target
	Rdev   uint64      `json:"rdev,omitempty"`   // a device's number (Linux encoding, see MakeDev)
}

// IsDir reports whether s describes a directory.
func (s Stat) IsDir() bool { return s.Mode.IsDir() }

// DirEntry is one name in a directory listing.
type DirEntry struct {
	Name string      `json:"name"`
	Ino  uint64      `json:"ino"`
	Type fs.FileMode `json:"type"` // 0 (a regular file), or fs.ModeDir, fs.ModeSymlink or a SpecialTypes type
}

// SpecialTypes are the file types of special files: FIFOs
// (fs.ModeNamedPipe), sockets (fs.ModeSocket), block devices
// (fs.ModeDevice) and character devices (fs.ModeDevice|fs.ModeCharDevice),
// as package os reports them. The store keeps them as metadata: a device
// node records its number, never its data, and no mount lets it be opened.
const SpecialTypes = fs.ModeNamedPipe | fs.ModeSocket | fs.ModeDevice | fs.ModeCharDevice

// IsSpecial reports whether m is the mode of a special file.
func IsSpecial(m fs.FileMode) bool { return m&SpecialTypes != 0 }

// MakeDev combines a device's major and minor numbers as Linux's st_rdev
// does (glibc's makedev).
func MakeDev(major, minor uint32) uint64 {
	return uint64(major&0xfff)<<8 | uint64(major&^0xfff)<<32 | uint64(minor&0xff) | uint64(minor&^0xff)<<12
}

// DevMajor is the major number of a device number made by MakeDev.
func DevMajor(dev uint64) uint32 { return uint32(dev>>8&0xfff | dev>>32&^0xfff) }

// DevMinor is the minor number of a device number made by MakeDev.
func DevMinor(dev uint64) uint32 { return uint32(dev&0xff | dev>>12&^0xff) }

// OpKind names a mutation.
type OpKind string

// Mutations. Paths are workspace-relative; see Op for which fields each uses.
const (
	OpMkdir     OpKind = "mkdir"      // Path, Mode
	OpCreate    OpKind = "create"     // Path, Mode, Data or Content: create, or replace the contents of an existing file
	OpWrite     OpKind = "write"      // Path, Offset, Data or Content: write into an existing file
	OpTruncate  OpKind = "truncate"   // Path, Size
	OpSymlink   OpKind = "symlink"    // Path, Target
	OpMknod     OpKind = "mknod"      // Path, Mode (a SpecialTypes type and permissions), Rdev (devices)
	OpLink      OpKind = "link"       // Path (new name), From (existing file)
	OpRename    OpKind = "rename"     // From -> Path; NoReplace, Exchange
	OpDelete    OpKind = "delete"     // Path: a file, symlink or empty directory
	OpDeleteAll OpKind = "delete_all" // Path: recursively; a missing path is not an error
	OpChmod     OpKind = "chmod"      // Path, Mode
	OpChown     OpKind = "chown"      // Path, UID, GID
	OpUtimes    OpKind = "utimes"     // Path, Mtime
)

// Op is one mutation. Batches apply ops in order; changesets apply them as a
// description of the difference between two trees (see Changeset).
type Op struct {
	Kind   OpKind      `json:"op"`
	Path   string      `json:"path"`
	From   string      `json:"from,omitempty"`
	Target string      `json:"target,omitempty"`
	Mode   fs.FileMode `json:"mode,omitempty"`
	UID    uint32      `json:"uid,omitempty"`
	GID    uint32      `json:"gid,omitempty"`
	Mtime  int64       `json:"mtime,omitempty"` // Unix nanoseconds: utimes; for create, symlink and mknod, if set, the new mtime
	Offset int64       `json:"offset,omitempty"`
	Size   int64       `json:"size,omitempty"`
	Rdev   uint64      `json:"rdev,omitempty"` // mknod of a device: its number (MakeDev)
	// Data is inline bytes for create and write.
	Data []byte `json:"data,omitempty"`
	// Content is chunk-aligned content already in the store, for create
	// (the whole file) and write (chunk slots Content.Chunks[i].Index replaced
	// whole; Offset unused).
	Content *Content `json:"content,omitempty"`
	// NoReplace makes rename fail with ErrExists if Path exists.
	NoReplace bool `json:"no_replace,omitempty"`
	// Exchange makes rename swap From and Path, which must both exist.
	Exchange bool `json:"exchange,omitempty"`
	// Parents makes mkdir make the missing parents too, and take a
	// directory already there as done (mkdir -p).
	Parents bool `json:"parents,omitempty"`
}

func (op Op) String() string {
	b, _ := json.Marshal(op)
	return string(b)
}

// Batch is an ordered list of mutations committed atomically as one
// revision. Each op sees the effects of the ops before it, as if run one by
// one against a POSIX file system.
type Batch struct {
	Ops []Op
}

// Add appends ops to the batch.
func (b *Batch) Add(ops ...Op) *Batch { b.Ops = append(b.Ops, ops...); return b }

// Mkdir adds a mkdir.
func (b *Batch) Mkdir(p string, mode fs.FileMode) *Batch {
	return b.Add(Op{Kind: OpMkdir, Path: p, Mode: mode})
}

// WriteFile adds a create that sets p's whole contents to data.
func (b *Batch) WriteFile(p string, data []byte, mode fs.FileMode) *Batch {
	return b.Add(Op{Kind: OpCreate, Path: p, Data: data, Mode: mode})
}

// Changeset is the difference between two revisions of one tree: what
// the store's Diff produces and its Apply commits, and what sync carries.
//
// Its ops are declarative rather than sequential. Delete paths and rename
// From paths name entries in the base tree; every other path names an entry
// in the resulting tree. Applying resolves base paths first, removes entries,
// adds entries shallowest first, then links, then sets contents and
// attributes in order. So renames never need temporaries, and the order of
// structural ops does not matter.
type Changeset struct {
	From int64 `json:"from"` // base revision
	To   int64 `json:"to"`   // resulting revision (at the source)
	Ops  []Op  `json:"ops"`
}

// Chunks lists the distinct chunks the changeset's content refers to.
func (c *Changeset) Chunks() []Hash {
	seen := map[Hash]bool{}
	var out []Hash
	for _, op := range c.Ops {
		if op.Content == nil {
			continue
		}
		for _, ch := range op.Content.Chunks {
			if !seen[ch.Hash] {
				seen[ch.Hash] = true
				out = append(out, ch.Hash)
			}
		}
	}
	return out
}

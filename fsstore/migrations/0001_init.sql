-- Store-wide settings fixed at creation (chunk size).
CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;

-- A workspace is also a layer of versioned rows. A fork is a layer whose
-- reads fall through to (base_ws, base_rev) for every key it never touched.
CREATE TABLE workspaces (
	id         INTEGER PRIMARY KEY,
	tenant     TEXT NOT NULL,
	name       TEXT NOT NULL,
	root_ino   INTEGER NOT NULL,
	base_ws    INTEGER REFERENCES workspaces(id),
	base_rev   INTEGER,
	head       INTEGER NOT NULL,
	created_ns INTEGER NOT NULL,
	deleted_ns INTEGER
);
CREATE UNIQUE INDEX workspaces_name ON workspaces(tenant, name) WHERE deleted_ns IS NULL;
CREATE INDEX workspaces_base ON workspaces(base_ws) WHERE base_ws IS NOT NULL;

-- One row per committed revision; pruned revisions lose their row.
CREATE TABLE revisions (
	ws      INTEGER NOT NULL REFERENCES workspaces(id),
	rev     INTEGER NOT NULL,
	time_ns INTEGER NOT NULL,
	source  TEXT NOT NULL,
	tenant  TEXT NOT NULL,
	exec_id TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT '',
	changes INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (ws, rev)
) WITHOUT ROWID;

-- Paths: directory entries. A row is alive for revisions birth <= r < death.
-- ino = 0 is a tombstone: the name is absent, and the base layer is not consulted.
CREATE TABLE dentries (
	ws     INTEGER NOT NULL,
	parent INTEGER NOT NULL,
	name   BLOB NOT NULL,
	birth  INTEGER NOT NULL,
	death  INTEGER NOT NULL,
	ino    INTEGER NOT NULL,
	kind   INTEGER NOT NULL,
	PRIMARY KEY (ws, parent, name, birth)
) WITHOUT ROWID;
CREATE INDEX dentries_birth ON dentries(ws, birth);

-- Metadata: inodes. Directories also record their parent and name, so a
-- directory's path can be rebuilt without a reverse index.
CREATE TABLE inodes (
	ws       INTEGER NOT NULL,
	ino      INTEGER NOT NULL,
	birth    INTEGER NOT NULL,
	death    INTEGER NOT NULL,
	mode     INTEGER NOT NULL,
	uid      INTEGER NOT NULL,
	gid      INTEGER NOT NULL,
	nlink    INTEGER NOT NULL,
	size     INTEGER NOT NULL,
	mtime_ns INTEGER NOT NULL,
	ctime_ns INTEGER NOT NULL,
	target   BLOB,
	parent   INTEGER NOT NULL DEFAULT 0,
	name     BLOB,
	PRIMARY KEY (ws, ino, birth)
) WITHOUT ROWID;
CREATE INDEX inodes_birth ON inodes(ws, birth);

-- Bytes: the chunk at index idx covers [idx*chunk_size, idx*chunk_size+chunk_size);
-- bytes past the chunk's length (and missing indices) read as zeros.
-- chunk = NULL is a tombstone (a hole that shadows the base layer).
CREATE TABLE extents (
	ws    INTEGER NOT NULL,
	ino   INTEGER NOT NULL,
	idx   INTEGER NOT NULL,
	birth INTEGER NOT NULL,
	death INTEGER NOT NULL,
	chunk INTEGER REFERENCES chunks(id),
	PRIMARY KEY (ws, ino, idx, birth)
) WITHOUT ROWID;
CREATE INDEX extents_birth ON extents(ws, birth);
CREATE INDEX extents_chunk ON extents(chunk);

-- Content-addressed chunks (SHA-256), shared by every file, revision and workspace.
CREATE TABLE chunks (
	id   INTEGER PRIMARY KEY,
	hash BLOB NOT NULL UNIQUE,
	size INTEGER NOT NULL,
	data BLOB NOT NULL
);

-- Allocator for inode numbers, global so forks can share inodes with their base.
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters(name, value) VALUES ('ino', 1);

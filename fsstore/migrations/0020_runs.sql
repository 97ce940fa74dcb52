-- Agent runs: one row per run, one per step, written by the client that
-- drives the model (computerd only records). Every field is a column of
-- its own: the API body's JSON never reaches the disk, so renaming a field
-- of it changes nothing stored. A step is recorded when it starts and
-- again when it ends.
CREATE TABLE runs (
	id            TEXT PRIMARY KEY,
	tenant        TEXT NOT NULL,
	ws            INTEGER NOT NULL,
	task          TEXT NOT NULL,
	provider      TEXT NOT NULL DEFAULT '',
	model         TEXT NOT NULL DEFAULT '',
	skill         TEXT NOT NULL DEFAULT '',
	max_steps     INTEGER NOT NULL DEFAULT 0,
	max_tokens    INTEGER NOT NULL DEFAULT 0,
	max_cost      REAL NOT NULL DEFAULT 0,
	timeout       TEXT NOT NULL DEFAULT '',
	state         TEXT NOT NULL,
	error         TEXT NOT NULL DEFAULT '',
	created_ns    INTEGER NOT NULL,
	ended_ns      INTEGER NOT NULL DEFAULT 0,
	base_rev      INTEGER NOT NULL,
	driver        TEXT NOT NULL DEFAULT '',
	cancel        INTEGER NOT NULL DEFAULT 0,
	steps         INTEGER NOT NULL DEFAULT 0,
	input_tokens  INTEGER NOT NULL DEFAULT 0,
	output_tokens INTEGER NOT NULL DEFAULT 0,
	cost          REAL NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX runs_ws ON runs(ws, created_ns);

CREATE TABLE run_steps (
	run           TEXT NOT NULL,
	seq           INTEGER NOT NULL,
	kind          TEXT NOT NULL,
	state         TEXT NOT NULL,
	tool          TEXT NOT NULL DEFAULT '',
	call_id       TEXT NOT NULL DEFAULT '',
	args          TEXT NOT NULL DEFAULT '',
	text          TEXT NOT NULL DEFAULT '',
	calls         TEXT NOT NULL DEFAULT '', -- JSON: [{"id","name","args"}]
	is_error      INTEGER NOT NULL DEFAULT 0,
	code          TEXT NOT NULL DEFAULT '',
	exec_id       TEXT NOT NULL DEFAULT '',
	exit_code     INTEGER,
	rev           INTEGER NOT NULL DEFAULT 0,
	input_tokens  INTEGER NOT NULL DEFAULT 0,
	output_tokens INTEGER NOT NULL DEFAULT 0,
	cost          REAL NOT NULL DEFAULT 0,
	started_ns    INTEGER NOT NULL,
	ended_ns      INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (run, seq)
) WITHOUT ROWID;

-- Facts a tenant keeps for every new run, and its saved procedures.
CREATE TABLE memories (
	id         INTEGER PRIMARY KEY,
	tenant     TEXT NOT NULL,
	text       TEXT NOT NULL,
	created_ns INTEGER NOT NULL
);
CREATE INDEX memories_tenant ON memories(tenant, id);

CREATE TABLE skills (
	tenant      TEXT NOT NULL,
	name        TEXT NOT NULL,
	description TEXT NOT NULL DEFAULT '',
	body        TEXT NOT NULL,
	updated_ns  INTEGER NOT NULL,
	PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

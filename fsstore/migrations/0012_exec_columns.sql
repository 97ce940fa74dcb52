-- The journal keeps each exec's fields in columns of its own. Until now a
-- row held the API body (core.Exec as JSON) in record, so renaming a JSON
-- field of the API changed what was on disk and what old rows decode to;
-- fsstore now converts between these columns and core.Exec itself
-- (journal.go). Lists (argv, env names, conflict paths) are JSON arrays of
-- strings; times are Unix nanoseconds, 0 when not set; states are the
-- names fsstore fixes in journal.go.
CREATE TABLE execs_v2 (
	id            TEXT PRIMARY KEY,
	tenant        TEXT NOT NULL,
	ws            INTEGER NOT NULL,
	ws_name       TEXT NOT NULL DEFAULT '',
	idem_key      TEXT,
	argv          TEXT NOT NULL DEFAULT '[]',
	cwd           TEXT NOT NULL DEFAULT '',
	env_names     TEXT NOT NULL DEFAULT '[]',
	base_rev      INTEGER NOT NULL DEFAULT 0,
	state         TEXT NOT NULL,
	started_ns    INTEGER NOT NULL,
	ended_ns      INTEGER NOT NULL DEFAULT 0,
	exit_code     INTEGER NOT NULL DEFAULT 0,
	signal        TEXT NOT NULL DEFAULT '',
	timed_out     INTEGER NOT NULL DEFAULT 0,
	stdout_bytes  INTEGER NOT NULL DEFAULT 0,
	stderr_bytes  INTEGER NOT NULL DEFAULT 0,
	rev           INTEGER NOT NULL DEFAULT 0,
	conflict      TEXT NOT NULL DEFAULT '[]',
	kept_as       TEXT NOT NULL DEFAULT '',
	draft         INTEGER NOT NULL DEFAULT 0,
	error         TEXT NOT NULL DEFAULT '',
	executor      TEXT NOT NULL DEFAULT '',
	home_base     INTEGER NOT NULL DEFAULT 0,
	pending_state TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;

-- Old rows: the JSON names are those core.Exec had when migration 0011 was
-- current, frozen here. "ended" is Go's RFC 3339 with up to nine
-- fractional digits and a zone (Z or +hh:mm); SQLite's date functions keep
-- only milliseconds (and round), so the whole seconds and the fraction are
-- read apart: "2026-12-01T12:00:01.987654321+02:00" is unixepoch of
-- "2026-12-01T12:00:01+02:00" plus 987654321 ns.
INSERT INTO execs_v2 (id, tenant, ws, ws_name, idem_key, argv, cwd, env_names, base_rev, state,
	started_ns, ended_ns, exit_code, signal, timed_out, stdout_bytes, stderr_bytes, rev,
	conflict, kept_as, draft, error, executor, home_base, pending_state)
SELECT id, tenant, ws,
	COALESCE(json_extract(record, '$.workspace'), ''),
	idem_key,
	COALESCE(json_extract(record, '$.argv'), '[]'),
	COALESCE(json_extract(record, '$.cwd'), ''),
	COALESCE(json_extract(record, '$.env_names'), '[]'),
	COALESCE(json_extract(record, '$.base_rev'), 0),
	state,
	started_ns,
	CASE WHEN ended IS NULL THEN 0 ELSE
		unixepoch(substr(ended, 1, 19) || substr(ended, -zlen)) * 1000000000 +
		CASE WHEN substr(ended, 20, 1) = '.'
			THEN CAST(substr(substr(ended, 21, length(ended) - 20 - zlen) || '000000000', 1, 9) AS INTEGER)
			ELSE 0 END
	END,
	COALESCE(json_extract(record, '$.exit_code'), 0),
	COALESCE(json_extract(record, '$.signal'), ''),
	COALESCE(json_extract(record, '$.timed_out'), 0),
	COALESCE(json_extract(record, '$.stdout_bytes'), 0),
	COALESCE(json_extract(record, '$.stderr_bytes'), 0),
	COALESCE(json_extract(record, '$.rev'), 0),
	COALESCE(json_extract(record, '$.conflict'), '[]'),
	COALESCE(json_extract(record, '$.kept_as'), ''),
	COALESCE(json_extract(record, '$.draft'), 0),
	COALESCE(json_extract(record, '$.error'), ''),
	COALESCE(json_extract(record, '$.executor'), ''),
	COALESCE(json_extract(record, '$.home_base'), 0),
	COALESCE(json_extract(record, '$.pending_state'), '')
FROM (SELECT *, json_extract(record, '$.ended') AS ended,
		CASE WHEN json_extract(record, '$.ended') LIKE '%Z' THEN 1 ELSE 6 END AS zlen
	FROM execs);

DROP TABLE execs;
ALTER TABLE execs_v2 RENAME TO execs;
CREATE UNIQUE INDEX execs_key ON execs(tenant, ws, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX execs_ws ON execs(ws, started_ns);
CREATE INDEX execs_state ON execs(state) WHERE state IN ('running', 'pending');

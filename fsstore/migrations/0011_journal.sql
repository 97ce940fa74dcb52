-- The journal: one row per exec. The full record is JSON; the columns index it.
-- A revision an exec committed names it in revisions.exec_id, written in the
-- commit's own transaction.
CREATE TABLE execs (
	id         TEXT PRIMARY KEY,
	tenant     TEXT NOT NULL,
	ws         INTEGER NOT NULL,
	idem_key   TEXT,
	state      TEXT NOT NULL,
	started_ns INTEGER NOT NULL,
	record     TEXT NOT NULL
) WITHOUT ROWID;
CREATE UNIQUE INDEX execs_key ON execs(tenant, ws, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX execs_ws ON execs(ws, started_ns);
CREATE INDEX execs_state ON execs(state) WHERE state IN ('running', 'pending');
CREATE INDEX revisions_exec ON revisions(exec_id) WHERE exec_id != '';

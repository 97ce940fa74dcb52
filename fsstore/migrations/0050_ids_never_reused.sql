-- Workspace ids were SQLite rowids, and a deleted workspace's row goes
-- once nothing reads through it, so the next workspace made (by any
-- tenant) got the id back, and with it everything still keyed by it: the
-- exec journal, agent runs, the exec view's live tree. Ids now come from
-- a counter that only goes up, seeded past every id any table still
-- names; memories' ids the same way.
INSERT INTO counters(name, value) VALUES ('workspace', (SELECT max(m) FROM (
	SELECT COALESCE(max(id), 0) AS m FROM workspaces
	UNION ALL SELECT COALESCE(max(ws), 0) FROM revisions
	UNION ALL SELECT COALESCE(max(ws), 0) FROM dentries
	UNION ALL SELECT COALESCE(max(ws), 0) FROM inodes
	UNION ALL SELECT COALESCE(max(ws), 0) FROM extents
	UNION ALL SELECT COALESCE(max(ws), 0) FROM execs
	UNION ALL SELECT COALESCE(max(draft), 0) FROM execs
	UNION ALL SELECT COALESCE(max(ws), 0) FROM runs
	UNION ALL SELECT COALESCE(max(ws), 0) FROM mirrors)));
INSERT INTO counters(name, value) VALUES ('memory', (SELECT COALESCE(max(id), 0) FROM memories));

-- What a reused id already carried to another tenant goes, with the
-- journal rows and runs of workspaces since deleted: every row that is
-- not of a live workspace of its own tenant. (Rows that an id reused by
-- the same tenant carried stay: they were that tenant's, and clocks are
-- no sure way to tell them apart.) A deleted workspace's journal and runs
-- now go with it.
DELETE FROM execs WHERE NOT EXISTS (SELECT 1 FROM workspaces w WHERE w.id = execs.ws AND w.deleted_ns IS NULL AND w.tenant = execs.tenant);
DELETE FROM runs WHERE NOT EXISTS (SELECT 1 FROM workspaces w WHERE w.id = runs.ws AND w.deleted_ns IS NULL AND w.tenant = runs.tenant);
DELETE FROM run_steps WHERE run NOT IN (SELECT id FROM runs);

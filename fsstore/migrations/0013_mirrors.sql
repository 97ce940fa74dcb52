-- What a mirror (an executor's copy of a home's workspace) equals: its
-- revision rev holds the tree of the home's revision home_rev. A pull
-- writes it in the transaction of the revision it commits, or alone when
-- it finds nothing new, so it never disagrees with the data. Until now the
-- mirror's revision message said it ("mirror of home@N") and was parsed
-- back, and a pull that changed nothing committed a made-up revision just
-- to say it again. DeleteWorkspace drops a workspace's row.
CREATE TABLE mirrors (
	ws       INTEGER PRIMARY KEY,
	rev      INTEGER NOT NULL,
	home_rev INTEGER NOT NULL
);

-- Only a mirror whose head is such a revision equalled the home (a local
-- commit since meant "pull everything again"); the prefix is 15 bytes.
INSERT INTO mirrors(ws, rev, home_rev)
SELECT w.id, w.head, CAST(substr(r.message, 16) AS INTEGER)
FROM workspaces w JOIN revisions r ON r.ws = w.id AND r.rev = w.head
WHERE w.deleted_ns IS NULL AND r.source = 'sync' AND substr(r.message, 1, 15) = 'mirror of home@'
	AND CAST(substr(r.message, 16) AS INTEGER) > 0;

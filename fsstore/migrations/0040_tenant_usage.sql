-- What each tenant stores, kept up to date by triggers on extents so that
-- a quota check costs one row read, whatever the tenant holds.
--
-- A tenant's stored bytes are the sizes of the distinct chunks that any
-- extent row of its workspaces references: every retained revision, its
-- forks, conflict and interrupted copies, and the drafts of its execs
-- and mounts (whose tenant is '~draft~' followed by the owner's). A chunk
-- counts once per tenant however many of its files, revisions and
-- workspaces hold it, and in full for every tenant that holds it.

-- refs: the extent rows of the tenant's workspaces that name the chunk.
CREATE TABLE tenant_chunks (
	tenant TEXT NOT NULL,
	chunk  INTEGER NOT NULL,
	refs   INTEGER NOT NULL,
	PRIMARY KEY (tenant, chunk)
) WITHOUT ROWID;

CREATE TABLE tenant_usage (
	tenant TEXT PRIMARY KEY,
	bytes  INTEGER NOT NULL,
	chunks INTEGER NOT NULL
) WITHOUT ROWID;

-- Per-tenant quotas set with `computerd tenant set`; NULL: the server's default.
CREATE TABLE tenant_quotas (
	tenant         TEXT PRIMARY KEY,
	max_bytes      INTEGER,
	max_workspaces INTEGER
) WITHOUT ROWID;

INSERT INTO tenant_chunks(tenant, chunk, refs)
	SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END, e.chunk, count(*)
	FROM extents e JOIN workspaces w ON w.id = e.ws
	WHERE e.chunk IS NOT NULL
	GROUP BY 1, 2;

INSERT INTO tenant_usage(tenant, bytes, chunks)
	SELECT t.tenant, sum(c.size), count(*) FROM tenant_chunks t JOIN chunks c ON c.id = t.chunk GROUP BY t.tenant;

-- A chunk new to a tenant adds its size; the last reference gone takes it off.
CREATE TRIGGER tenant_chunks_add AFTER INSERT ON tenant_chunks BEGIN
	INSERT INTO tenant_usage(tenant, bytes, chunks) VALUES (NEW.tenant, (SELECT size FROM chunks WHERE id = NEW.chunk), 1)
		ON CONFLICT(tenant) DO UPDATE SET bytes = bytes + excluded.bytes, chunks = chunks + 1;
END;

CREATE TRIGGER tenant_chunks_drop AFTER DELETE ON tenant_chunks BEGIN
	UPDATE tenant_usage SET bytes = bytes - (SELECT size FROM chunks WHERE id = OLD.chunk), chunks = chunks - 1
		WHERE tenant = OLD.tenant;
END;

CREATE TRIGGER extents_usage_insert AFTER INSERT ON extents WHEN NEW.chunk IS NOT NULL BEGIN
	INSERT INTO tenant_chunks(tenant, chunk, refs)
		SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END, NEW.chunk, 1
		FROM workspaces w WHERE w.id = NEW.ws
		ON CONFLICT(tenant, chunk) DO UPDATE SET refs = refs + 1;
END;

CREATE TRIGGER extents_usage_delete AFTER DELETE ON extents WHEN OLD.chunk IS NOT NULL BEGIN
	UPDATE tenant_chunks SET refs = refs - 1
		WHERE tenant = (SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END FROM workspaces w WHERE w.id = OLD.ws)
		AND chunk = OLD.chunk;
	DELETE FROM tenant_chunks
		WHERE tenant = (SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END FROM workspaces w WHERE w.id = OLD.ws)
		AND chunk = OLD.chunk AND refs <= 0;
END;

-- A row rewritten in the transaction that made it (setExtent) moves its reference.
CREATE TRIGGER extents_usage_update AFTER UPDATE OF chunk ON extents WHEN OLD.chunk IS NOT NEW.chunk BEGIN
	UPDATE tenant_chunks SET refs = refs - 1
		WHERE OLD.chunk IS NOT NULL
		AND tenant = (SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END FROM workspaces w WHERE w.id = OLD.ws)
		AND chunk = OLD.chunk;
	DELETE FROM tenant_chunks
		WHERE OLD.chunk IS NOT NULL
		AND tenant = (SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END FROM workspaces w WHERE w.id = OLD.ws)
		AND chunk = OLD.chunk AND refs <= 0;
	INSERT INTO tenant_chunks(tenant, chunk, refs)
		SELECT CASE WHEN substr(w.tenant, 1, 7) = '~draft~' THEN substr(w.tenant, 8) ELSE w.tenant END, NEW.chunk, 1
		FROM workspaces w WHERE w.id = NEW.ws AND NEW.chunk IS NOT NULL
		ON CONFLICT(tenant, chunk) DO UPDATE SET refs = refs + 1;
END;

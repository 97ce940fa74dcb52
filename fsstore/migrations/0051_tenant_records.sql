-- Everything a tenant makes the daemon keep counts against its byte
-- quota, not only workspace content: the exec journal (with the output
-- logs kept on disk, whose size execs.output_bytes records while the log
-- exists), agent runs and their steps, memories and skills. Each row
-- counts 100 bytes plus its text, so no kind of row is free; triggers
-- keep tenant_usage.records up to date, so a check costs one row read.
ALTER TABLE tenant_usage ADD COLUMN records INTEGER NOT NULL DEFAULT 0;
ALTER TABLE execs ADD COLUMN output_bytes INTEGER NOT NULL DEFAULT 0;

-- What each tenant's records weigh, counted from the rows: what the
-- triggers below keep in tenant_usage.records (Store.Check compares them).
CREATE VIEW tenant_records AS
	SELECT tenant, sum(n) AS records FROM (
	SELECT runs.tenant AS tenant, 100 + length(CAST(runs.task AS BLOB)) + length(CAST(runs.error AS BLOB)) + length(CAST(runs.provider AS BLOB)) + length(CAST(runs.model AS BLOB)) + length(CAST(runs.skill AS BLOB)) + length(CAST(runs.driver AS BLOB)) AS n FROM runs
	UNION ALL
	SELECT (SELECT tenant FROM runs WHERE id = run_steps.run) AS tenant, 100 + length(CAST(run_steps.args AS BLOB)) + length(CAST(run_steps.text AS BLOB)) + length(CAST(run_steps.calls AS BLOB)) + length(CAST(run_steps.tool AS BLOB)) + length(CAST(run_steps.call_id AS BLOB)) + length(CAST(run_steps.code AS BLOB)) AS n FROM run_steps
	UNION ALL
	SELECT memories.tenant AS tenant, 100 + length(CAST(memories.text AS BLOB)) AS n FROM memories
	UNION ALL
	SELECT skills.tenant AS tenant, 100 + length(CAST(skills.name AS BLOB)) + length(CAST(skills.description AS BLOB)) + length(CAST(skills.body AS BLOB)) AS n FROM skills
	UNION ALL
	SELECT execs.tenant AS tenant, 100 + length(CAST(execs.argv AS BLOB)) + length(CAST(execs.cwd AS BLOB)) + length(CAST(execs.env_names AS BLOB)) + length(CAST(execs.error AS BLOB)) + length(CAST(execs.conflict AS BLOB)) + COALESCE(length(CAST(execs.idem_key AS BLOB)), 0) + execs.output_bytes AS n FROM execs
	) WHERE tenant IS NOT NULL GROUP BY tenant;

INSERT INTO tenant_usage(tenant, bytes, chunks, records)
	SELECT tenant, 0, 0, records FROM tenant_records WHERE true
	ON CONFLICT(tenant) DO UPDATE SET records = excluded.records;

CREATE TRIGGER runs_records_insert AFTER INSERT ON runs BEGIN
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.task AS BLOB)) + length(CAST(NEW.error AS BLOB)) + length(CAST(NEW.provider AS BLOB)) + length(CAST(NEW.model AS BLOB)) + length(CAST(NEW.skill AS BLOB)) + length(CAST(NEW.driver AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER runs_records_update AFTER UPDATE ON runs BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.task AS BLOB)) + length(CAST(OLD.error AS BLOB)) + length(CAST(OLD.provider AS BLOB)) + length(CAST(OLD.model AS BLOB)) + length(CAST(OLD.skill AS BLOB)) + length(CAST(OLD.driver AS BLOB))) WHERE tenant = OLD.tenant;
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.task AS BLOB)) + length(CAST(NEW.error AS BLOB)) + length(CAST(NEW.provider AS BLOB)) + length(CAST(NEW.model AS BLOB)) + length(CAST(NEW.skill AS BLOB)) + length(CAST(NEW.driver AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER runs_records_delete AFTER DELETE ON runs BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.task AS BLOB)) + length(CAST(OLD.error AS BLOB)) + length(CAST(OLD.provider AS BLOB)) + length(CAST(OLD.model AS BLOB)) + length(CAST(OLD.skill AS BLOB)) + length(CAST(OLD.driver AS BLOB))) WHERE tenant = OLD.tenant;
END;

CREATE TRIGGER run_steps_records_insert AFTER INSERT ON run_steps BEGIN
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT (SELECT tenant FROM runs WHERE id = NEW.run), 0, 0, 100 + length(CAST(NEW.args AS BLOB)) + length(CAST(NEW.text AS BLOB)) + length(CAST(NEW.calls AS BLOB)) + length(CAST(NEW.tool AS BLOB)) + length(CAST(NEW.call_id AS BLOB)) + length(CAST(NEW.code AS BLOB)) WHERE (SELECT tenant FROM runs WHERE id = NEW.run) IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER run_steps_records_update AFTER UPDATE ON run_steps BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.args AS BLOB)) + length(CAST(OLD.text AS BLOB)) + length(CAST(OLD.calls AS BLOB)) + length(CAST(OLD.tool AS BLOB)) + length(CAST(OLD.call_id AS BLOB)) + length(CAST(OLD.code AS BLOB))) WHERE tenant = (SELECT tenant FROM runs WHERE id = OLD.run);
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT (SELECT tenant FROM runs WHERE id = NEW.run), 0, 0, 100 + length(CAST(NEW.args AS BLOB)) + length(CAST(NEW.text AS BLOB)) + length(CAST(NEW.calls AS BLOB)) + length(CAST(NEW.tool AS BLOB)) + length(CAST(NEW.call_id AS BLOB)) + length(CAST(NEW.code AS BLOB)) WHERE (SELECT tenant FROM runs WHERE id = NEW.run) IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER run_steps_records_delete AFTER DELETE ON run_steps BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.args AS BLOB)) + length(CAST(OLD.text AS BLOB)) + length(CAST(OLD.calls AS BLOB)) + length(CAST(OLD.tool AS BLOB)) + length(CAST(OLD.call_id AS BLOB)) + length(CAST(OLD.code AS BLOB))) WHERE tenant = (SELECT tenant FROM runs WHERE id = OLD.run);
END;

CREATE TRIGGER memories_records_insert AFTER INSERT ON memories BEGIN
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.text AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER memories_records_update AFTER UPDATE ON memories BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.text AS BLOB))) WHERE tenant = OLD.tenant;
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.text AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER memories_records_delete AFTER DELETE ON memories BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.text AS BLOB))) WHERE tenant = OLD.tenant;
END;

CREATE TRIGGER skills_records_insert AFTER INSERT ON skills BEGIN
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.name AS BLOB)) + length(CAST(NEW.description AS BLOB)) + length(CAST(NEW.body AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER skills_records_update AFTER UPDATE ON skills BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.name AS BLOB)) + length(CAST(OLD.description AS BLOB)) + length(CAST(OLD.body AS BLOB))) WHERE tenant = OLD.tenant;
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.name AS BLOB)) + length(CAST(NEW.description AS BLOB)) + length(CAST(NEW.body AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER skills_records_delete AFTER DELETE ON skills BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.name AS BLOB)) + length(CAST(OLD.description AS BLOB)) + length(CAST(OLD.body AS BLOB))) WHERE tenant = OLD.tenant;
END;

CREATE TRIGGER execs_records_insert AFTER INSERT ON execs BEGIN
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.argv AS BLOB)) + length(CAST(NEW.cwd AS BLOB)) + length(CAST(NEW.env_names AS BLOB)) + length(CAST(NEW.error AS BLOB)) + length(CAST(NEW.conflict AS BLOB)) + COALESCE(length(CAST(NEW.idem_key AS BLOB)), 0) + NEW.output_bytes WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER execs_records_update AFTER UPDATE ON execs BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.argv AS BLOB)) + length(CAST(OLD.cwd AS BLOB)) + length(CAST(OLD.env_names AS BLOB)) + length(CAST(OLD.error AS BLOB)) + length(CAST(OLD.conflict AS BLOB)) + COALESCE(length(CAST(OLD.idem_key AS BLOB)), 0) + OLD.output_bytes) WHERE tenant = OLD.tenant;
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.argv AS BLOB)) + length(CAST(NEW.cwd AS BLOB)) + length(CAST(NEW.env_names AS BLOB)) + length(CAST(NEW.error AS BLOB)) + length(CAST(NEW.conflict AS BLOB)) + COALESCE(length(CAST(NEW.idem_key AS BLOB)), 0) + NEW.output_bytes WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER execs_records_delete AFTER DELETE ON execs BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.argv AS BLOB)) + length(CAST(OLD.cwd AS BLOB)) + length(CAST(OLD.env_names AS BLOB)) + length(CAST(OLD.error AS BLOB)) + length(CAST(OLD.conflict AS BLOB)) + COALESCE(length(CAST(OLD.idem_key AS BLOB)), 0) + OLD.output_bytes) WHERE tenant = OLD.tenant;
END;

-- A run keeps what a resume needs to reach its model again (the model
-- server's base URL; never a key) and its driver's lease: each driver
-- renews its claim while it lives (every step it records, and a renewal
-- between), and a running run whose lease ran out reads as interrupted.
-- The base URL counts against the tenant's quota with the run's other
-- text, so the records view and the runs triggers are made again with it.
ALTER TABLE runs ADD COLUMN base_url TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN renewed_ns INTEGER NOT NULL DEFAULT 0;

DROP VIEW tenant_records;
CREATE VIEW tenant_records AS
	SELECT tenant, sum(n) AS records FROM (
	SELECT runs.tenant AS tenant, 100 + length(CAST(runs.task AS BLOB)) + length(CAST(runs.error AS BLOB)) + length(CAST(runs.provider AS BLOB)) + length(CAST(runs.model AS BLOB)) + length(CAST(runs.skill AS BLOB)) + length(CAST(runs.driver AS BLOB)) + length(CAST(runs.base_url AS BLOB)) AS n FROM runs
	UNION ALL
	SELECT (SELECT tenant FROM runs WHERE id = run_steps.run) AS tenant, 100 + length(CAST(run_steps.args AS BLOB)) + length(CAST(run_steps.text AS BLOB)) + length(CAST(run_steps.calls AS BLOB)) + length(CAST(run_steps.tool AS BLOB)) + length(CAST(run_steps.call_id AS BLOB)) + length(CAST(run_steps.code AS BLOB)) AS n FROM run_steps
	UNION ALL
	SELECT memories.tenant AS tenant, 100 + length(CAST(memories.text AS BLOB)) AS n FROM memories
	UNION ALL
	SELECT skills.tenant AS tenant, 100 + length(CAST(skills.name AS BLOB)) + length(CAST(skills.description AS BLOB)) + length(CAST(skills.body AS BLOB)) AS n FROM skills
	UNION ALL
	SELECT execs.tenant AS tenant, 100 + length(CAST(execs.argv AS BLOB)) + length(CAST(execs.cwd AS BLOB)) + length(CAST(execs.env_names AS BLOB)) + length(CAST(execs.error AS BLOB)) + length(CAST(execs.conflict AS BLOB)) + COALESCE(length(CAST(execs.idem_key AS BLOB)), 0) + execs.output_bytes AS n FROM execs
	) WHERE tenant IS NOT NULL GROUP BY tenant;

DROP TRIGGER runs_records_insert;
DROP TRIGGER runs_records_update;
DROP TRIGGER runs_records_delete;
CREATE TRIGGER runs_records_insert AFTER INSERT ON runs BEGIN
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.task AS BLOB)) + length(CAST(NEW.error AS BLOB)) + length(CAST(NEW.provider AS BLOB)) + length(CAST(NEW.model AS BLOB)) + length(CAST(NEW.skill AS BLOB)) + length(CAST(NEW.driver AS BLOB)) + length(CAST(NEW.base_url AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER runs_records_update AFTER UPDATE ON runs BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.task AS BLOB)) + length(CAST(OLD.error AS BLOB)) + length(CAST(OLD.provider AS BLOB)) + length(CAST(OLD.model AS BLOB)) + length(CAST(OLD.skill AS BLOB)) + length(CAST(OLD.driver AS BLOB)) + length(CAST(OLD.base_url AS BLOB))) WHERE tenant = OLD.tenant;
	INSERT INTO tenant_usage(tenant, bytes, chunks, records) SELECT NEW.tenant, 0, 0, 100 + length(CAST(NEW.task AS BLOB)) + length(CAST(NEW.error AS BLOB)) + length(CAST(NEW.provider AS BLOB)) + length(CAST(NEW.model AS BLOB)) + length(CAST(NEW.skill AS BLOB)) + length(CAST(NEW.driver AS BLOB)) + length(CAST(NEW.base_url AS BLOB)) WHERE NEW.tenant IS NOT NULL
		ON CONFLICT(tenant) DO UPDATE SET records = records + excluded.records;
END;
CREATE TRIGGER runs_records_delete AFTER DELETE ON runs BEGIN
	UPDATE tenant_usage SET records = records - (100 + length(CAST(OLD.task AS BLOB)) + length(CAST(OLD.error AS BLOB)) + length(CAST(OLD.provider AS BLOB)) + length(CAST(OLD.model AS BLOB)) + length(CAST(OLD.skill AS BLOB)) + length(CAST(OLD.driver AS BLOB)) + length(CAST(OLD.base_url AS BLOB))) WHERE tenant = OLD.tenant;
END;

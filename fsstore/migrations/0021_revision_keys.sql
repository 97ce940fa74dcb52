-- The idempotency key of the API mutation that made a revision, written in
-- the commit's own transaction: a retried mutation with the same key finds
-- its revision here and applies nothing again.
ALTER TABLE revisions ADD COLUMN idem_key TEXT;
CREATE UNIQUE INDEX revisions_key ON revisions(ws, idem_key) WHERE idem_key IS NOT NULL;

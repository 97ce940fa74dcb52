-- Which of a tenant's workspaces reference a chunk: a commit that names a
-- chunk by hash without sending its bytes may name it only if one does
-- (reach.go). The query walks the tenant's workspaces (deleted ones too:
-- their rows stay while a fork reads through them) and probes each for
-- the chunk, so extents_chunk gains the workspace. GC's "does any row
-- reference this chunk" still reads its first column.
CREATE INDEX workspaces_tenant ON workspaces(tenant);
DROP INDEX extents_chunk;
CREATE INDEX extents_chunk ON extents(chunk, ws);

-- Which of a tenant's workspaces reference a chunk: a commit that names a
-- chunk by hash without sending its bytes may name it only if one does
-- (reach.go). The query walks the tenant's workspaces (deleted ones too:
-- their rows stay while a fork reads through them) and probes each for
-- the chunk. The probe's index leads with the workspace, so it lands
-- among the tenant's own rows whatever other tenants hold.
CREATE INDEX workspaces_tenant ON workspaces(tenant);
CREATE INDEX extents_ws_chunk ON extents(ws, chunk);

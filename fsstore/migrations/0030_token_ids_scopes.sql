-- A token's id was the first four bytes of its secret, so every listing
-- and log line that showed an id gave away part of a secret. Ids are now
-- random and independent of the secret; existing tokens keep their secret
-- (looked up by its hash) and get a new random id.
UPDATE tokens SET id = lower(hex(randomblob(8)));

-- What a token may do beyond its tenant's workspaces: space-separated
-- scope names (fsstore.Scopes). Existing tokens get none.
ALTER TABLE tokens ADD COLUMN scopes TEXT NOT NULL DEFAULT '';

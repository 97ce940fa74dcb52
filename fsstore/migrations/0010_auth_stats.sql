-- Bearer tokens: only the SHA-256 of a token is stored.
CREATE TABLE tokens (
	hash       BLOB PRIMARY KEY,
	id         TEXT NOT NULL UNIQUE,
	tenant     TEXT NOT NULL,
	created_ns INTEGER NOT NULL,
	revoked_ns INTEGER
) WITHOUT ROWID;

-- Lets Stats count chunks and their bytes without reading chunk data.
CREATE INDEX chunks_size ON chunks(size);

-- Bearer tokens for publishing over HTTP (POST /v1/events), one app each. Only
-- the SHA-256 of a token is kept: the token itself is shown once, when created.
-- A token reads hrld_<id>_<secret>; the id finds the row, the hash is compared
-- in constant time.
CREATE TABLE api_tokens (
    id         text PRIMARY KEY,
    app        text NOT NULL REFERENCES apps (id),
    name       text NOT NULL,
    hash       bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    revoked_at timestamptz,
    revoked_by text
);
-- A name is unique among an app's live tokens; a revoked token's name may be reused.
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (app, name) WHERE revoked_at IS NULL;

-- How each event reached Herald: 'library' (publish.Publisher), 'cli'
-- (starter publish) or 'http' (POST /v1/events, with the token's name in
-- published_token). NULL for events recorded before this migration.
ALTER TABLE events ADD COLUMN published_via text,
                   ADD COLUMN published_token text;

-- Standard Webhooks signing secrets, one current per subscribing app
-- (docs/signing-keys.md). sealed is the whsec_ secret encrypted with
-- AES-256-GCM under HERALD_SECRET_KEY, the app id as associated data;
-- Herald never stores it in the clear. A rotated-away secret keeps signing
-- until valid_until; the current one has valid_until NULL.
CREATE TABLE app_secrets (
    id          bigserial PRIMARY KEY,
    app         text NOT NULL REFERENCES apps (id),
    sealed      bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    valid_until timestamptz
);

CREATE UNIQUE INDEX app_secrets_current ON app_secrets (app) WHERE valid_until IS NULL;
CREATE INDEX app_secrets_app ON app_secrets (app, valid_until);

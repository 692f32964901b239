-- Operator tokens of the operations API (starter tokens create --operator):
-- they belong to no app and see every app's subscriptions. An app token has
-- an app and is no operator's.
ALTER TABLE api_tokens ALTER COLUMN app DROP NOT NULL,
    ADD COLUMN operator boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT api_tokens_scope CHECK (operator = (app IS NULL));
-- A name is unique among the live operator tokens, as among an app's.
CREATE UNIQUE INDEX api_tokens_live_operator_name ON api_tokens (name)
    WHERE operator AND revoked_at IS NULL;

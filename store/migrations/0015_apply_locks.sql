-- The locks that serialize applies (docs/design.md#manifests): a row per
-- app, and the row 'subscriptions' for every change of subscription
-- states. They replace advisory locks, which any role could take to block
-- `apps apply`. A transaction locks its row with an upsert that it holds
-- until it ends.
CREATE TABLE apply_locks (
    name      text PRIMARY KEY,
    locked_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO apply_locks (name) VALUES ('subscriptions');

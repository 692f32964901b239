-- Which workflow run may deliver a key's events now. A Deliver execution
-- takes its key's lease for its run before its first POST, renews it while
-- it posts and gives it back when it ends. A run that ended without Herald
-- (terminated, reset) may leave an execution still posting; the key's next
-- run waits for that lease instead of sending the same events beside it.
CREATE TABLE key_leases (
    subscription_id text        NOT NULL,
    subject         text        NOT NULL,
    holder          text        NOT NULL,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (subscription_id, subject)
);

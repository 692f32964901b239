-- Delivery keys an operator paused (the pause Update or signal, `starter
-- pause`, POST /v1/ops/keys/pause) and has not resumed: one row per
-- (subscription, subject key), written in the transaction that records
-- the key's delivery.paused audit row and deleted in the one that records
-- delivery.resumed (or the key's removal with its subscription). Every run
-- of the key reads it when it starts (store.KeyQueue), so a pause outlives
-- the run that took it: after a terminate the re-driven run, a run started
-- by hand or a later signal's run finds the key paused.
CREATE TABLE paused_keys (
    subscription_id text        NOT NULL,
    subject         text        NOT NULL,
    actor           text        NOT NULL DEFAULT '',
    paused_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, subject)
);

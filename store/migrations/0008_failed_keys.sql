-- Delivery keys whose head failed for good and that have not delivered
-- since: one row per (subscription, subject key), written in the transaction
-- that records the failure (delivery.failed) and deleted in the one that
-- records the key's next delivery, which emits herald.key.recovered. It holds
-- only failed keys, so checking it on each delivery costs one index probe.
CREATE TABLE failed_keys (
    subscription_id text        NOT NULL,
    subject         text        NOT NULL,
    event_id        uuid        NOT NULL,
    code            text        NOT NULL,
    failed_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, subject)
);

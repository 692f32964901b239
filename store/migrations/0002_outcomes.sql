-- One row per (subscription, event): what became of the event for that
-- subscription. The relay inserts it as 'queued' when it hands the event to the
-- key's workflow; the deliver activity and the workflow settle it. Temporal
-- carries only event ids and sequence numbers; bodies and targets are read from
-- here and from events, so the event log stays the only copy of an event.
CREATE TABLE outcomes (
    subscription_id text NOT NULL,
    event_id        uuid NOT NULL,
    event_seq       bigint NOT NULL,
    subject         text NOT NULL,
    status          text NOT NULL CHECK (status IN
                        ('queued', 'delivered', 'failed', 'cancelled', 'expired', 'filtered')),
    attempts        integer NOT NULL DEFAULT 0,
    -- code is the outcome's code (attempts_exhausted, schema_mismatch, retention_expired, ...);
    -- last_code and last_error describe the last failed attempt.
    code            text,
    last_code       text,
    last_error      text,
    queued_at       timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    PRIMARY KEY (subscription_id, event_id)
);
-- Keys that still hold events (removal sweep, replay, retention's guard).
CREATE INDEX outcomes_held ON outcomes (subscription_id, subject, event_seq)
    WHERE status IN ('queued', 'failed');
CREATE INDEX outcomes_event ON outcomes (event_id);
CREATE INDEX outcomes_settled_at ON outcomes (updated_at)
    WHERE status NOT IN ('queued', 'failed');

-- Subscriber apps a delivery found unreachable (nothing answered). The next
-- delivery to such an app that succeeds removes the row and wakes the app's
-- other unreachable keys, instead of leaving them to their back-off.
CREATE TABLE unreachable_apps (
    app   text PRIMARY KEY,
    since timestamptz NOT NULL DEFAULT now()
);

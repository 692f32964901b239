-- The relay's back-off per event (docs/design.md#the-event-log-and-the-relay).
-- An event whose signal Temporal did not accept counts a failed relay attempt,
-- keeps the error and waits until relay_next_try; after
-- HERALD_RELAY_MAX_ATTEMPTS failed signals it is dead (relay_dead_at, code
-- relay_failed) until an operator runs `starter events retry-relay`. Such an
-- event stays 'accepted', so nothing else that reads state changes; it holds
-- the later events of its type and subject, and no other.
--
-- Events dispatched on their first try never write these columns. Adding
-- them with constant defaults rewrites no rows.
ALTER TABLE events
    ADD COLUMN relay_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN relay_error    text CHECK (char_length(relay_error) <= 1000),
    ADD COLUMN relay_next_try timestamptz,
    ADD COLUMN relay_dead_at  timestamptz;

-- The undispatched events that have failed a signal (each keeps its error):
-- the only rows the relay's check for held keys reads, so it stays small
-- whatever the log's size. An event leaves it when it is dispatched or an
-- operator retries it.
CREATE INDEX events_relay_held ON events (type, subject, seq)
    WHERE state = 'accepted' AND relay_error IS NOT NULL;

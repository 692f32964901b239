-- Content filters of subscriptions (a CEL expression over the CloudEvent).
-- The previous filter is kept with the time of the change, so an event is
-- judged by the filter in force when it was published, even when the relay
-- hands it out after the change.
ALTER TABLE subscriptions
    ADD COLUMN filter            text,
    ADD COLUMN filter_prev       text,
    ADD COLUMN filter_changed_at timestamptz;

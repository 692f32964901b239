-- Listings of deliveries from the log (starter deliveries --log, the
-- operations API's GET /v1/ops/deliveries): newest first by when the event
-- was queued for the subscription, per subscription and status (a listing
-- reads each (subscription, status) pair's newest rows and merges them), and
-- per subject key. See docs/operations-api.md#speed.
CREATE INDEX outcomes_list ON outcomes (subscription_id, status, queued_at, event_id);
CREATE INDEX outcomes_list_subject ON outcomes (subject, queued_at);

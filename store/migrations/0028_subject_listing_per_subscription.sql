-- A subject key's listing reads the key's rows per subscription in scope
-- (docs/operations-api.md#speed), so an app token reads only its own
-- subscriptions' rows: through outcomes_list_subject (subject, queued_at) it
-- read the key's rows of every app and dropped those out of scope after,
-- which for a key other apps hold a million rows of (and the app none) took
-- 0.8 s, and the time of an empty answer told roughly how many rows they
-- hold. Each subscription's rows of the key are a range of this index,
-- newest last; status is included so that the statuses filter and the
-- count read the index only. It replaces outcomes_list_subject, which no
-- query reads any more (one index entry per outcome write, as before).
-- Built inside the migration's transaction like 0021's: a SHARE lock on
-- outcomes while it is built (deliveries wait; on a large log run `starter
-- migrate` in a quiet hour).
CREATE INDEX outcomes_list_key ON outcomes (subscription_id, subject, queued_at, event_id) INCLUDE (status);
DROP INDEX outcomes_list_subject;

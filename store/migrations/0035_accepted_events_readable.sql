-- An accepted event is one the relay can read, whoever writes it. The
-- relay reads every accepted event of its partition in sequence order,
-- and a row it cannot read (no id, subject or version; a trace context
-- holding anything but strings) fails that read at every round, holding
-- up every app's events behind it (migration 0034 found a publisher role
-- able to write such rows, and healed them). Herald's own publishers never
-- write such rows and herald_publish refuses them; this constraint refuses
-- them from any other writer too (an operator's INSERT, a later function,
-- a bug), with SQLSTATE 23514, instead of letting one row stall a
-- partition. It keeps herald_publish's bound on a trace context (0034): a
-- JSON object of strings within 32768 bytes of its text.
--
-- It holds for every row written from now on. It is added NOT VALID, so
-- the upgrade does not read the whole log under the table's lock (held
-- until the migrations commit: publishers and the relay wait, briefly):
-- 0034 left no accepted row that breaks it. `ALTER TABLE events VALIDATE
-- CONSTRAINT events_accepted_readable` checks the old rows too, whenever
-- the operator likes (it lets reads and writes go on meanwhile).
ALTER TABLE events ADD CONSTRAINT events_accepted_readable CHECK (
    state <> 'accepted'
    OR (id IS NOT NULL AND subject IS NOT NULL AND version IS NOT NULL
        AND CASE WHEN trace_context IS NULL THEN true
                 WHEN jsonb_typeof(trace_context) <> 'object' THEN false
                 WHEN octet_length(trace_context::text) > 32768 THEN false
                 -- strict: an array member is not unwrapped, so it fails
                 -- as any value that is not a string does.
                 ELSE NOT jsonb_path_exists(trace_context, 'strict $.* ? (@.type() != "string")')
            END)
) NOT VALID;

-- herald_publish and herald_publish_fast parse each event's body once.
--
-- Both check that a publisher role's body names its own id, source, type,
-- subject and version, reading those five fields and its JSON type from
-- the body cast to jsonb in a subquery (migrations 0034 and 0036).
-- PostgreSQL pulls such a subquery up into the query around it and writes
-- its expression in at every use, so the cast ran six times: six parses of
-- every body, of up to 262144 bytes, a cost the publishing app chooses.
-- Measured with and without this migration on this machine (2026-12-07),
-- one connection, one event a transaction: a 200 KB body's publish took
-- 7.7 ms, 2.75 ms parsed once (BenchmarkPublisherRoleBody); two events a
-- transaction through herald_publish, 1 KB bodies, 548 µs an event
-- against 388.
--
-- OFFSET 0 keeps each subquery a subquery of its own, evaluated once,
-- still only where its CASE branch is reached: the same checks on the
-- same bodies, with the same answers and errors (a body that is not JSON
-- fails its cast at the same place). The functions are rewritten from
-- their own definitions, so everything else in them, their settings
-- (search_path), owner and grants stay as they are; a definition without
-- the expected text stops the migration.
DO $$
DECLARE
    f record;
    def text;
    fenced text;
    hits integer;
BEGIN
    FOR f IN
        SELECT * FROM (VALUES
            ('herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])',
             'FROM (SELECT convert_from(envelopes[1], ''UTF8'')::jsonb AS j) b)', 1),
            ('herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])',
             'LATERAL (SELECT convert_from(u.e, ''UTF8'')::jsonb AS j) b', 1),
            ('herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb)',
             'FROM (SELECT convert_from(event_envelope, ''UTF8'')::jsonb AS j) b)', 1)
        ) AS v(fn, old, want)
    LOOP
        def := pg_get_functiondef(f.fn::regprocedure);
        hits := (length(def) - length(replace(def, f.old, ''))) / length(f.old);
        IF hits <> f.want THEN
            RAISE EXCEPTION 'migration 0038: % has % of the text to fence, not %: %', f.fn, hits, f.want, f.old;
        END IF;
        fenced := replace(f.old, '::jsonb AS j)', '::jsonb AS j OFFSET 0)');
        EXECUTE replace(def, f.old, fenced);
    END LOOP;
END
$$;

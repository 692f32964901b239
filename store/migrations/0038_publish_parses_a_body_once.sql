-- herald_publish and herald_publish_fast parse each event's body once.
--
-- Both check that a publisher role's body names its own id, source, type,
-- subject and version, reading six fields of the body cast to jsonb in a
-- subquery (migrations 0034 and 0036). PostgreSQL pulls such a subquery up
-- into the query around it and writes its expression in at every use, so
-- the cast ran once a field: six parses of every body, of up to 262144
-- bytes each, a cost the publishing app chooses. Measured on this machine
-- with one connection, a role's one-event publish spent about 40 of its
-- 190 µs of server time in those parses, against 100 µs for the call of a
-- function that only locks and inserts (docs/performance.md).
--
-- OFFSET 0 keeps each subquery a subquery of its own, evaluated once: the
-- same checks on the same bodies, with the same answers and errors (a body
-- that is not JSON fails its cast at the same place). The functions are
-- rewritten from their own definitions, so everything else in them,
-- their settings (search_path) and their grants stay as they are; a
-- definition without the expected text stops the migration.
DO $$
DECLARE
    f record;
    def text;
    fenced text;
    found integer;
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
        found := (length(def) - length(replace(def, f.old, ''))) / length(f.old);
        IF found <> f.want THEN
            RAISE EXCEPTION 'migration 0038: % has % of the text to fence, not %: %', f.fn, found, f.want, f.old;
        END IF;
        fenced := replace(f.old, '::jsonb AS j)', '::jsonb AS j OFFSET 0)');
        EXECUTE replace(def, f.old, fenced);
    END LOOP;
END
$$;

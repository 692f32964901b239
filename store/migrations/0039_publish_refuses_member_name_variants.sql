-- herald_publish and herald_publish_fast refuse a body whose top-level
-- member names are not CloudEvents attribute names (lower-case ASCII
-- letters and digits; the JSON format adds data_base64).
--
-- Both check a publisher role's body by its exact "id", "source", "type",
-- "subject" and "dataversion" members (migrations 0034, 0036). A body may
-- also hold "Source" or "ſource": jsonb keeps them as other members, and
-- the checks pass, but a receiver decoding with Go's encoding/json (or any
-- decoder that matches names whatever their case) reads the last of them
-- as the source: an app could deliver its event as another app's, of
-- another type. The subscriber package refuses such a body too; this
-- refuses it where it is published. A body of Herald's own publisher never
-- holds one.
--
-- The functions are rewritten from their own definitions, as in 0038; a
-- definition without the expected text stops the migration.
DO $$
DECLARE
    f record;
    def text;
    hits integer;
BEGIN
    FOR f IN
        SELECT * FROM (VALUES
            ('herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])',
             'AND (b.j->>''id'') = ids[1]::text',
             'AND CASE WHEN jsonb_typeof(b.j) = ''object''
                                               THEN NOT EXISTS (SELECT 1 FROM jsonb_object_keys(b.j) AS m WHERE m !~ ''^[a-z0-9_]+$'') END
                                     AND (b.j->>''id'') = ids[1]::text'),
            ('herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])',
             'OR (b.j->>''id'') IS DISTINCT FROM u.i::text',
             'OR CASE WHEN jsonb_typeof(b.j) = ''object''
                                             THEN EXISTS (SELECT 1 FROM jsonb_object_keys(b.j) AS m WHERE m !~ ''^[a-z0-9_]+$'')
                                             ELSE false END
                                     OR (b.j->>''id'') IS DISTINCT FROM u.i::text'),
            ('herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb)',
             'AND (b.j->>''id'') = event_id::text',
             'AND CASE WHEN jsonb_typeof(b.j) = ''object''
                                           THEN NOT EXISTS (SELECT 1 FROM jsonb_object_keys(b.j) AS m WHERE m !~ ''^[a-z0-9_]+$'') END
                                 AND (b.j->>''id'') = event_id::text')
        ) AS v(fn, old, new)
    LOOP
        def := pg_get_functiondef(f.fn::regprocedure);
        hits := (length(def) - length(replace(def, f.old, ''))) / length(f.old);
        IF hits <> 1 THEN
            RAISE EXCEPTION 'migration 0039: % has % of the text to extend, not 1: %', f.fn, hits, f.old;
        END IF;
        EXECUTE replace(def, f.old, f.new);
    END LOOP;
END
$$;

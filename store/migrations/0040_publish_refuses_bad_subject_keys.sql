-- herald_publish and herald_publish_fast refuse a subject key that is not
-- 1 to 200 bytes of printable text (docs/design.md#identifiers).
--
-- Herald's own publishers refuse such a key before it reaches the log
-- (publish.checkSubject); a publisher role's own code need not. A key of
-- 100 KB made a delivery workflow id Temporal refuses: the relay retried
-- the key's signal ten times and marked its events dead, raising
-- HeraldRelayEventDead for the operators. An empty key, a line break or a
-- right-to-left override in one reached the logs, the CLI and the console.
--
-- Printable is Go's unicode.IsPrint for every code point Unicode assigns
-- (17.0.0, Go 1.27): the class below holds the assigned ones that are not,
-- the control, format and private-use characters and the separators other
-- than the ASCII space. Code points Unicode has not assigned are refused
-- by Herald's publishers only: which they are changes with each Unicode
-- release. store's TestSubjectClassIsGosNonPrintables derives the class
-- from Go's tables and wants it here.
--
-- herald_publish refuses with SQLSTATE 22023 (refusal 9), after the
-- checks of the arrays' shapes, ids and subjects' presence (refusals 1, 2
-- and 7); herald_publish_fast writes nothing and answers NULL, and its
-- caller asks herald_publish (migration 0036). The functions are rewritten
-- from their own definitions, as in 0038; a definition without the
-- expected text stops the migration.
DO $$
DECLARE
    class text := E'[\\u0001-\\u001f\\u007f-\\u00a0\\u00ad\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u1680\\u180e\\u2000-\\u200f\\u2028-\\u202f\\u205f-\\u2064\\u2066-\\u206f\\u3000\\ue000-\\uf8ff\\ufeff\\ufff9-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U0001343f\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0001\\U000e0020-\\U000e007f\\U000f0000-\\U000ffffd\\U00100000-\\U0010fffd]';
    f record;
    def text;
    hits integer;
BEGIN
    FOR f IN
        SELECT * FROM (VALUES
            ('herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])',
             'refusal := 7;',
             format('refusal := 7;
    ELSIF EXISTS (SELECT 1 FROM unnest(subjects) AS s WHERE octet_length(s) NOT BETWEEN 1 AND 200 OR s ~ %s) THEN
        refusal := 9;', quote_literal(class))),
            ('herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])',
             '''herald_publish: an event has no id or no subject'' USING ERRCODE = ''invalid_parameter_value'';',
             '''herald_publish: an event has no id or no subject'' USING ERRCODE = ''invalid_parameter_value'';
    ELSIF refusal = 9 THEN
        RAISE EXCEPTION ''herald_publish: a subject key must be 1 to 200 bytes of printable text''
            USING ERRCODE = ''invalid_parameter_value'';'),
            ('herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb)',
             'IF event_id IS NULL OR event_subject IS NULL THEN',
             format('IF event_id IS NULL OR event_subject IS NULL OR octet_length(event_subject) NOT BETWEEN 1 AND 200
       OR event_subject ~ %s THEN', quote_literal(class)))
        ) AS v(fn, old, new)
    LOOP
        def := pg_get_functiondef(f.fn::regprocedure);
        hits := (length(def) - length(replace(def, f.old, ''))) / length(f.old);
        IF hits <> 1 THEN
            RAISE EXCEPTION 'migration 0040: % has % of the text to extend, not 1: %', f.fn, hits, f.old;
        END IF;
        EXECUTE replace(def, f.old, f.new);
    END LOOP;
END
$$;

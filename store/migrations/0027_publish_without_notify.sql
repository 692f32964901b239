-- Publishing no longer notifies inside the publishing transaction (issue
-- 29): PostgreSQL commits the transactions that ran NOTIFY one at a time,
-- under one lock for the whole server, so every app's publishing
-- transactions queued behind each other's commits. herald_publish is
-- herald_publish of 0018 without its pg_notify; the relay finds what a
-- publisher role wrote at its next poll (HERALD_RELAY_POLL_INTERVAL).
-- CREATE OR REPLACE keeps the function's owner and grants but not its
-- settings, so its search_path is pinned again.
CREATE OR REPLACE FUNCTION herald_publish(ids uuid[], types text[], versions integer[], subjects text[], stripes integer[],
                               envelopes bytea[], hashes text[], vias text[], tokens text[], traces jsonb[])
RETURNS TABLE (out_seq bigint, out_duplicate boolean, out_conflict boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    me        text;
    n         integer := coalesce(array_length(ids, 1), 0);
    tv        record;
    got       bigint;
    old_seq   bigint;
    old_hash  text;
BEGIN
    SELECT p.app INTO me
      FROM publisher_roles p JOIN apps a ON a.id = p.app AND a.removed_at IS NULL
     WHERE p.role = session_user;
    IF me IS NULL THEN
        RAISE EXCEPTION 'role % publishes for no live app', session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(array_length(types, 1), 0) <> n OR coalesce(array_length(versions, 1), 0) <> n
       OR coalesce(array_length(subjects, 1), 0) <> n OR coalesce(array_length(stripes, 1), 0) <> n
       OR coalesce(array_length(envelopes, 1), 0) <> n OR coalesce(array_length(hashes, 1), 0) <> n
       OR coalesce(array_length(vias, 1), 0) <> n OR coalesce(array_length(tokens, 1), 0) <> n
       OR coalesce(array_length(traces, 1), 0) <> n THEN
        RAISE EXCEPTION 'herald_publish: arrays of different lengths' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(types, versions) AS u(t, v)
                WHERE NOT EXISTS (SELECT 1 FROM declarations d
                                   WHERE d.type = u.t AND d.version = u.v AND d.app = me AND d.retired_at IS NULL)) THEN
        RAISE EXCEPTION 'role % publishes for app %, which does not declare every type given', session_user, me
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- The body is what Herald signs and delivers, and the app's own code
    -- (which may skip every check of store.PublishTx) wrote it: it must be
    -- this app's CloudEvent for the row's id, type, version and subject,
    -- within publish.DefaultMaxEventBytes.
    IF EXISTS (SELECT 1 FROM unnest(ids, types, versions, subjects, envelopes) AS u(i, t, v, s, e)
                WHERE e IS NULL OR octet_length(e) > 262144) THEN
        RAISE EXCEPTION 'herald_publish: an event body is missing or over 262144 bytes'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(ids, types, versions, subjects, envelopes) AS u(i, t, v, s, e),
                      LATERAL (SELECT convert_from(u.e, 'UTF8')::jsonb AS j) b
                WHERE jsonb_typeof(b.j) <> 'object'
                   OR (b.j->>'id') IS DISTINCT FROM u.i::text
                   OR (b.j->>'source') IS DISTINCT FROM 'app:' || me
                   OR (b.j->>'type') IS DISTINCT FROM u.t
                   OR (b.j->>'subject') IS DISTINCT FROM u.s
                   OR (b.j->'dataversion') IS DISTINCT FROM to_jsonb(u.v)) THEN
        RAISE EXCEPTION 'role % publishes for app %: an event body does not name its own id, source app:%, type, version and subject',
            session_user, me, me USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s IS NULL OR s < 0 OR s > 255) THEN
        RAISE EXCEPTION 'herald_publish: stripe out of range' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR tv IN SELECT DISTINCT u.t COLLATE "C" AS t, u.v FROM unnest(types, versions) AS u(t, v) ORDER BY 1, 2 LOOP
        PERFORM 1 FROM key_stripes k
         WHERE k.type = tv.t AND k.version = tv.v
           AND k.stripe IN (SELECT u.s FROM unnest(types, versions, stripes) AS u(t, v, s) WHERE u.t = tv.t AND u.v = tv.v)
         ORDER BY k.stripe
           FOR NO KEY UPDATE;
    END LOOP;
    FOR i IN 1 .. n LOOP
        got := NULL;
        INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state,
                            published_via, published_token, trace_context)
        VALUES (ids[i], me, types[i], versions[i], subjects[i], envelopes[i], hashes[i], 'accepted',
                'library', NULL, traces[i])
        ON CONFLICT (id, source_app) WHERE state <> 'rejected' DO NOTHING
        RETURNING seq INTO got;
        IF got IS NOT NULL THEN
            out_seq := got; out_duplicate := false; out_conflict := false;
        ELSE
            SELECT e.seq, e.content_hash INTO old_seq, old_hash
              FROM events e WHERE e.id = ids[i] AND e.source_app = me AND e.state <> 'rejected';
            IF old_hash = hashes[i] THEN
                out_seq := old_seq; out_duplicate := true; out_conflict := false;
            ELSE
                out_seq := NULL; out_duplicate := false; out_conflict := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[]) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;

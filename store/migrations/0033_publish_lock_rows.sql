-- herald_publish of 0032, locking its rows with one simple statement a row.
-- 0032's loop ran, for each type and version, a count and a lock query over
-- the call's arrays: a publisher role's publish of one event took about
-- three times as long as Herald's own role's, and without that loop about
-- half as long as with it (one connection, one event a transaction). The
-- rows, their order (type bytewise, version, stripe: coarse before fine, as
-- store.stripeLocks) and what must be there are unchanged; a missing row is
-- named. Arrays that are not lists counting from 1 are refused: the checks
-- read every element, the inserts the first n.
CREATE OR REPLACE FUNCTION herald_publish(ids uuid[], types text[], versions integer[], subjects text[], stripes integer[],
                               envelopes bytea[], hashes text[], vias text[], tokens text[], traces jsonb[])
RETURNS TABLE (out_seq bigint, out_duplicate boolean, out_conflict boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    me        text;
    n         integer := coalesce(array_length(ids, 1), 0);
    lt        text[];
    lv        integer[];
    ls        integer[];
    fine      boolean;
    keep      boolean;
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
    -- The inserts, and one event's locks, take the i-th element of each
    -- array, the checks every element: all must be lists counting from 1,
    -- so that what is checked and locked is what is written.
    IF n > 0 AND (array_lower(ids, 1) <> 1 OR array_lower(types, 1) <> 1 OR array_lower(versions, 1) <> 1
       OR array_lower(subjects, 1) <> 1 OR array_lower(stripes, 1) <> 1 OR array_lower(envelopes, 1) <> 1
       OR array_lower(hashes, 1) <> 1 OR array_lower(vias, 1) <> 1 OR array_lower(tokens, 1) <> 1
       OR array_lower(traces, 1) <> 1
       OR array_ndims(ids) <> 1 OR array_ndims(types) <> 1 OR array_ndims(versions) <> 1
       OR array_ndims(subjects) <> 1 OR array_ndims(stripes) <> 1 OR array_ndims(envelopes) <> 1
       OR array_ndims(hashes) <> 1 OR array_ndims(vias) <> 1 OR array_ndims(tokens) <> 1
       OR array_ndims(traces) <> 1) THEN
        RAISE EXCEPTION 'herald_publish: arrays must be lists counting from 1' USING ERRCODE = 'invalid_parameter_value';
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
    IF EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s IS NULL OR s < 0 OR s > 4351) THEN
        RAISE EXCEPTION 'herald_publish: stripe out of range' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    fine := EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s >= 256);
    IF fine AND EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s < 256) THEN
        RAISE EXCEPTION 'herald_publish: coarse and fine stripes in one call' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    keep := (SELECT k.coarse FROM key_stripe_scheme k);
    -- The rows to lock, in lock order: by type (bytewise, as store.stripeLocks
    -- sorts), version, then stripe, so coarse before fine. One event's are
    -- known without a query.
    IF n = 1 THEN
        IF fine AND keep THEN
            lt := ARRAY[types[1], types[1]];
            lv := ARRAY[versions[1], versions[1]];
            ls := ARRAY[(stripes[1] - 256) % 256, stripes[1]];
        ELSE
            lt := ARRAY[types[1]]; lv := ARRAY[versions[1]]; ls := ARRAY[stripes[1]];
        END IF;
    ELSE
        SELECT array_agg(x.t ORDER BY x.t COLLATE "C", x.v, x.s), array_agg(x.v ORDER BY x.t COLLATE "C", x.v, x.s),
               array_agg(x.s ORDER BY x.t COLLATE "C", x.v, x.s)
          INTO lt, lv, ls
          FROM (SELECT u.t, u.v, u.s FROM unnest(types, versions, stripes) AS u(t, v, s)
                UNION
                SELECT u.t, u.v, (u.s - 256) % 256 FROM unnest(types, versions, stripes) AS u(t, v, s)
                 WHERE fine AND keep) AS x;
    END IF;
    -- One row at a time by its whole key. A fine caller's coarse rows are
    -- locked when they are there; every other row must be.
    FOR j IN 1 .. coalesce(array_length(ls, 1), 0) LOOP
        PERFORM 1 FROM key_stripes k WHERE k.type = lt[j] AND k.version = lv[j] AND k.stripe = ls[j] FOR NO KEY UPDATE;
        IF NOT FOUND AND (ls[j] >= 256 OR NOT fine) THEN
            IF NOT fine AND NOT keep THEN
                RAISE EXCEPTION 'herald_publish: this publisher locks the 256 stripes a type of releases before migration 0032, which this database no longer keeps (starter db key-stripes --fine-only): upgrade the app''s Herald library'
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            RAISE EXCEPTION 'herald_publish: ordering-key stripe row % missing for %@%', ls[j], lt[j], lv[j]
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
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

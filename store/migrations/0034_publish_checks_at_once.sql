-- herald_publish of 0033, in fewer statements. 0033 ran each of its checks
-- as a statement of its own (the app, the declarations, the bodies' sizes,
-- their contents, the stripes, the scheme), then the locks, then the
-- inserts: a statement in a PL/pgSQL function costs its own executor
-- start, and with one event a call those checks were about a fifth of a
-- publisher role's transaction.
--
-- One event now takes one statement when it is published: the checks, its
-- key's lock and its insert, inserting nothing unless every check passes
-- and the key's one row (a fine stripe, no coarse rows kept) is locked.
-- Otherwise (a refusal, a taken id, a missing row, coarse rows kept, or
-- several events) the checks run as one statement over the arrays, each
-- only when those before it passed, and the locks and inserts follow as in
-- 0033. So what is refused, with which error and in which order, is
-- 0033's; the first statement only has to be as strict.
--
-- Two refusals are new (SQLSTATE 22023). 0033 accepted an event with no id
-- or no subject when its body named none, and a trace context that was not
-- a JSON object of strings, or of any size: the relay then failed to read
-- the event log at that event, every round, holding up every app's events
-- behind it in its partition. An event's id and subject are now required
-- (after the arrays' shape, before the declarations), and a trace context
-- must be NULL or an object of strings within 32768 bytes (after the
-- stripes; OpenTelemetry's own bounds on a tracestate keep it under about
-- 16 KiB).
CREATE OR REPLACE FUNCTION herald_publish(ids uuid[], types text[], versions integer[], subjects text[], stripes integer[],
                               envelopes bytea[], hashes text[], vias text[], tokens text[], traces jsonb[])
RETURNS TABLE (out_seq bigint, out_duplicate boolean, out_conflict boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    me        text;
    n         integer := coalesce(array_length(ids, 1), 0);
    declared  boolean;
    refusal   integer;
    fine      boolean;
    keep      boolean;
    lt        text[];
    lv        integer[];
    ls        integer[];
    got       bigint;
    old_seq   bigint;
    old_hash  text;
BEGIN
    IF coalesce(array_length(types, 1), 0) <> n OR coalesce(array_length(versions, 1), 0) <> n
       OR coalesce(array_length(subjects, 1), 0) <> n OR coalesce(array_length(stripes, 1), 0) <> n
       OR coalesce(array_length(envelopes, 1), 0) <> n OR coalesce(array_length(hashes, 1), 0) <> n
       OR coalesce(array_length(vias, 1), 0) <> n OR coalesce(array_length(tokens, 1), 0) <> n
       OR coalesce(array_length(traces, 1), 0) <> n THEN
        refusal := 1;
    ELSIF n > 0 AND (array_lower(ids, 1) <> 1 OR array_lower(types, 1) <> 1 OR array_lower(versions, 1) <> 1
       OR array_lower(subjects, 1) <> 1 OR array_lower(stripes, 1) <> 1 OR array_lower(envelopes, 1) <> 1
       OR array_lower(hashes, 1) <> 1 OR array_lower(vias, 1) <> 1 OR array_lower(tokens, 1) <> 1
       OR array_lower(traces, 1) <> 1
       OR array_ndims(ids) <> 1 OR array_ndims(types) <> 1 OR array_ndims(versions) <> 1
       OR array_ndims(subjects) <> 1 OR array_ndims(stripes) <> 1 OR array_ndims(envelopes) <> 1
       OR array_ndims(hashes) <> 1 OR array_ndims(vias) <> 1 OR array_ndims(tokens) <> 1
       OR array_ndims(traces) <> 1) THEN
        refusal := 2;
    ELSIF array_position(ids, NULL) IS NOT NULL OR array_position(subjects, NULL) IS NOT NULL THEN
        refusal := 7;
    END IF;
    -- One event of a role whose checks all pass, whose key has one row
    -- to lock: the checks, the lock and the insert in one statement. The
    -- CASE runs after the join (it reads the app's row) and parses the body
    -- last, only where the checks below would parse it too (a live app,
    -- declared, within the size), so a body that is not JSON fails here as
    -- it would there; the key's row is locked only when every check passed.
    -- A taken id draws a sequence number here and another below.
    IF n = 1 AND refusal IS NULL THEN
        WITH me AS MATERIALIZED (
            SELECT p.app
              FROM publisher_roles p
              JOIN apps a ON a.id = p.app AND a.removed_at IS NULL
             WHERE p.role = session_user
               AND CASE WHEN a.removed_at IS NOT NULL THEN false
                        WHEN NOT EXISTS (SELECT 1 FROM declarations d
                                          WHERE d.type = types[1] AND d.version = versions[1] AND d.app = p.app
                                            AND d.retired_at IS NULL) THEN false
                        WHEN envelopes[1] IS NULL OR octet_length(envelopes[1]) > 262144 THEN false
                        WHEN stripes[1] IS NULL OR stripes[1] < 256 OR stripes[1] > 4351 THEN false
                        WHEN (SELECT k.coarse FROM key_stripe_scheme k) THEN false
                        WHEN NOT CASE WHEN traces[1] IS NULL THEN true
                                      WHEN jsonb_typeof(traces[1]) <> 'object' OR octet_length(traces[1]::text) > 32768 THEN false
                                      ELSE NOT EXISTS (SELECT 1 FROM jsonb_each(traces[1]) AS x WHERE jsonb_typeof(x.value) <> 'string')
                                 END THEN false
                        ELSE (SELECT jsonb_typeof(b.j) = 'object'
                                     AND (b.j->>'id') = ids[1]::text
                                     AND (b.j->>'source') = 'app:' || p.app
                                     AND (b.j->>'type') = types[1]
                                     AND (b.j->>'subject') = subjects[1]
                                     AND (b.j->'dataversion') = to_jsonb(versions[1])
                                FROM (SELECT convert_from(envelopes[1], 'UTF8')::jsonb AS j) b) IS TRUE
                   END),
        locked AS MATERIALIZED (
            SELECT 1 FROM key_stripes k
             WHERE (SELECT count(*) FROM me) > 0
               AND k.type = types[1] AND k.version = versions[1] AND k.stripe = stripes[1]
               FOR NO KEY UPDATE)
        INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state,
                            published_via, published_token, trace_context)
        SELECT ids[1], me.app, types[1], versions[1], subjects[1], envelopes[1], hashes[1], 'accepted',
               'library', NULL, traces[1]
          FROM me, locked
        ON CONFLICT (id, source_app) WHERE state <> 'rejected' DO NOTHING
        RETURNING seq INTO got;
        IF got IS NOT NULL THEN
            out_seq := got; out_duplicate := false; out_conflict := false;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- Every check in one statement, each only when those before it passed.
    SELECT p.app, c.declared, c.refusal, c.fine, c.keep
      INTO me, declared, refusal, fine, keep
      FROM publisher_roles p
      JOIN apps a ON a.id = p.app AND a.removed_at IS NULL
     CROSS JOIN LATERAL (
        SELECT d.declared,
               CASE WHEN refusal IS NOT NULL OR NOT d.declared THEN refusal
                    WHEN EXISTS (SELECT 1 FROM unnest(envelopes) AS e WHERE e IS NULL OR octet_length(e) > 262144) THEN 3
                    WHEN EXISTS (SELECT 1 FROM unnest(ids, types, versions, subjects, envelopes) AS u(i, t, v, s, e),
                                        LATERAL (SELECT convert_from(u.e, 'UTF8')::jsonb AS j) b
                                  WHERE jsonb_typeof(b.j) <> 'object'
                                     OR (b.j->>'id') IS DISTINCT FROM u.i::text
                                     OR (b.j->>'source') IS DISTINCT FROM 'app:' || p.app
                                     OR (b.j->>'type') IS DISTINCT FROM u.t
                                     OR (b.j->>'subject') IS DISTINCT FROM u.s
                                     OR (b.j->'dataversion') IS DISTINCT FROM to_jsonb(u.v)) THEN 4
                    WHEN EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s IS NULL OR s < 0 OR s > 4351) THEN 5
                    WHEN EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s >= 256)
                         AND EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s < 256) THEN 6
                    WHEN EXISTS (SELECT 1 FROM unnest(traces) AS t
                                  WHERE CASE WHEN t IS NULL THEN false
                                             WHEN jsonb_typeof(t) <> 'object' OR octet_length(t::text) > 32768 THEN true
                                             ELSE EXISTS (SELECT 1 FROM jsonb_each(t) AS x WHERE jsonb_typeof(x.value) <> 'string')
                                        END) THEN 8
               END AS refusal,
               EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s >= 256) AS fine,
               (SELECT k.coarse FROM key_stripe_scheme k) AS keep
          FROM (SELECT refusal IS NULL AND NOT EXISTS (
                         SELECT 1 FROM unnest(types, versions) AS u(t, v)
                          WHERE NOT EXISTS (SELECT 1 FROM declarations d
                                             WHERE d.type = u.t AND d.version = u.v AND d.app = p.app
                                               AND d.retired_at IS NULL)) AS declared) d
     ) c
     WHERE p.role = session_user;
    IF me IS NULL THEN
        RAISE EXCEPTION 'role % publishes for no live app', session_user USING ERRCODE = 'insufficient_privilege';
    ELSIF refusal = 1 THEN
        RAISE EXCEPTION 'herald_publish: arrays of different lengths' USING ERRCODE = 'invalid_parameter_value';
    ELSIF refusal = 2 THEN
        RAISE EXCEPTION 'herald_publish: arrays must be lists counting from 1' USING ERRCODE = 'invalid_parameter_value';
    ELSIF refusal = 7 THEN
        RAISE EXCEPTION 'herald_publish: an event has no id or no subject' USING ERRCODE = 'invalid_parameter_value';
    ELSIF NOT declared THEN
        RAISE EXCEPTION 'role % publishes for app %, which does not declare every type given', session_user, me
            USING ERRCODE = 'insufficient_privilege';
    ELSIF refusal = 3 THEN
        RAISE EXCEPTION 'herald_publish: an event body is missing or over 262144 bytes'
            USING ERRCODE = 'program_limit_exceeded';
    ELSIF refusal = 4 THEN
        RAISE EXCEPTION 'role % publishes for app %: an event body does not name its own id, source app:%, type, version and subject',
            session_user, me, me USING ERRCODE = 'insufficient_privilege';
    ELSIF refusal = 5 THEN
        RAISE EXCEPTION 'herald_publish: stripe out of range' USING ERRCODE = 'invalid_parameter_value';
    ELSIF refusal = 6 THEN
        RAISE EXCEPTION 'herald_publish: coarse and fine stripes in one call' USING ERRCODE = 'invalid_parameter_value';
    ELSIF refusal = 8 THEN
        RAISE EXCEPTION 'herald_publish: a trace context must be a JSON object of strings within 32768 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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

-- Rows 0033 and before let a publisher role write that the relay cannot
-- read (its read fails at them at every round): accepted events with no
-- id, subject or version are refused now, as a publish of them would be;
-- a trace context that is not a JSON object of strings within 32768 bytes
-- is dropped (the event is delivered without it).
UPDATE events
   SET state = 'rejected',
       code = CASE WHEN id IS NULL THEN 'id_invalid' WHEN subject IS NULL THEN 'subject_invalid' ELSE 'event_not_declared' END,
       reason = 'accepted without an id, a subject or a version, which the relay cannot read: refused by migration 0034'
 WHERE state = 'accepted' AND (id IS NULL OR subject IS NULL OR version IS NULL);
UPDATE events
   SET trace_context = NULL
 WHERE state = 'accepted' AND trace_context IS NOT NULL
   AND CASE WHEN jsonb_typeof(trace_context) <> 'object' OR octet_length(trace_context::text) > 32768 THEN true
            ELSE EXISTS (SELECT 1 FROM jsonb_each(trace_context) AS x WHERE jsonb_typeof(x.value) <> 'string')
       END;

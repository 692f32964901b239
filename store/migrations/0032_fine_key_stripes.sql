-- Ordering-key locks of 4,096 stripes a type and version (issue 29). With
-- 256, 64 concurrent publishers of one type waited for one another on a
-- shared stripe about one publish in five, and lost a fifth to a third of
-- their rate against plain INSERTs (docs/performance.md).
--
-- A key's fine stripe is FNV-1a(subject) mod 4096, kept as the row
-- 256 + that number (store.keyStripe), beside the 256 coarse rows (0-255,
-- FNV-1a mod 256) that publishers of releases before this one lock. Those
-- publishers (workers, starter, and apps linking PublishTx, which upgrade on
-- their own schedule) go on working against this schema, so two of them
-- must still lock one key under one row: while the coarse rows are kept
-- (key_stripe_scheme.coarse), a publisher of this release locks the key's
-- coarse row as well as its fine one. Once no older
-- publisher is left, `starter db key-stripes --fine-only` deletes the coarse
-- rows (store.RetireCoarseStripes) and publishers lock one fine row a key.
-- An older publisher then finds no row to lock and fails, loudly, rather
-- than publish without a lock: every path of theirs refuses a key whose
-- stripe row is missing, and herald_publish below refuses them too.
--
-- Both kinds of rows are locked in ascending order (the coarse before the
-- fine), as every publisher has locked them, so none can deadlock another.

-- Nothing declares or makes stripe rows until this commits: an `apps apply`
-- of a running older worker beside it would make coarse rows only, for a
-- type this migration then gives no fine rows, or declare the first type
-- of a database it decides keeps no coarse rows. SHARE mode lets
-- publishers go on locking rows (ROW SHARE) and blocks only writes.
LOCK TABLE declarations, key_stripes IN SHARE MODE;

-- One row: whether the coarse rows are kept. A database with no stripe
-- rows yet (a new install: nothing was declared, so no older publisher has
-- published anything) starts without them.
CREATE TABLE key_stripe_scheme (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    coarse     boolean NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO key_stripe_scheme (coarse) SELECT EXISTS (SELECT 1 FROM key_stripes);

-- The fine rows of every type and version that has coarse rows or a
-- declaration, in ascending order of the key.
INSERT INTO key_stripes (type, version, stripe)
SELECT tv.type, tv.version, 256 + s
  FROM (SELECT type, version FROM key_stripes UNION SELECT type, version FROM declarations) AS tv,
       generate_series(0, 4095) AS s
 ORDER BY 1, 2, 3
ON CONFLICT DO NOTHING;

-- A declaration's rows: the fine ones, and the coarse ones while they are
-- kept. The scheme's row is read FOR SHARE, so a declaration waits for a
-- retirement in progress (store.RetireCoarseStripes updates the row first)
-- and makes no coarse row after it: a Store that has seen the coarse rows
-- retired locks fine rows only from then on. 256 and 4096 are
-- store.coarseStripes and store.fineStripes.
CREATE OR REPLACE FUNCTION herald_make_key_stripes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO key_stripes (type, version, stripe)
    SELECT NEW.type, NEW.version, s
      FROM generate_series(0, 255) AS s
     WHERE (SELECT k.coarse FROM key_stripe_scheme k FOR SHARE)
    UNION ALL
    SELECT NEW.type, NEW.version, 256 + s FROM generate_series(0, 4095) AS s
    ORDER BY 3
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

-- herald_publish of 0027, taking either kind of stripe from its caller:
-- coarse (0-255, from PublishTx of a release before this one), or fine
-- (256-4351, from this one). A fine caller's coarse rows (its stripe minus
-- 256, mod 256) are locked when they are there, its fine rows must all be;
-- a coarse caller's coarse rows must all be there, so once they are deleted
-- it is refused, never let through without a lock.
CREATE OR REPLACE FUNCTION herald_publish(ids uuid[], types text[], versions integer[], subjects text[], stripes integer[],
                               envelopes bytea[], hashes text[], vias text[], tokens text[], traces jsonb[])
RETURNS TABLE (out_seq bigint, out_duplicate boolean, out_conflict boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    me        text;
    n         integer := coalesce(array_length(ids, 1), 0);
    tv        record;
    fine      boolean;
    keep      boolean;
    wanted    integer;
    locked    integer;
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
    IF EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s IS NULL OR s < 0 OR s > 4351) THEN
        RAISE EXCEPTION 'herald_publish: stripe out of range' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    fine := EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s >= 256);
    IF fine AND EXISTS (SELECT 1 FROM unnest(stripes) AS s WHERE s < 256) THEN
        RAISE EXCEPTION 'herald_publish: coarse and fine stripes in one call' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    keep := (SELECT k.coarse FROM key_stripe_scheme k);
    FOR tv IN SELECT DISTINCT u.t COLLATE "C" AS t, u.v FROM unnest(types, versions) AS u(t, v) ORDER BY 1, 2 LOOP
        SELECT count(DISTINCT u.s) INTO wanted
          FROM unnest(types, versions, stripes) AS u(t, v, s) WHERE u.t = tv.t AND u.v = tv.v;
        -- One row at a time by its whole key, in ascending order (coarse
        -- before fine): "stripe IN (...)" let the planner scan every row
        -- of the type when the table had no statistics yet.
        SELECT count(*) FILTER (WHERE l.stripe >= 256 OR NOT fine) INTO locked
          FROM (SELECT DISTINCT w.s FROM (
                  SELECT u.s FROM unnest(types, versions, stripes) AS u(t, v, s) WHERE u.t = tv.t AND u.v = tv.v
                  UNION ALL
                  SELECT (u.s - 256) % 256 FROM unnest(types, versions, stripes) AS u(t, v, s)
                   WHERE fine AND keep AND u.t = tv.t AND u.v = tv.v) AS w
                ORDER BY w.s) AS x
         CROSS JOIN LATERAL (SELECT k.stripe FROM key_stripes k
                 WHERE k.type = tv.t AND k.version = tv.v AND k.stripe = x.s
                   FOR NO KEY UPDATE) AS l;
        IF locked <> wanted THEN
            IF NOT fine AND NOT keep THEN
                RAISE EXCEPTION 'herald_publish: this publisher locks the 256 stripes a type of releases before migration 0032, which this database no longer keeps (starter db key-stripes --fine-only): upgrade the app''s Herald library'
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            RAISE EXCEPTION 'herald_publish: ordering-key stripe rows missing for %@%: % of %', tv.t, tv.v, locked, wanted
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

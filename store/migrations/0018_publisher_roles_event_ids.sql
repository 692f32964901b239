-- Event ids are unique per source app (docs/design.md#the-event-log-and-the-relay):
-- one app can no longer take the id another app will publish next and have
-- it refused as id_conflict. The unique index is (id, source_app), id first
-- so that it still serves look-ups by id. It is built here, inside the
-- migration's transaction, so CREATE INDEX CONCURRENTLY is impossible: the
-- build holds a SHARE lock on events, which lets reads and the relay go on
-- but makes publishers wait until it is done (on a large log, run `starter
-- migrate` in a quiet hour; the old index being unique, the new one cannot
-- fail). The old index is dropped after, in the same transaction.
CREATE UNIQUE INDEX events_app_id ON events (id, source_app) WHERE state <> 'rejected';
DROP INDEX events_id;

-- Publisher roles (docs/publishing.md#a-publisher-role-per-app): the role an
-- app's own database code logs in as publishes events for that app only. It
-- has no right on any table; it may run the functions below, which run as
-- the owner role and find the app from the session's login role
-- (session_user) in publisher_roles, never from an argument. They are
-- created by the owner (`starter migrate`), and `starter db grant-publisher
-- APP ROLE` (store.GrantPublisher) maps a role to its app and grants it
-- EXECUTE on them.
CREATE TABLE publisher_roles (
    role       text PRIMARY KEY,
    app        text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now()
);

-- The app the session's role publishes for, and whether it is live; no row
-- for a role that is no publisher. Anyone may ask about themselves.
CREATE FUNCTION herald_publisher_app()
RETURNS TABLE (app text, live boolean)
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT p.app, EXISTS (SELECT 1 FROM apps a WHERE a.id = p.app AND a.removed_at IS NULL)
      FROM publisher_roles p
     WHERE p.role = session_user
$$;

-- The un-retired declaration of t@v, when the session's app declares it.
CREATE FUNCTION herald_publisher_declaration(t text, v integer)
RETURNS TABLE (type text, version integer, app text, subject text, data_schema jsonb, place jsonb, deprecated boolean)
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT d.type, d.version, d.app, d.subject, d.data_schema, d.place, d.deprecated
      FROM declarations d
      JOIN publisher_roles p ON p.app = d.app AND p.role = session_user
     WHERE d.type = t AND d.version = v AND d.retired_at IS NULL
$$;

-- Appends events of the session's app, as store.InsertEventsTx does: every
-- type must be an un-retired declaration of the app; the ordering-key
-- stripes (computed by the caller, store.keyStripe) are locked type by type
-- and version by version in ascending order (byte order, as Go sorts), each
-- type's stripes in ascending order, until the transaction ends; an id
-- already taken reports the stored seq when it is the same app's event of
-- the same content (duplicate), a conflict otherwise; ids are unique per
-- app, so another app's event is neither. The caller's vias and tokens are
-- not trusted: a publisher role's event is recorded as published by the Go
-- library (PublishTx), with no API token.
CREATE FUNCTION herald_publish(ids uuid[], types text[], versions integer[], subjects text[], stripes integer[],
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
    inserted  boolean := false;
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
            inserted := true;
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
    IF inserted THEN
        PERFORM pg_notify('herald_events', '');
    END IF;
END
$$;

-- Records a refused request of the session's app (state 'rejected'), its
-- text cut as store.RecordRejection cuts it.
CREATE FUNCTION herald_publisher_reject(r_id uuid, r_type text, r_version integer, r_subject text,
                                        r_code text, r_reason text, r_via text, r_token text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    me text;
BEGIN
    SELECT p.app INTO me
      FROM publisher_roles p JOIN apps a ON a.id = p.app AND a.removed_at IS NULL
     WHERE p.role = session_user;
    IF me IS NULL THEN
        RAISE EXCEPTION 'role % publishes for no live app', session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO events (id, source_app, type, version, subject, state, code, reason, published_via, published_token)
    VALUES (r_id, me, left(r_type, 400), r_version, left(r_subject, 400), 'rejected', left(r_code, 400),
            left(r_reason, 1000), NULLIF(left(r_via, 400), ''), NULLIF(left(r_token, 400), ''));
END
$$;

-- Pin the functions' search_path to this schema, so that a role able to
-- create objects elsewhere cannot slip its own tables or operators in, and
-- let only granted roles run all but herald_publisher_app.
DO $$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'herald_publisher_app()',
        'herald_publisher_declaration(text, integer)',
        'herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])',
        'herald_publisher_reject(uuid, text, integer, text, text, text, text, text)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', fn, current_schema());
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION herald_publisher_declaration(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION herald_publisher_reject(uuid, text, integer, text, text, text, text, text) FROM PUBLIC;

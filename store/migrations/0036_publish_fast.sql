-- herald_publish_fast: a publisher role's one event, published when every
-- check of herald_publish passes, in one statement, with no savepoint.
--
-- A publisher role's publish through herald_publish costs about twice a
-- plain INSERT of the same row with 64 publishers at once (0.51x, against
-- 0.92x for Herald's own role): the call of a set-returning function, the
-- checks, and the savepoint that keeps the caller's transaction usable
-- when herald_publish refuses by raising an error (docs/performance.md).
-- This function is scalar and raises no refusal: it inserts the event and
-- returns its sequence number when herald_publish would have inserted it
-- at once, and otherwise writes nothing and returns NULL (a refusal, an id
-- taken, a stripe row missing, coarse stripes kept), and the caller then
-- asks herald_publish, under a savepoint, what became of the event. Its
-- statement is the one-event statement of herald_publish (migration 0034):
-- the same checks in the same order, reading the app's row, parsing the
-- body last; a body that is not JSON fails its cast here as there. The
-- key's stripe row is locked only when every check passed; a taken id
-- keeps that lock, as in herald_publish, and draws a sequence number.
CREATE FUNCTION herald_publish_fast(event_id uuid, event_type text, event_version integer, event_subject text,
                                    event_stripe integer, event_envelope bytea, event_hash text, event_trace jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    got bigint;
BEGIN
    IF event_id IS NULL OR event_subject IS NULL THEN
        RETURN NULL;
    END IF;
    WITH me AS MATERIALIZED (
        SELECT p.app
          FROM publisher_roles p
          JOIN apps a ON a.id = p.app AND a.removed_at IS NULL
         WHERE p.role = session_user
           AND CASE WHEN a.removed_at IS NOT NULL THEN false
                    WHEN NOT EXISTS (SELECT 1 FROM declarations d
                                      WHERE d.type = event_type AND d.version = event_version AND d.app = p.app
                                        AND d.retired_at IS NULL) THEN false
                    WHEN event_envelope IS NULL OR octet_length(event_envelope) > 262144 THEN false
                    WHEN event_stripe IS NULL OR event_stripe < 256 OR event_stripe > 4351 THEN false
                    WHEN (SELECT k.coarse FROM key_stripe_scheme k) THEN false
                    WHEN NOT CASE WHEN event_trace IS NULL THEN true
                                  WHEN jsonb_typeof(event_trace) <> 'object' OR octet_length(event_trace::text) > 32768 THEN false
                                  ELSE NOT EXISTS (SELECT 1 FROM jsonb_each(event_trace) AS x WHERE jsonb_typeof(x.value) <> 'string')
                             END THEN false
                    ELSE (SELECT jsonb_typeof(b.j) = 'object'
                                 AND (b.j->>'id') = event_id::text
                                 AND (b.j->>'source') = 'app:' || p.app
                                 AND (b.j->>'type') = event_type
                                 AND (b.j->>'subject') = event_subject
                                 AND (b.j->'dataversion') = to_jsonb(event_version)
                            FROM (SELECT convert_from(event_envelope, 'UTF8')::jsonb AS j) b) IS TRUE
               END),
    locked AS MATERIALIZED (
        SELECT 1 FROM key_stripes k
         WHERE (SELECT count(*) FROM me) > 0
           AND k.type = event_type AND k.version = event_version AND k.stripe = event_stripe
           FOR NO KEY UPDATE)
    INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state,
                        published_via, published_token, trace_context)
    SELECT event_id, me.app, event_type, event_version, event_subject, event_envelope, event_hash, 'accepted',
           'library', NULL, event_trace
      FROM me, locked
    ON CONFLICT (id, source_app) WHERE state <> 'rejected' DO NOTHING
    RETURNING seq INTO got;
    RETURN got;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
REVOKE ALL ON FUNCTION herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb) FROM PUBLIC;

-- Roles granted before get it too (store.PublisherGrants grants it to new
-- ones); a role dropped since is skipped. A library of this release calls
-- it only where the session's role may (store.prepareSet), so an app may
-- upgrade before or after the database.
DO $$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT r.role FROM publisher_roles r WHERE EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = r.role) LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb) TO %I',
                       p.role);
    END LOOP;
END
$$;

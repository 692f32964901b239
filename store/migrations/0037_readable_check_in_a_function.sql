-- events_accepted_readable (migration 0035) judged by a function: the same
-- judgement, at a fraction of its cost to every INSERT.
--
-- PostgreSQL builds a table's check expressions afresh for every statement
-- that writes a row (it reads each from its stored text and simplifies it,
-- which for 0035's expression parses its JSON path and folds its casts).
-- Herald writes the log one row a statement, so every publish paid that:
-- measured at 6234888 on this machine, an INSERT of one event in a
-- transaction took 55-60 µs of server time against 34-36 µs with no such
-- check. Built from a call of one function the same check costs a few µs:
-- the call is all that is built per statement, and PL/pgSQL keeps what it
-- parsed for the session.
--
-- The function answers what 0035's expression answers, for every row: true
-- for a row that is not accepted; for an accepted one, false without an
-- id, subject or version, true without a trace context, and otherwise
-- whether the trace context is a JSON object of strings within 32768 bytes
-- of its text (herald_publish's bound, 0034). Every function it calls is
-- qualified, so a session's search_path cannot change its judgement.
--
-- Like 0035's, the constraint is added NOT VALID: the rows already there
-- passed 0035's check, which this one equals (`ALTER TABLE events VALIDATE
-- CONSTRAINT events_accepted_readable` reads them again, when the operator
-- likes). Dropping and adding it takes the table's lock only for a moment.
CREATE FUNCTION herald_event_readable(event_state text, event_id uuid, event_subject text,
                                      event_version integer, event_trace jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF event_state <> 'accepted' THEN
        RETURN true;
    END IF;
    IF event_id IS NULL OR event_subject IS NULL OR event_version IS NULL THEN
        RETURN false;
    END IF;
    IF event_trace IS NULL THEN
        RETURN true;
    END IF;
    IF pg_catalog.jsonb_typeof(event_trace) <> 'object' THEN
        RETURN false;
    END IF;
    IF pg_catalog.octet_length(event_trace::text) > 32768 THEN
        RETURN false;
    END IF;
    -- strict: an array member is not unwrapped, so it fails as any value
    -- that is not a string does.
    RETURN NOT pg_catalog.jsonb_path_exists(event_trace, 'strict $.* ? (@.type() != "string")');
END
$$;

ALTER TABLE events DROP CONSTRAINT events_accepted_readable;
ALTER TABLE events ADD CONSTRAINT events_accepted_readable
    CHECK (herald_event_readable(state, id, subject, version, trace_context)) NOT VALID;

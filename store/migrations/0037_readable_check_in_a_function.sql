-- events_accepted_readable (migration 0035) judged by a function: the same
-- judgement, at a fraction of its cost to every INSERT.
--
-- PostgreSQL prepares a table's check expressions afresh for every
-- statement that writes a row, from their stored trees (0035's is 3.7 KB
-- of them). Herald wrote the log one row a statement, so every publish paid
-- that: measured at 6234888 on this machine, in transactions of 100 one-row
-- INSERTs, 61-70 µs of server time an INSERT against 33-42 µs with no such
-- check. Built from a call of one function the same check took 40-45 µs:
-- the call is all that is prepared per statement, and PL/pgSQL keeps what
-- it planned for the session. (A statement of many rows now calls the
-- function once a row, where 0035's expression, once prepared, was
-- evaluated a row.)
--
-- The function's answer passes and fails the rows 0035's expression passes
-- and fails: a row that is not accepted passes; an accepted one fails
-- without an id, subject or version, passes without a trace context, and
-- otherwise passes when the trace context is a JSON object of strings
-- within 32768 bytes of its text (herald_publish's bound, 0034). Every
-- function, operator and type it names is qualified: a session's
-- search_path cannot change its judgement (0035's expression was stored
-- with its objects resolved).
--
-- Like 0035's, the constraint is added NOT VALID: the rows already there
-- passed 0035's check, which this one equals. An operator who had
-- validated 0035's may validate this one again (`ALTER TABLE events
-- VALIDATE CONSTRAINT events_accepted_readable` reads the log, letting
-- reads and writes go on). Dropping and adding it locks the table until
-- the migrations commit, as 0035 did: publishers and the relay wait
-- meanwhile. A database whose operator dropped 0035's constraint gets this
-- one all the same.
CREATE FUNCTION herald_event_readable(event_state text, event_id uuid, event_subject text,
                                      event_version integer, event_trace jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF event_state IS NULL OR event_state OPERATOR(pg_catalog.<>) 'accepted' THEN
        RETURN true;
    END IF;
    IF event_id IS NULL OR event_subject IS NULL OR event_version IS NULL THEN
        RETURN false;
    END IF;
    IF event_trace IS NULL THEN
        RETURN true;
    END IF;
    IF pg_catalog.jsonb_typeof(event_trace) OPERATOR(pg_catalog.<>) 'object' THEN
        RETURN false;
    END IF;
    IF pg_catalog.octet_length(event_trace::pg_catalog.text) OPERATOR(pg_catalog.>) 32768 THEN
        RETURN false;
    END IF;
    -- strict: an array member is not unwrapped, so it fails as any value
    -- that is not a string does.
    RETURN NOT pg_catalog.jsonb_path_exists(event_trace, 'strict $.* ? (@.type() != "string")');
END
$$;

-- Every role that writes the log runs it: Herald's owner and runtime
-- roles, and a publisher role's functions (as the owner). It only judges
-- its arguments.
GRANT EXECUTE ON FUNCTION herald_event_readable(text, uuid, text, integer, jsonb) TO PUBLIC;

ALTER TABLE events DROP CONSTRAINT IF EXISTS events_accepted_readable;
ALTER TABLE events ADD CONSTRAINT events_accepted_readable
    CHECK (herald_event_readable(state, id, subject, version, trace_context)) NOT VALID;

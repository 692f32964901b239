-- Per app delivery limits (manifest "limits") and the shared state that
-- enforces them across every worker process: one row per limited app with a
-- token bucket (tokens, refilled by the time elapsed since refilled_at) and
-- the leases of the POSTs under way (lease id -> expiry, in epoch seconds),
-- so that a lease of a killed worker frees itself.
ALTER TABLE apps
    ADD COLUMN max_per_second double precision CHECK (max_per_second > 0),
    ADD COLUMN max_in_flight  integer CHECK (max_in_flight > 0);

CREATE TABLE app_limit_state (
    app         text PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    leases      jsonb NOT NULL DEFAULT '{}'
);

-- herald_limit_acquire asks for one delivery to p_app: one token, taken
-- even if it only becomes available up to p_max_wait seconds from now (the
-- caller then sleeps for wait seconds), and one in-flight lease expiring
-- p_ttl seconds after the token's time. Nothing is taken unless both are
-- granted. The row lock serializes callers per app; the limits are read from
-- apps at each call, so a change applies to the next acquire.
CREATE FUNCTION herald_limit_acquire(p_app text, p_lease text, p_ttl double precision, p_max_wait double precision,
    OUT granted boolean, OUT wait double precision, OUT in_flight integer, OUT at_capacity boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_rate   double precision;
    v_cap    integer;
    v_tokens double precision;
    v_at     timestamptz;
    v_leases jsonb;
    v_now    timestamptz;
    v_epoch  double precision;
BEGIN
    SELECT max_per_second, max_in_flight INTO v_rate, v_cap FROM apps WHERE id = p_app;
    IF v_rate IS NULL AND v_cap IS NULL THEN
        granted := true; wait := 0; in_flight := 0; at_capacity := false;
        RETURN;
    END IF;
    SELECT s.tokens, s.refilled_at, s.leases INTO v_tokens, v_at, v_leases
      FROM app_limit_state s WHERE s.app = p_app FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO app_limit_state (app, tokens, refilled_at)
        VALUES (p_app, greatest(1, coalesce(v_rate, 1)), clock_timestamp())
        ON CONFLICT (app) DO NOTHING;
        SELECT s.tokens, s.refilled_at, s.leases INTO v_tokens, v_at, v_leases
          FROM app_limit_state s WHERE s.app = p_app FOR UPDATE;
    END IF;
    -- Read the clock once the lock is held: an earlier reading could lie
    -- before the previous holder's.
    v_now := clock_timestamp();
    v_epoch := extract(epoch FROM v_now);
    SELECT coalesce(jsonb_object_agg(l.key, l.value), '{}'::jsonb) INTO v_leases
      FROM jsonb_each(v_leases) AS l WHERE (l.value)::double precision > v_epoch;
    in_flight := (SELECT count(*) FROM jsonb_object_keys(v_leases));
    at_capacity := v_cap IS NOT NULL AND in_flight >= v_cap;
    wait := 0;
    IF v_rate IS NOT NULL THEN
        -- Refill, capped at the burst (one second's worth, at least one).
        v_tokens := least(greatest(1, v_rate),
                          v_tokens + v_rate * greatest(0, extract(epoch FROM v_now - v_at)));
        -- Tokens reserved ahead are a debt in tokens. After the rate was
        -- lowered, a debt run up at the old rate would stall the app for
        -- debt / new rate; forgive what lies beyond 60 s at the new rate.
        -- Reservations never reach that far at a constant rate (at most the
        -- caller's budget, 15 s), so this never lets more through.
        v_tokens := greatest(v_tokens, -v_rate * 60);
        wait := greatest(0, (1 - v_tokens) / v_rate);
    END IF;
    granted := NOT at_capacity AND wait <= p_max_wait;
    IF granted THEN
        IF v_rate IS NOT NULL THEN
            v_tokens := v_tokens - 1; -- below zero: reserved ahead, the caller waits
        END IF;
        IF v_cap IS NOT NULL THEN
            v_leases := v_leases || jsonb_build_object(p_lease, v_epoch + wait + p_ttl);
            in_flight := in_flight + 1;
        END IF;
    END IF;
    UPDATE app_limit_state SET tokens = coalesce(v_tokens, 0), refilled_at = v_now, leases = v_leases
     WHERE app = p_app;
END
$$;

-- Locks that only Herald's roles can take (docs/design.md#the-event-log-and-the-relay).
-- Advisory locks are open to any role that can log in to the database: a
-- role with no privilege on Herald's tables could hold the relay's leader
-- lock or a key's ordering lock forever. Row locks on these tables need
-- UPDATE on them, which only the owner and the runtime role have.

-- The ordering-key locks of publishers: a key (type, version, subject) maps
-- to one of a fixed number of stripes of its type and version, and a
-- publishing transaction locks its stripes' rows (FOR NO KEY UPDATE, in
-- ascending order) until it ends. Row locks live in the rows, not in the
-- server's shared lock table, and a transaction locks at most the stripe
-- count per type and version, whatever the number of its keys. A
-- declaration's rows are made with it, by the trigger below, and commit
-- with it; the first publisher of an undeclared type and version (a test
-- writing the log directly) makes them in its own transaction.
CREATE TABLE key_stripes (
    type    text    NOT NULL,
    version integer NOT NULL,
    stripe  integer NOT NULL CHECK (stripe >= 0),
    PRIMARY KEY (type, version, stripe)
);

INSERT INTO key_stripes (type, version, stripe)
SELECT d.type, d.version, s
  FROM declarations d, generate_series(0, 255) AS s;

-- 256 is store.keyStripeCount.
CREATE FUNCTION herald_make_key_stripes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO key_stripes (type, version, stripe)
    SELECT NEW.type, NEW.version, s FROM generate_series(0, 255) AS s
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER declarations_key_stripes AFTER INSERT ON declarations
    FOR EACH ROW EXECUTE FUNCTION herald_make_key_stripes();

-- The relay's leader lease: one row per schema. The leader renews it on its
-- own connection; another relay takes it when it expired, was given back,
-- or its holder's connection (holder_pid, holder_started) is gone.
CREATE TABLE relay_lease (
    only_row       boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    holder         text,
    holder_pid     integer,
    holder_started timestamptz,
    expires_at     timestamptz NOT NULL DEFAULT '-infinity'
);

INSERT INTO relay_lease DEFAULT VALUES;

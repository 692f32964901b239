-- Partitioned relay leadership (docs/design.md#relay-partitions).
-- The log's keys fall into 16 partitions (store.RelayPartitions) by their
-- subject: hashtextextended(subject, 0) & 15, PostgreSQL's own hash of the
-- text, which hash partitioning also relies on staying fixed across
-- versions, so every event of one subject key (hence of one subscription
-- and key) is in one partition whatever its type. Each partition is led by
-- one worker through its row here, which only Herald's roles may update,
-- renewed on the worker's own connection; another worker takes it when it
-- was given back, expired, or its holder's backend is gone.
CREATE TABLE relay_partitions (
    partition      smallint PRIMARY KEY CHECK (partition >= 0 AND partition < 16),
    holder         text,
    holder_pid     integer,
    holder_started timestamptz,
    expires_at     timestamptz NOT NULL DEFAULT '-infinity'
);

INSERT INTO relay_partitions (partition) SELECT generate_series(0, 15);

-- The workers that take part, one row each, renewed with their leases: a
-- worker takes at most ceil(16 / live workers) partitions and gives back
-- the rest when another joins. A row whose backend is gone or that expired
-- counts no more; the next worker to look deletes it.
CREATE TABLE relay_workers (
    holder         text PRIMARY KEY,
    holder_pid     integer NOT NULL,
    holder_started timestamptz,
    expires_at     timestamptz NOT NULL
);

-- Each partition's undispatched events, in sequence order: one index range
-- per partition round (store.UndispatchedIn).
CREATE INDEX events_relay_partition ON events ((hashtextextended(subject, 0) & 15), seq)
    WHERE state = 'accepted';

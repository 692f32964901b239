-- Herald's schema: declarations, subscriptions, the event log (outbox) and the audit trail.

CREATE TABLE apps (
    id            text PRIMARY KEY,
    endpoint      text NOT NULL,
    delivery_path text NOT NULL,
    manifest      jsonb NOT NULL,
    content_hash  text NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    removed_at    timestamptz
);

CREATE TABLE declarations (
    type        text NOT NULL,
    version     integer NOT NULL CHECK (version BETWEEN 1 AND 1000000),
    app         text NOT NULL REFERENCES apps (id),
    name        text NOT NULL,
    subject     text NOT NULL,
    title       text NOT NULL DEFAULT '',
    description text NOT NULL DEFAULT '',
    automation  boolean NOT NULL DEFAULT true,
    place       jsonb,
    data_schema jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz,
    PRIMARY KEY (type, version)
);

CREATE TABLE subscriptions (
    id         text PRIMARY KEY,
    app        text NOT NULL REFERENCES apps (id),
    type       text NOT NULL,
    version    integer NOT NULL,
    state      text NOT NULL CHECK (state IN ('active', 'blocked', 'paused', 'cancelled')),
    reason     text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app, type, version)
);
CREATE INDEX subscriptions_type ON subscriptions (type, version);

-- The event log doubles as the transactional outbox: accepted events wait for the
-- relay (state 'accepted'), dispatched ones are kept until retention removes them.
CREATE TABLE events (
    seq           bigserial PRIMARY KEY,
    id            uuid,
    source_app    text NOT NULL,
    type          text NOT NULL,
    version       integer,
    subject       text,
    envelope      bytea,
    content_hash  text,
    state         text NOT NULL CHECK (state IN ('accepted', 'dispatched', 'rejected')),
    code          text,
    reason        text,
    received_at   timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz
);
CREATE UNIQUE INDEX events_id ON events (id) WHERE state <> 'rejected';
CREATE INDEX events_undispatched ON events (seq) WHERE state = 'accepted';
CREATE INDEX events_rejected ON events (received_at) WHERE state = 'rejected';
CREATE INDEX events_dispatched_at ON events (dispatched_at) WHERE state = 'dispatched';

CREATE TABLE audit (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    action      text NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('allowed', 'failed')),
    actor       text NOT NULL DEFAULT 'system',
    target_type text NOT NULL,
    target_id   text NOT NULL,
    error_code  text,
    metadata    jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_target ON audit (target_id, id);
CREATE INDEX audit_action ON audit (action, id);

-- The audit trail is append-only in the database itself, whatever the client does.
CREATE FUNCTION herald_audit_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_no_update_delete BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION herald_audit_is_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION herald_audit_is_append_only();

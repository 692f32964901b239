package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Herald runs with two PostgreSQL roles. The owner role owns the schema's
// tables and applies migrations (`starter migrate`). The runtime role, which
// the workers and the starter CLI connect as, reads and writes the tables but
// owns none: a role that owns a table may disable its triggers, alter or drop
// it, which would let it rewrite the audit trail.

// runtimeTableGrants are the privileges GrantRuntime gives on every table of
// the schema, except the audit trail and the migrations record.
const runtimeTableGrants = "SELECT, INSERT, UPDATE, DELETE"

// GrantRuntime gives role what Herald's workers and CLI need in the current
// schema, and on the audit trail no more than INSERT and SELECT. Run it as
// the owner role after migrating (`starter migrate --runtime-role`): it
// grants on every table and sequence that exists, so a table a later
// migration creates is covered by the next run, and it sets default
// privileges so that tables the owner creates in the meantime are usable
// too. It refuses a role that is a superuser, is the owner or a member of
// the owner, or owns anything in the schema.
func (s *Store) GrantRuntime(ctx context.Context, role string) error {
	if role == "" {
		return errors.New("grant runtime role: no role given")
	}
	return s.WithTx(ctx, func(tx pgx.Tx) error {
		if err := checkRuntimeRole(ctx, tx, "grant runtime role", role); err != nil {
			return err
		}
		var schema string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return fmt.Errorf("grant runtime role: %w", err)
		}
		r, sch := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
		stmts := []string{
			"GRANT USAGE ON SCHEMA " + sch + " TO " + r,
			"GRANT " + runtimeTableGrants + " ON ALL TABLES IN SCHEMA " + sch + " TO " + r,
			"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA " + sch + " TO " + r,
			"ALTER DEFAULT PRIVILEGES IN SCHEMA " + sch + " GRANT " + runtimeTableGrants + " ON TABLES TO " + r,
			"ALTER DEFAULT PRIVILEGES IN SCHEMA " + sch + " GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO " + r,
			// The audit trail: append and read, nothing else, for anyone
			// but its owner. The triggers refuse UPDATE, DELETE and
			// TRUNCATE even to the owner; not owning it keeps the runtime
			// role from removing them.
			"REVOKE ALL ON audit FROM PUBLIC, " + r,
			"GRANT SELECT, INSERT ON audit TO " + r,
			"REVOKE ALL ON herald_migrations FROM PUBLIC, " + r,
			"GRANT SELECT ON herald_migrations TO " + r,
		}
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("grant runtime role %s: %s: %w", role, stmt, err)
			}
		}
		return nil
	})
}

// checkRuntimeRole refuses a role that could alter the schema's tables; its
// errors start with what (the command).
func checkRuntimeRole(ctx context.Context, tx pgx.Tx, what, role string) error {
	var super, ownerMember bool
	var owned int
	err := tx.QueryRow(ctx, `
		SELECT r.rolsuper,
		       pg_has_role(r.oid, current_user, 'MEMBER'),
		       -- Functions, operators and types too: one that matches a
		       -- call's argument types better than a built-in is what the
		       -- schema's SECURITY DEFINER functions would run, as the owner.
		       (SELECT count(*) FROM (
		                SELECT c.relowner FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
		                UNION ALL SELECT f.proowner FROM pg_proc f WHERE f.pronamespace = current_schema()::regnamespace
		                UNION ALL SELECT o.oprowner FROM pg_operator o WHERE o.oprnamespace = current_schema()::regnamespace
		                UNION ALL SELECT t.typowner FROM pg_type t
		                           WHERE t.typnamespace = current_schema()::regnamespace AND t.typrelid = 0
		            ) AS objects(owner)
		         WHERE pg_has_role(r.oid, objects.owner, 'MEMBER'))
		  FROM pg_roles r WHERE r.rolname = $1`, role).Scan(&super, &ownerMember, &owned)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: role %q does not exist (CREATE ROLE %s LOGIN PASSWORD '...')", what, role, pgx.Identifier{role}.Sanitize())
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case super:
		return fmt.Errorf("%s: %q is a superuser; it must be an ordinary role", what, role)
	case ownerMember:
		return fmt.Errorf("%s: %q is the owner role or a member of it; use a role of its own", what, role)
	case owned > 0:
		return fmt.Errorf("%s: %q owns %d tables, indexes, sequences, functions, operators or types in this schema; make the owner role own them "+
			"(REASSIGN OWNED BY %s TO <owner>, as a superuser) first", what, role, owned, pgx.Identifier{role}.Sanitize())
	}
	return nil
}

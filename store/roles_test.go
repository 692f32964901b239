package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/internal/testenv"
	"herald/store"
)

// newRuntimeRole creates a login role for one test and returns its name and
// a URL like owner's (same database and schema) that connects as it. The
// test database's role needs CREATEROLE (the clusters of scripts/pg.sh have
// it). The role and its privileges are removed afterwards.
func newRuntimeRole(t testing.TB, owner *store.Store) (string, string) {
	t.Helper()
	return testenv.LoginRole(t, owner.Pool.Config().ConnString(), "herald_rt_")
}

// createRole creates role, with options (CREATE ROLE's), for one test; the
// role and its privileges are removed afterwards. The test database's role
// needs CREATEROLE (the clusters of scripts/pg.sh have it).
func createRole(t testing.TB, owner *store.Store, role, options string) {
	t.Helper()
	ctx := context.Background()
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := owner.Pool.Exec(ctx, "CREATE ROLE "+ident+" "+options); err != nil {
		t.Fatalf("create role (the test database's role needs CREATEROLE): %v", err)
	}
	// Membership lets the owner drop what was granted to the role afterwards;
	// it gives the role nothing of the owner's.
	if _, err := owner.Pool.Exec(ctx, "GRANT "+ident+" TO current_user"); err != nil {
		t.Fatalf("grant role: %v", err)
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP OWNED BY " + ident, "DROP ROLE " + ident} {
			if _, err := owner.Pool.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
}

// wantRefused checks that err is PostgreSQL's insufficient_privilege.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: err = %v, want insufficient_privilege (42501)", what, err)
	}
}

// The worker's role owned the audit table, so it could disable or drop the
// append-only triggers, or the table. The runtime role now owns nothing and
// may only INSERT and SELECT on the audit trail.
func TestRuntimeRoleCannotRewriteTheAudit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := openSyncStore(t)
	role, runtimeURL := newRuntimeRole(t, owner)
	if err := owner.GrantRuntime(ctx, role); err != nil {
		t.Fatalf("GrantRuntime: %v", err)
	}
	rt, err := store.Open(ctx, runtimeURL, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatalf("open as the runtime role: %v", err)
	}
	t.Cleanup(rt.Close)

	// What the worker and the CLI do works: start-up migration with nothing
	// due, applying a manifest (apps, declarations, subscriptions, audit),
	// appending to and reading the audit trail.
	if applied, err := rt.Migrate(ctx); err != nil || len(applied) != 0 {
		t.Fatalf("Migrate as the runtime role = %v, %v; want nothing to do", applied, err)
	}
	mustApply(t, rt, mkManifest("contacts", nil))
	if err := rt.Audit(ctx, store.AuditEntry{Action: "test.kept", TargetType: "app", TargetID: "x"}); err != nil {
		t.Fatalf("append audit as the runtime role: %v", err)
	}
	if rows := auditRows(t, rt, "test.kept", ""); len(rows) != 1 {
		t.Fatalf("audit rows read back: %+v", rows)
	}

	for _, sql := range []string{
		`UPDATE audit SET actor = 'mallory'`,
		`DELETE FROM audit`,
		`TRUNCATE audit`,
		`ALTER TABLE audit DISABLE TRIGGER audit_no_update_delete`,
		`ALTER TABLE audit DISABLE TRIGGER ALL`,
		`ALTER TABLE audit ADD COLUMN note text`,
		`ALTER TABLE audit RENAME TO audit_old`,
		`ALTER TABLE audit OWNER TO CURRENT_USER`,
		`DROP TRIGGER audit_no_truncate ON audit`,
		`DROP TABLE audit`,
		`DROP FUNCTION herald_audit_is_append_only() CASCADE`,
		`CREATE OR REPLACE FUNCTION herald_audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$`,
		`CREATE TABLE audit_shadow (id int)`,
		`DELETE FROM herald_migrations`,
		`INSERT INTO herald_migrations (version, name) VALUES (9999, 'x')`,
		`DROP TABLE events`,
	} {
		_, err := rt.Pool.Exec(ctx, sql)
		wantRefused(t, sql, err)
	}
	if n := countAudit(t, owner); n < 2 {
		t.Errorf("%d audit rows left, want them all", n)
	}
	// The UPDATE is refused for want of the privilege, before the trigger.
	_, err = rt.Pool.Exec(ctx, `UPDATE audit SET actor = 'mallory'`)
	if err == nil || strings.Contains(err.Error(), "append-only") {
		t.Errorf("UPDATE audit as the runtime role = %v, want a privilege error rather than the trigger's", err)
	}
}

// A table that a later migration creates (such as outcomes) is usable by the
// runtime role at once through default privileges, and after the next
// GrantRuntime in any case.
func TestRuntimeRoleUsesTablesOfLaterMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := openSyncStore(t)
	role, runtimeURL := newRuntimeRole(t, owner)
	if err := owner.GrantRuntime(ctx, role); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Pool.Exec(ctx, `CREATE TABLE later_outcomes (id bigserial PRIMARY KEY, state text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	rt, err := store.Open(ctx, runtimeURL, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	use := func(when string) {
		t.Helper()
		for _, sql := range []string{
			`INSERT INTO later_outcomes (state) VALUES ('queued')`,
			`UPDATE later_outcomes SET state = 'delivered'`,
			`SELECT count(*) FROM later_outcomes`,
			`DELETE FROM later_outcomes`,
		} {
			if _, err := rt.Pool.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %s as the runtime role: %v", when, sql, err)
			}
		}
		_, err := rt.Pool.Exec(ctx, `DROP TABLE later_outcomes`)
		wantRefused(t, when+": DROP TABLE later_outcomes", err)
	}
	use("before re-granting")
	if err := owner.GrantRuntime(ctx, role); err != nil {
		t.Fatalf("GrantRuntime again: %v", err)
	}
	use("after re-granting")
}

func TestGrantRuntimeRefusesUnsafeRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := openSyncStore(t)
	var self string
	if err := owner.Pool.QueryRow(ctx, `SELECT current_user`).Scan(&self); err != nil {
		t.Fatal(err)
	}
	// The owner: a member of itself (or, on a server where the tests run as
	// a superuser, a superuser).
	if err := owner.GrantRuntime(ctx, self); err == nil ||
		!strings.Contains(err.Error(), "member of it") && !strings.Contains(err.Error(), "superuser") {
		t.Errorf("GrantRuntime(the owner) = %v, want a refusal", err)
	}
	if err := owner.GrantRuntime(ctx, "no_such_role_here"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("GrantRuntime(missing role) = %v, want a refusal", err)
	}
	if err := owner.GrantRuntime(ctx, ""); err == nil {
		t.Error("GrantRuntime(\"\") accepted")
	}
	// A role that owns a table of the schema (as a worker role that ran the
	// migrations itself did) is refused.
	role, runtimeURL := newRuntimeRole(t, owner)
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := owner.Pool.Exec(ctx, `GRANT USAGE, CREATE ON SCHEMA `+currentSchema(t, owner)+` TO `+ident); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, runtimeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE owned_by_worker (id int)`); err != nil {
		t.Fatal(err)
	}
	if err := owner.GrantRuntime(ctx, role); err == nil || !strings.Contains(err.Error(), "owns") {
		t.Errorf("GrantRuntime(a role owning a table) = %v, want a refusal", err)
	}
}

func currentSchema(t *testing.T, s *store.Store) string {
	t.Helper()
	var schema string
	if err := s.Pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	return pgx.Identifier{schema}.Sanitize()
}

// publishingSchema opens a store of at most maxConns connections (zero:
// pgx's default) on url (a fresh schema), migrated, where the app contacts
// declares contacts.person.updated, and makes a publisher role of that app,
// as an app's own database role publishes: it returns the store, the role
// and the role's URL.
func publishingSchema(ctx context.Context, t testing.TB, url string, maxConns int32) (*store.Store, string, string) {
	t.Helper()
	st, err := store.Open(ctx, url, store.Options{MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "test"); err != nil {
		t.Fatal(err)
	}
	role, roleURL := newRuntimeRole(t, st)
	if err := st.GrantPublisher(ctx, "contacts", role, "test"); err != nil {
		t.Fatal(err)
	}
	return st, role, roleURL
}

// TestGrantPublisherRefusesARoleThatCanPlantFunctions: a publisher role
// that may create objects in Herald's schema, or owns a function there,
// could plant a function that the publisher functions (SECURITY DEFINER,
// run as the owner) call instead of a built-in: array_length(uuid[],
// integer) matches herald_publish's call more closely than the built-in
// array_length(anyarray, integer). Both are refused, saying why.
func TestGrantPublisherRefusesARoleThatCanPlantFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := contactsSchema(t)
	schema := currentSchema(t, st)
	role, roleURL := newRuntimeRole(t, st)
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := st.Pool.Exec(ctx, `GRANT USAGE, CREATE ON SCHEMA `+schema+` TO `+ident); err != nil {
		t.Fatal(err)
	}
	if err := st.GrantPublisher(ctx, "contacts", role, "test"); err == nil || !strings.Contains(err.Error(), "may create objects") {
		t.Fatalf("GrantPublisher(a role with CREATE on the schema) = %v, want a refusal", err)
	}
	conn, err := pgx.Connect(ctx, roleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE FUNCTION `+schema+`.array_length(uuid[], integer) RETURNS integer
		LANGUAGE sql AS 'SELECT 1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `REVOKE CREATE ON SCHEMA `+schema+` FROM `+ident); err != nil {
		t.Fatal(err)
	}
	if err := st.GrantPublisher(ctx, "contacts", role, "test"); err == nil || !strings.Contains(err.Error(), "functions") {
		t.Fatalf("GrantPublisher(a role owning a function in the schema) = %v, want a refusal", err)
	}
	var granted int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM publisher_roles WHERE role = $1`, role).Scan(&granted); err != nil || granted != 0 {
		t.Fatalf("publisher_roles holds the role %d times (%v), want none", granted, err)
	}
}

// TestGrantPublisherRefusesAMemberOfTheRuntimeRole: a role that is a
// member of the runtime role without inheriting its rights (NOINHERIT)
// has none of them until it runs SET ROLE, which it may: it is refused as
// the runtime role's members are.
func TestGrantPublisherRefusesAMemberOfTheRuntimeRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := contactsSchema(t)
	runtime, _ := newRuntimeRole(t, st)
	if err := st.GrantRuntime(ctx, runtime); err != nil {
		t.Fatal(err)
	}
	member := fmt.Sprintf("herald_noinherit_%d", time.Now().UnixNano())
	createRole(t, st, member, "NOINHERIT")
	if _, err := st.Pool.Exec(ctx, "GRANT "+pgx.Identifier{runtime}.Sanitize()+" TO "+pgx.Identifier{member}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if err := st.GrantPublisher(ctx, "contacts", member, "test"); err == nil || !strings.Contains(err.Error(), "can already write") {
		t.Fatalf("GrantPublisher(a NOINHERIT member of the runtime role) = %v, want a refusal", err)
	}
}

// TestGrantPublisherRefusesAMemberOfARoleThatCreates: a NOINHERIT member
// of a role that may create objects in Herald's schema may run SET ROLE
// and create them: refused as the role itself would be.
func TestGrantPublisherRefusesAMemberOfARoleThatCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := contactsSchema(t)
	suffix := time.Now().UnixNano()
	ddl, member := fmt.Sprintf("herald_ddl_%d", suffix), fmt.Sprintf("herald_noinherit_%d", suffix)
	createRole(t, st, ddl, "")
	createRole(t, st, member, "NOINHERIT")
	for _, stmt := range []string{
		"GRANT USAGE, CREATE ON SCHEMA " + currentSchema(t, st) + " TO " + pgx.Identifier{ddl}.Sanitize(),
		"GRANT " + pgx.Identifier{ddl}.Sanitize() + " TO " + pgx.Identifier{member}.Sanitize(),
	} {
		if _, err := st.Pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.GrantPublisher(ctx, "contacts", member, "test"); err == nil || !strings.Contains(err.Error(), "may create objects") {
		t.Fatalf("GrantPublisher(a NOINHERIT member of a role with CREATE on the schema) = %v, want a refusal", err)
	}
}

// contactsSchema is a migrated schema of its own in which contacts
// declares contacts.person.updated, as the owner sees it.
func contactsSchema(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "test"); err != nil {
		t.Fatal(err)
	}
	return st
}

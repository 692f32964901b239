package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/store"
)

// TestPublishFastAfterUpgrade: a publisher role granted before migration
// 0036 publishes one event under a savepoint while the database has no
// herald_publish_fast, and through it, with no savepoint, once migrated
// (0036 grants it to the roles granted before, a name that needs quoting
// too, past a role dropped since). Either way a refusal leaves the
// transaction usable.
func TestPublishFastAfterUpgrade(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := openStoreAt(t, 35)
	if _, err := st.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "test"); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := st.Pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	// The grants of a release before 0036: the new function is not there
	// to grant.
	role, roleURL := newRuntimeRole(t, st)
	for _, stmt := range store.PublisherGrants(schema, "contacts", role) {
		if strings.Contains(stmt, "herald_publish_fast") {
			continue
		}
		if _, err := st.Pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// Two more rows of publisher_roles the upgrade's grants must get past:
	// a role whose name needs quoting, and one dropped since its grant.
	quoted := "Herald Quoted-" + uuid.NewString()[:8]
	createRole(t, st, quoted, "")
	if _, err := st.Pool.Exec(ctx, `INSERT INTO publisher_roles (role, app) VALUES ($1, 'contacts'), ('herald_dropped_'||$2, 'contacts')`,
		quoted, uuid.NewString()[:8]); err != nil {
		t.Fatal(err)
	}
	event := func(typ, subject string) store.NewEvent {
		return envelopedEvent("contacts", typ, 1, subject, []byte(`{}`))
	}
	// publish publishes one event twice on a new connection (the first
	// prepares its statements), then one its app does not declare, and
	// commits; it returns what the first and the second publish sent.
	type sent struct {
		statements []string
		batches    int
	}
	publish := func(round string) (firstSent, secondSent sent) {
		counter := &testkit.Sent{}
		tx := connTx(ctx, t, roleURL, func(cfg *pgx.ConnConfig) { cfg.Tracer = counter })
		first, second := event("contacts.person.updated", round+"-1"), event("contacts.person.updated", round+"-2")
		if _, err := store.InsertPublisherEventsTx(ctx, tx, []store.NewEvent{first}); err != nil {
			t.Fatalf("%s: the first publish: %v", round, err)
		}
		firstSent.statements, firstSent.batches = counter.Reset()
		if out, err := store.InsertPublisherEventsTx(ctx, tx, []store.NewEvent{second}); err != nil || len(out) != 1 || out[0].Seq == 0 {
			t.Fatalf("%s: the second publish: %+v, %v", round, out, err)
		}
		secondSent.statements, secondSent.batches = counter.Reset()
		_, err := store.InsertPublisherEventsTx(ctx, tx, []store.NewEvent{event("contacts.person.removed", round+"-3")})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "does not declare every type given") {
			t.Errorf("%s: an undeclared type: %v; want 42501, not declared", round, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: commit after the refusal: %v", round, err)
		}
		var n int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE subject LIKE $1 || '-%'`, round).Scan(&n); err != nil || n != 2 {
			t.Errorf("%s: %d events written (%v), want the two accepted", round, n, err)
		}
		return firstSent, secondSent
	}
	if first, second := publish("before"); first.batches != 1 || second.batches != 1 || len(second.statements) != 0 {
		t.Errorf("before 0036 the first publish sent %d batches, the second %q and %d batches; want the savepoint's batch each",
			first.batches, second.statements, second.batches)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var quotedRuns bool
	if err := st.Pool.QueryRow(ctx, `SELECT has_function_privilege($1, 'herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb)', 'EXECUTE')`,
		quoted).Scan(&quotedRuns); err != nil || !quotedRuns {
		t.Errorf("after 0036 the role %q may run herald_publish_fast: %v (%v); want it granted", quoted, quotedRuns, err)
	}
	// A connection's first publish prepares its statements under a
	// savepoint of its own and then goes the fast way too: herald_publish is
	// neither called nor compiled on a connection whose publishes all pass.
	first, second := publish("after")
	wantFirst := []string{"begin", "SAVEPOINT herald_publish",
		"SELECT coalesce(has_function_privilege(to_regprocedure($1), 'EXECUTE'), false)",
		"RELEASE SAVEPOINT herald_publish", "herald_publish_fast"}
	if !slices.Equal(first.statements, wantFirst) || first.batches != 0 {
		t.Errorf("after 0036 the first publish sent %q and %d batches; want %q (the statements prepared under the savepoint) and no batch",
			first.statements, first.batches, wantFirst)
	}
	if len(second.statements) != 1 || second.statements[0] != "herald_publish_fast" || second.batches != 0 {
		t.Errorf("after 0036 the second publish sent %q and %d batches; want herald_publish_fast alone", second.statements, second.batches)
	}

	// The function's EXECUTE revoked from a connection that prepared it: the
	// publish fails there (its transaction aborted, as for any database
	// error), and the next one on the connection asks again and goes the
	// savepoint's way.
	conn, err := pgx.Connect(ctx, roleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	inTx := func(ev store.NewEvent) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := store.InsertPublisherEventsTx(ctx, tx, []store.NewEvent{ev}); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	for i := range 2 {
		if err := inTx(event("contacts.person.updated", fmt.Sprintf("revoked-%d", i))); err != nil {
			t.Fatalf("publish %d before the revoke: %v", i, err)
		}
	}
	if _, err := st.Pool.Exec(ctx, `REVOKE EXECUTE ON FUNCTION herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb) FROM `+
		pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := inTx(event("contacts.person.updated", "revoked-2")); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("the publish after the revoke: %v; want 42501", err)
	}
	if err := inTx(event("contacts.person.updated", "revoked-3")); err != nil {
		t.Errorf("the next publish on the connection: %v; want it published the savepoint's way", err)
	}
}

// TestPublishFastAfterDeallocate: herald_publish_fast deallocated behind
// pgx fails that publish (26000, its transaction aborted) and the next one
// on the connection prepares the statements anew and goes the fast way;
// before, pgx kept its own description of the statement and every later
// publish failed alike.
func TestPublishFastAfterDeallocate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, _, roleURL := publishingSchema(ctx, t, testenv.NewSchema(t), 0)
	counter := &testkit.Sent{}
	cfg, err := pgx.ParseConfig(roleURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = counter
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	publish := func(subject string) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := store.InsertPublisherEventsTx(ctx, tx, []store.NewEvent{
				envelopedEvent("contacts", "contacts.person.updated", 1, subject, []byte(`{}`))})
			return err
		})
	}
	if err := publish("before"); err != nil {
		t.Fatalf("the first publish: %v", err)
	}
	if _, err := conn.Exec(ctx, "DEALLOCATE herald_publish_fast"); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := publish("deallocated"); !errors.As(err, &pgErr) || pgErr.Code != "26000" {
		t.Fatalf("the publish after DEALLOCATE: %v; want 26000", err)
	}
	for _, subject := range []string{"again-1", "again-2"} {
		counter.Reset()
		if err := publish(subject); err != nil {
			t.Fatalf("publish %s after the failed one: %v", subject, err)
		}
		statements, _ := counter.Reset()
		if n := len(statements); n < 2 || statements[n-2] != "herald_publish_fast" {
			t.Errorf("publish %s sent %q; want herald_publish_fast before the commit", subject, statements)
		}
	}
	var n int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE subject IN ('before', 'again-1', 'again-2')`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d events written (%v), want 3", n, err)
	}
}

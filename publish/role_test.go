package publish_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/publish"
	"herald/store"
)

// documentedPublisherGrants returns the GRANT lines of docs/publishing.md's
// "A publisher role per app", for app orders, role orders_publisher and
// schema herald.
func documentedPublisherGrants(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/publishing.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	at := strings.Index(doc, "<!-- publisher-grants")
	if at < 0 {
		t.Fatal("docs/publishing.md has no publisher-grants block")
	}
	doc = doc[at:]
	start := strings.Index(doc, "```sql\n")
	end := strings.Index(doc[start+7:], "```")
	if start < 0 || end < 0 {
		t.Fatal("docs/publishing.md: the publisher-grants block is not an sql code block")
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(doc[start+7:start+7+end]), "\n") {
		lines = append(lines, strings.TrimSuffix(l, ";"))
	}
	return lines
}

// newPublisherRole creates a login role for one test, dropped afterwards,
// and returns its name and a URL like e's that logs in as it.
func (e *env) newPublisherRole() (string, string) {
	e.t.Helper()
	return testenv.LoginRole(e.t, e.url, "herald_pub_")
}

// grantedPublisherRole makes a publisher role for app contacts with the
// grant lines of docs/publishing.md and returns its database URL.
func (e *env) grantedPublisherRole(documented []string) string {
	e.t.Helper()
	var schema string
	if err := e.store.Pool.QueryRow(e.ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		e.t.Fatal(err)
	}
	role, roleURL := e.newPublisherRole()
	for _, line := range documented {
		line = strings.ReplaceAll(line, `"herald"`, pgx.Identifier{schema}.Sanitize())
		line = strings.ReplaceAll(line, "orders_publisher", role)
		line = strings.ReplaceAll(line, "'orders'", "'contacts'")
		e.exec(line)
	}
	return roleURL
}

func wantPrivilegeError(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: err = %v, want insufficient_privilege (42501)", what, err)
	}
}

// TestPublisherRole: the GRANT lines of docs/publishing.md (which starter db
// grant-publisher runs) make a role that publishes with PublishTx for its
// own app only, holding the key's stripe lock until its transaction ends,
// and may do nothing else with Herald's tables.
func TestPublisherRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	documented := documentedPublisherGrants(t)
	if want := store.PublisherGrants("herald", "orders", "orders_publisher"); strings.Join(documented, "\n") != strings.Join(want, "\n") {
		t.Fatalf("docs/publishing.md's grant lines:\n%s\nstore.PublisherGrants (starter db grant-publisher):\n%s",
			strings.Join(documented, "\n"), strings.Join(want, "\n"))
	}
	roleURL := e.grantedPublisherRole(documented)

	// Billing's event, whose id contacts will try to take.
	owner := e.publisher(publish.Options{})
	billing, err := owner.Publish(e.ctx, publish.Request{App: "billing", Type: "billing.invoice.paid", Version: 1,
		Subject: "invoice-1", Data: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}

	st, err := store.Open(e.ctx, roleURL, store.Options{MaxConns: 3})
	if err != nil {
		t.Fatalf("open as the publisher role: %v", err)
	}
	t.Cleanup(st.Close)
	p := publish.New(st, publish.Options{})

	// Publishing does not notify the relay (migration 0027): the relay's
	// poll finds the events.
	listener, err := e.store.Pool.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(e.ctx, "LISTEN "+store.NotifyChannel); err != nil {
		t.Fatal(err)
	}

	// It publishes for its app, with the request's app named or left empty.
	tx, err := st.Pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	own := person("person-1", "Ada")
	anon := person("person-2", "Bob")
	anon.App = ""
	res, err := p.PublishTx(e.ctx, tx, own, anon)
	if err != nil || len(res) != 2 || res[0].Seq == 0 || res[1].Seq == 0 || res[0].Duplicate {
		t.Fatalf("PublishTx as the publisher role: %+v, %v", res, err)
	}
	// The key's stripe is locked until the transaction ends.
	_, err = e.store.Pool.Exec(e.ctx, `SELECT 1 FROM key_stripes
		WHERE type = 'contacts.person.updated' AND version = 1 FOR NO KEY UPDATE NOWAIT`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Errorf("the key's stripe while the publishing transaction is open: %v, want lock_not_available (55P03)", err)
	}
	pid := tx.Conn().PgConn().PID()
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	quiet, cancelQuiet := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancelQuiet()
	if n, err := testkit.WaitNotification(quiet, listener.Conn(), map[uint32]bool{pid: true}); err == nil {
		t.Errorf("herald_publish notified the relay (%+v): its commit would wait for every notifying transaction's", n)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE source_app = 'contacts' AND state = 'accepted'`); n != 2 {
		t.Fatalf("%d contacts events accepted, want 2", n)
	}

	publishTx := func(rs ...publish.Request) ([]publish.Result, error) {
		t.Helper()
		tx, err := st.Pool.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		res, err := p.PublishTx(e.ctx, tx, rs...)
		if err == nil {
			err = tx.Commit(e.ctx)
		}
		return res, err
	}
	// Again with the same id and content: a duplicate with the stored seq.
	own.ID = res[0].ID
	if again, err := publishTx(own); err != nil || !again[0].Duplicate || again[0].Seq != res[0].Seq {
		t.Fatalf("the same event again: %+v, %v", again, err)
	}
	// Another app's event, by its own name: refused, and recorded under the
	// role's app.
	invoice := publish.Request{App: "billing", Type: "billing.invoice.paid", Version: 1, Subject: "invoice-2", Data: []byte(`{}`)}
	if _, err := publishTx(invoice); !isRejection(err) || !strings.Contains(err.Error(), publish.CodeTypeNotOwned) {
		t.Fatalf("publish as billing: %v, want %s", err, publish.CodeTypeNotOwned)
	}
	// Another app's type under its own name: refused too.
	invoice.App = "contacts"
	if _, err := publishTx(invoice); !isRejection(err) {
		t.Fatalf("publish billing's type as contacts: %v, want a rejection", err)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE state = 'rejected' AND source_app = 'contacts'`); n != 2 {
		t.Errorf("%d rejections recorded under contacts, want 2", n)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE source_app = 'billing'`); n != 1 {
		t.Errorf("%d billing events, want only billing's own", n)
	}
	// Billing's event id is no obstacle (ids are unique per app) and tells
	// nothing of billing's event; the role's own id with other content is
	// a conflict.
	taken := person("person-3", "Cy")
	taken.ID = billing.ID
	if got, err := publishTx(taken); err != nil || got[0].Duplicate || got[0].Seq == billing.Seq {
		t.Fatalf("publish under billing's event id: %+v, %v; want a new event", got, err)
	}
	taken.Data = []byte(`{"name":"Dee"}`)
	if _, err := publishTx(taken); !isRejection(err) || !strings.Contains(err.Error(), publish.CodeIDConflict) {
		t.Fatalf("publish the same id with other content: %v, want %s", err, publish.CodeIDConflict)
	}
	// All or nothing: the conflict takes back the call's other event, and
	// the transaction commits without it.
	other := person("person-4", "Eve")
	other.ID = uuid.NewString()
	tx, err = st.Pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := p.PublishTx(e.ctx, tx, other, taken); !isRejection(err) || !strings.Contains(err.Error(), publish.CodeIDConflict) {
		t.Fatalf("publish a new event and a conflicting one: %v, want %s", err, publish.CodeIDConflict)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatalf("commit after the refused publish: %v", err)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE id = $1`, other.ID); n != 0 {
		t.Errorf("the new event beside a conflict was written (%d rows)", n)
	}

	// The function itself refuses another app's type, whatever the caller.
	_, err = st.Pool.Exec(e.ctx, `SELECT * FROM herald_publish(ARRAY[$1::uuid], ARRAY['billing.invoice.paid'], ARRAY[1],
		ARRAY['invoice-3'], ARRAY[0], ARRAY['{}'::bytea], ARRAY['h'], ARRAY[''], ARRAY[''], ARRAY[NULL::jsonb])`, uuid.NewString())
	wantPrivilegeError(t, "herald_publish of billing's type", err)

	// Nor a body that is not the app's own event: the body is what Herald
	// signs and delivers, so one naming another source, or too large, is
	// refused whatever the caller's own code checked.
	// The key's stripe rows as PublishTx computes them (store.keyStripe):
	// fine, 256 + FNV-1a mod 4096; coarse, FNV-1a mod 256.
	stripe := 256 + int32(keyHash("person-9")%4096)
	forge := func(body string) error {
		id := uuid.NewString()
		_, err := st.Pool.Exec(e.ctx, `SELECT * FROM herald_publish(ARRAY[$1::uuid], ARRAY['contacts.person.updated'], ARRAY[1],
			ARRAY['person-9'], ARRAY[$3::integer], ARRAY[convert_to(replace($2::text, 'ID', $1::text), 'UTF8')], ARRAY['h'], ARRAY[''], ARRAY[''], ARRAY[NULL::jsonb])`,
			id, body, stripe)
		return err
	}
	wantPrivilegeError(t, "herald_publish of a body naming billing as its source", forge(
		`{"id":"ID","source":"app:billing","type":"contacts.person.updated","subject":"person-9","dataversion":1}`))
	wantPrivilegeError(t, "herald_publish of a body of another type", forge(
		`{"id":"ID","source":"app:contacts","type":"billing.invoice.paid","subject":"person-9","dataversion":1}`))
	big := forge(`{"id":"ID","source":"app:contacts","type":"contacts.person.updated","subject":"person-9","dataversion":1,"data":"` +
		strings.Repeat("x", 300<<10) + `"}`)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(big, &pgErr) || pgErr.Code != "54000" {
		t.Errorf("herald_publish of a 300 KiB body: %v, want program_limit_exceeded (54000)", big)
	}
	if err := forge(`{"id":"ID","source":"app:contacts","type":"contacts.person.updated","subject":"person-9","dataversion":1}`); err != nil {
		t.Errorf("herald_publish of the app's own well-formed body: %v", err)
	}
	// Arrays must be lists counting from 1: the checks read every element,
	// the inserts the first n, so a body checked as element 0, or as [1][1]
	// of a 2-D array, is never the one written.
	for name, bodies := range map[string]string{
		"counting from 0": `array_fill(convert_to(replace($2::text, 'ID', $1::text), 'UTF8'), ARRAY[1], ARRAY[0])`,
		"of 2 dimensions": `ARRAY[ARRAY[convert_to(replace($2::text, 'ID', $1::text), 'UTF8')]]`,
	} {
		id := uuid.NewString()
		_, err := st.Pool.Exec(e.ctx, `SELECT * FROM herald_publish(ARRAY[$1::uuid], ARRAY['contacts.person.updated'], ARRAY[1],
			ARRAY['person-9'], ARRAY[$3::integer], `+bodies+`, ARRAY['h'], ARRAY[''], ARRAY[''], ARRAY[NULL::jsonb])`,
			id, `{"id":"ID","source":"app:contacts","type":"contacts.person.updated","subject":"person-9","dataversion":1}`, stripe)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("herald_publish of a body array %s: %v, want invalid_parameter_value (22023)", name, err)
		}
		if n := e.countRows(`SELECT count(*) FROM events WHERE id = $1`, id); n != 0 {
			t.Errorf("herald_publish of a body array %s wrote %d events", name, n)
		}
	}
	// A caller of a release before migration 0032 passes the key's coarse
	// stripe (0-255). This database keeps no coarse rows (a new one), so
	// it is refused, not let through without a lock.
	stripe = int32(keyHash("person-9") % 256)
	older := forge(`{"id":"ID","source":"app:contacts","type":"contacts.person.updated","subject":"person-9","dataversion":1}`)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(older, &pgErr) || pgErr.Code != "55000" || !strings.Contains(pgErr.Message, "upgrade") {
		t.Errorf("herald_publish of an older caller's coarse stripe on a database without coarse rows: %v, want 55000 saying to upgrade", older)
	}

	// Nothing else: no tokens, endpoints, subscriptions, audit, events, or
	// its own mapping.
	for _, sql := range []string{
		`INSERT INTO api_tokens (id, app, name, hash, created_by) VALUES ('t1', 'billing', 'x', '\x00', 'mallory')`,
		`SELECT count(*) FROM api_tokens`,
		`UPDATE apps SET endpoint = 'http://mallory' WHERE id = 'billing'`,
		`SELECT endpoint FROM apps`,
		`SELECT count(*) FROM subscriptions`,
		`INSERT INTO audit (action, outcome, target_type, target_id) VALUES ('forged', 'allowed', 'app', 'billing')`,
		`SELECT count(*) FROM audit`,
		`SELECT count(*) FROM events WHERE source_app = 'billing'`,
		`INSERT INTO events (id, source_app, type, state) VALUES (gen_random_uuid(), 'billing', 'billing.invoice.paid', 'rejected')`,
		`UPDATE publisher_roles SET app = 'billing'`,
		`INSERT INTO publisher_roles (role, app) VALUES ('x', 'billing')`,
		`SELECT 1 FROM key_stripes LIMIT 1 FOR NO KEY UPDATE`,
		`SELECT count(*) FROM outcomes`,
	} {
		_, err := st.Pool.Exec(e.ctx, sql)
		wantPrivilegeError(t, sql, err)
	}
}

func isRejection(err error) bool {
	_, ok := publish.IsRejection(err)
	return ok
}

// TestPublishTxKeepsEachConnectionsRole: one Publisher given transactions
// of Herald's role and of a publisher role, in turns, treats each as its own
// role: the answer it keeps per connection is not another connection's.
func TestPublishTxKeepsEachConnectionsRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleStore, err := store.Open(e.ctx, e.grantedPublisherRole(documentedPublisherGrants(t)), store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(roleStore.Close)
	p := e.publisher(publish.Options{CacheTTL: time.Hour})
	invoice := func(n int) publish.Request {
		return publish.Request{App: "billing", Type: "billing.invoice.paid", Version: 1,
			Subject: fmt.Sprintf("invoice-%d", n), Data: []byte(`{}`)}
	}
	publishIn := func(st *store.Store, r publish.Request) error { t.Helper(); return publishCommitted(t, e, p, st, r) }
	for round := range 3 {
		// Herald's role publishes any app's events; the publisher role
		// only contacts'.
		if err := publishIn(e.store, invoice(round)); err != nil {
			t.Fatalf("round %d: billing's event in Herald's role's transaction: %v", round, err)
		}
		if err := publishIn(roleStore, invoice(100+round)); !isRejection(err) || !strings.Contains(err.Error(), publish.CodeTypeNotOwned) {
			t.Fatalf("round %d: billing's event in the publisher role's transaction: %v, want %s", round, err, publish.CodeTypeNotOwned)
		}
		if err := publishIn(roleStore, person(fmt.Sprintf("person-%d", round), "Ada")); err != nil {
			t.Fatalf("round %d: the publisher role's own event: %v", round, err)
		}
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE state = 'accepted'`); n != 6 {
		t.Errorf("%d events accepted, want 6", n)
	}
}

// TestPublishTxRoleMovedWithinTheCacheTTL: a connection's kept answer
// outlives a move of its role to another app for at most the TTL, and
// fails closed meanwhile: the role's old app's events are refused (by the
// database), none is written; after the TTL the connection publishes for
// the new app and is refused the old one's types.
func TestPublishTxRoleMovedWithinTheCacheTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleURL := e.grantedPublisherRole(documentedPublisherGrants(t))
	roleStore, err := store.Open(e.ctx, roleURL, store.Options{MaxConns: 1}) // one connection: the one asked
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(roleStore.Close)
	var mu sync.Mutex
	now := fixedNow
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := publish.New(roleStore, publish.Options{Now: clock, CacheTTL: time.Minute})
	publishIn := func(r publish.Request) error { t.Helper(); return publishCommitted(t, e, p, roleStore, r) }
	if err := publishIn(person("person-1", "Ada")); err != nil {
		t.Fatalf("publish as contacts' role: %v", err)
	}
	u, err := url.Parse(roleURL)
	if err != nil {
		t.Fatal(err)
	}
	role := u.User.Username()
	e.exec(`UPDATE publisher_roles SET app = 'billing' WHERE role = $1`, role)
	moved := person("person-2", "Bob")
	moved.ID = uuid.NewString()
	if err := publishIn(moved); err == nil {
		t.Fatal("contacts' event published by a role moved to billing, within the cache TTL")
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE id = $1 AND state <> 'rejected'`, moved.ID); n != 0 {
		t.Errorf("the refused event was written (%d rows)", n)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	invoice := publish.Request{App: "billing", Type: "billing.invoice.paid", Version: 1, Subject: "invoice-1", Data: []byte(`{}`)}
	if err := publishIn(invoice); err != nil {
		t.Fatalf("publish billing's event after the TTL: %v", err)
	}
	if err := publishIn(person("person-3", "Cy")); !isRejection(err) || !strings.Contains(err.Error(), publish.CodeTypeNotOwned) {
		t.Fatalf("publish contacts' event after the TTL: %v, want %s", err, publish.CodeTypeNotOwned)
	}
}

// publishCommitted publishes r with p.PublishTx in a transaction of st's
// and commits it, returning the publish's or the commit's error.
func publishCommitted(t *testing.T, e *env, p *publish.Publisher, st *store.Store, r publish.Request) error {
	t.Helper()
	tx, err := st.Pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := p.PublishTx(e.ctx, tx, r); err != nil {
		return err
	}
	return tx.Commit(e.ctx)
}

// TestPublisherRoleBesideAnOlderCaller: on a database that keeps the coarse
// stripe rows (upgraded from before migration 0032), herald_publish takes a
// caller of an older release (coarse stripes) and holds the key's coarse
// row until its transaction ends, and PublishTx of this release through the
// same role waits for it: both lock the key's coarse row.
func TestPublisherRoleBesideAnOlderCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleURL := e.grantedPublisherRole(documentedPublisherGrants(t))
	// As an upgraded database has them (the test's database is new).
	if _, err := e.store.Pool.Exec(e.ctx, `UPDATE key_stripe_scheme SET coarse = true`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Pool.Exec(e.ctx, `INSERT INTO key_stripes (type, version, stripe)
		SELECT 'contacts.person.updated', 1, s FROM generate_series(0, 255) AS s`); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(e.ctx, roleURL, store.Options{MaxConns: 3})
	if err != nil {
		t.Fatalf("open as the publisher role: %v", err)
	}
	t.Cleanup(st.Close)

	older, err := st.Pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(context.Background())
	id := uuid.NewString()
	if _, err := older.Exec(e.ctx, `SELECT * FROM herald_publish(ARRAY[$1::uuid], ARRAY['contacts.person.updated'], ARRAY[1],
		ARRAY['person-1'], ARRAY[$2::integer], ARRAY[convert_to($3::text, 'UTF8')], ARRAY['h'], ARRAY[''], ARRAY[''], ARRAY[NULL::jsonb])`,
		id, int32(keyHash("person-1")%256),
		`{"id":"`+id+`","source":"app:contacts","type":"contacts.person.updated","subject":"person-1","dataversion":1}`); err != nil {
		t.Fatalf("herald_publish of an older caller on a database keeping coarse rows: %v", err)
	}

	p := publish.New(st, publish.Options{})
	done := make(chan error, 1)
	go func() {
		tx, err := st.Pool.Begin(e.ctx)
		if err != nil {
			done <- err
			return
		}
		defer tx.Rollback(context.Background())
		if _, err := p.PublishTx(e.ctx, tx, person("person-1", "Ada")); err != nil {
			done <- err
			return
		}
		done <- tx.Commit(e.ctx)
	}()
	select {
	case err := <-done:
		t.Fatalf("PublishTx of the key did not wait for the older caller's open transaction: %v", err)
	case <-time.After(400 * time.Millisecond):
	}
	if err := older.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("PublishTx after the older caller committed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PublishTx still waiting 10 s after the older caller committed")
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE source_app = 'contacts' AND subject = 'person-1'`); n != 2 {
		t.Errorf("%d events of person-1, want 2", n)
	}
}

// keyHash is FNV-1a of a subject, which store.keyStripe maps to a key's
// stripe rows (docs/design.md, Key locks).
func keyHash(subject string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(subject))
	return h.Sum64()
}

// TestPublisherRoleMissingStripeRow: herald_publish refuses a key whose
// fine stripe row is missing, naming the row, and writes nothing, for one
// event and for several across two types (whose rows it locks type by
// type). The transaction goes on, with what it published before: one
// event, on a connection whose statements that publish prepared, is left
// unwritten by herald_publish_fast and refused under the savepoint.
func TestPublisherRoleMissingStripeRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleStore := e.publisherRoleStore(t)
	p := publish.New(roleStore, publish.Options{})
	gone := 256 + int(keyHash("person-gone")%4096)
	e.exec(`DELETE FROM key_stripes WHERE type = 'contacts.person.updated' AND version = 1 AND stripe = $1`, gone)
	blob := publish.Request{App: "contacts", Type: "contacts.blob.stored", Version: 1, Subject: "blob-1", Data: []byte(`{}`)}
	for _, rs := range [][]publish.Request{
		{person("person-gone", "Gone")},
		{blob, person("person-here", "Here"), person("person-gone", "Gone")},
	} {
		for i := range rs {
			rs[i].ID = uuid.NewString()
		}
		err := e.publishAfterAnother(roleStore, p, rs...)
		want := fmt.Sprintf("ordering-key stripe row %d missing for contacts.person.updated@1", gone)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "55000" || !strings.Contains(pgErr.Message, want) {
			t.Errorf("publish of %d events, one to a key without its stripe row: %v; want 55000 saying %q", len(rs), err, want)
		}
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = r.ID
		}
		if n := e.countRows(`SELECT count(*) FROM events WHERE id = ANY($1::uuid[])`, ids); n != 0 {
			t.Errorf("%d events written by a refused publish", n)
		}
	}
}

// TestPublisherRoleBodyJSONBRefuses: data the publisher accepts but
// PostgreSQL's jsonb refuses (the escape \u0000, a lone surrogate) is
// refused by herald_publish under the savepoint, on a connection that has
// published before too (where one event otherwise takes no savepoint), so
// the transaction goes on with what it published before.
func TestPublisherRoleBodyJSONBRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleStore := e.publisherRoleStore(t)
	p := publish.New(roleStore, publish.Options{})
	for i, data := range []string{`{"name":"nul\u0000"}`, `{"name":"half \ud800"}`} {
		r := person(fmt.Sprintf("person-odd-%d", i), "")
		r.Data = []byte(data)
		err := e.publishAfterAnother(roleStore, p, r)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "22P05" && pgErr.Code != "22P02") {
			t.Errorf("data %s: %v; want PostgreSQL's jsonb refusal", data, err)
		}
	}
}

// publishAfterAnother publishes, in one transaction of st's, a well-formed
// event (which prepares the connection's statements when it is new), then
// rs, and commits; it returns rs's publish's error. The transaction must
// commit with the first event whatever became of rs.
func (e *env) publishAfterAnother(st *store.Store, p *publish.Publisher, rs ...publish.Request) error {
	e.t.Helper()
	tx, err := st.Pool.Begin(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	before := person("person-before", "Before")
	before.ID = uuid.NewString()
	if _, err := p.PublishTx(e.ctx, tx, before); err != nil {
		e.t.Fatal(err)
	}
	_, err = p.PublishTx(e.ctx, tx, rs...)
	if cerr := tx.Commit(e.ctx); cerr != nil {
		e.t.Fatalf("commit after the publish: %v (its error: %v)", cerr, err)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE id = $1`, before.ID); n != 1 {
		e.t.Errorf("the event published before in the transaction: %d written, want 1", n)
	}
	return err
}

// publisherRoleStore opens a store, closed at the end of the test, that
// connects as a new publisher role of contacts with the documented grants.
func (e *env) publisherRoleStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(e.ctx, e.grantedPublisherRole(documentedPublisherGrants(t)), store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestPublisherRoleLocksInOrder: herald_publish locks its keys' stripe rows
// in ascending order whatever the order of the call's events, as Herald's
// own publishers do, so the two never deadlock. With the higher of two
// rows held by a transaction of Herald's role, a publisher role's call of
// both keys (the higher first) holds the lower row while it waits.
func TestPublisherRoleLocksInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	roleStore := e.publisherRoleStore(t)
	stripe := func(subject string) int { return 256 + int(keyHash(subject)%4096) }
	low, high := "person-a", ""
	for i := 0; high == ""; i++ {
		if s := fmt.Sprintf("person-b-%d", i); stripe(s) > stripe(low) {
			high = s
		}
	}
	holder := e.begin()
	if _, err := e.publisher(publish.Options{}).PublishTx(e.ctx, holder, person(high, "Held")); err != nil {
		t.Fatal(err)
	}
	tx, err := roleStore.Pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := publish.New(roleStore, publish.Options{}).PublishTx(e.ctx, tx, person(high, "High"), person(low, "Low"))
		if err == nil {
			err = tx.Commit(e.ctx)
		}
		done <- err
	}()
	lowHeld := func() bool {
		tx := e.begin()
		defer tx.Rollback(context.Background())
		_, err := tx.Exec(e.ctx, `SELECT 1 FROM key_stripes WHERE type = 'contacts.person.updated' AND version = 1 AND stripe = $1
			FOR NO KEY UPDATE NOWAIT`, stripe(low))
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return true
		} else if err != nil {
			t.Fatal(err)
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lowHeld() {
		select {
		case err := <-done:
			t.Fatalf("the publisher role's call ended (%v) while its higher row was held", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the publisher role's call waits for row %d without holding row %d: it does not lock in ascending order", stripe(high), stripe(low))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := holder.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the publisher role's call after the row was released: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the publisher role's call still waits after the row was released")
	}
}

// TestHeraldPublishRefusesOneEventAsSeveral: herald_publish checks one
// event by its elements and several through their arrays (migration 0034):
// each refusal, and which of two refusals wins, is the same whether the
// refused event is the call's only one or the second of two, and neither
// call writes anything.
func TestHeraldPublishRefusesOneEventAsSeveral(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st, err := store.Open(e.ctx, e.grantedPublisherRole(documentedPublisherGrants(t)), store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	// call is one herald_publish argument set, one element an event.
	type call struct {
		ids, subjects               []*string
		types, hashes, vias, tokens []string
		versions                    []int32
		stripes                     []*int32
		envelopes                   [][]byte
		traces                      []*string
	}
	body := func(id, source, typ, subject string, version int) []byte {
		return fmt.Appendf(nil, `{"id":%q,"source":%q,"type":%q,"subject":%q,"dataversion":%d,"data":{}}`,
			id, source, typ, subject, version)
	}
	// event is contacts' own well-formed event under subject, as element i.
	event := func(c *call, subject string) int {
		id := uuid.NewString()
		stripe := 256 + int32(keyHash(subject)%4096)
		c.ids = append(c.ids, &id)
		c.types = append(c.types, "contacts.person.updated")
		c.versions = append(c.versions, 1)
		c.subjects = append(c.subjects, &subject)
		c.stripes = append(c.stripes, &stripe)
		c.envelopes = append(c.envelopes, body(id, "app:contacts", "contacts.person.updated", subject, 1))
		c.hashes = append(c.hashes, "h-"+id)
		c.vias = append(c.vias, "")
		c.tokens = append(c.tokens, "")
		c.traces = append(c.traces, nil)
		return len(c.ids) - 1
	}
	publishCall := func(c call) error {
		rows, err := st.Pool.Query(e.ctx, `SELECT * FROM herald_publish($1::uuid[], $2, $3, $4, $5, $6, $7, $8, $9, $10::text[]::jsonb[])`,
			c.ids, c.types, c.versions, c.subjects, c.stripes, c.envelopes, c.hashes, c.vias, c.tokens, c.traces)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}
	big := func(c *call, i int) {
		c.envelopes[i] = append(c.envelopes[i][:len(c.envelopes[i])-1], `,"x":"`+strings.Repeat("x", 300<<10)+`"}`...)
	}
	source := func(c *call, i int) {
		c.envelopes[i] = body(*c.ids[i], "app:billing", c.types[i], *c.subjects[i], 1)
	}
	member := func(m string) func(c *call, i int) {
		return func(c *call, i int) {
			c.envelopes[i] = append(c.envelopes[i][:len(c.envelopes[i])-1], ","+m+"}"...)
		}
	}
	subjectKey := func(k string) func(c *call, i int) {
		return func(c *call, i int) {
			c.subjects[i] = &k
			c.envelopes[i] = body(*c.ids[i], "app:contacts", c.types[i], k, 1)
		}
	}
	trace := func(json string) func(c *call, i int) { return func(c *call, i int) { c.traces[i] = &json } }
	stripe := func(s int32) func(c *call, i int) { return func(c *call, i int) { c.stripes[i] = &s } }
	cases := []struct {
		name  string
		spoil func(c *call, i int)
		code  string
	}{
		{"another app's type", func(c *call, i int) {
			c.types[i] = "billing.invoice.paid"
			c.envelopes[i] = body(*c.ids[i], "app:contacts", c.types[i], *c.subjects[i], 1)
		}, "42501"},
		{"a body naming another source", source, "42501"},
		{"a body naming another id", func(c *call, i int) {
			c.envelopes[i] = body(uuid.NewString(), "app:contacts", c.types[i], *c.subjects[i], 1)
		}, "42501"},
		{"a body naming another type", func(c *call, i int) {
			c.envelopes[i] = body(*c.ids[i], "app:contacts", "contacts.person.removed", *c.subjects[i], 1)
		}, "42501"},
		{"a body naming another subject", func(c *call, i int) {
			c.envelopes[i] = body(*c.ids[i], "app:contacts", c.types[i], "someone-else", 1)
		}, "42501"},
		{"a body naming another version", func(c *call, i int) {
			c.envelopes[i] = body(*c.ids[i], "app:contacts", c.types[i], *c.subjects[i], 2)
		}, "42501"},
		{"a body that is not an object", func(c *call, i int) { c.envelopes[i] = []byte(`[1]`) }, "42501"},
		// Members a case-blind decoder (Go's encoding/json) reads as the
		// source or the type, after the ones checked (migration 0039).
		{"a body with a Source member too", member(`"Source":"app:billing"`), "42501"},
		{"a body with a Type member too", member(`"TYPE":"billing.invoice.paid"`), "42501"},
		{"a body with a long-s source member too", member(`"ſource":"app:billing"`), "42501"},
		{"a body that is not JSON", func(c *call, i int) { c.envelopes[i] = []byte(`{"id":`) }, "22P02"},
		{"no body", func(c *call, i int) { c.envelopes[i] = nil }, "54000"},
		{"a body over 256 KiB", big, "54000"},
		{"a stripe out of range", stripe(4352), "22023"},
		{"a negative stripe", stripe(-1), "22023"},
		{"no stripe", func(c *call, i int) { c.stripes[i] = nil }, "22023"},
		{"one hash too few", func(c *call, i int) { c.hashes = c.hashes[:len(c.hashes)-1] }, "22023"},
		// Rows the relay could not read (migration 0034): no id or no
		// subject, with a body naming none either; a trace context not an
		// object of strings, or too large.
		{"no id", func(c *call, i int) {
			c.envelopes[i] = []byte(`{"source":"app:contacts","type":"contacts.person.updated","subject":"` + *c.subjects[i] + `","dataversion":1}`)
			c.ids[i] = nil
		}, "22023"},
		// Subject keys Herald's publishers refuse (migration 0040): the
		// body names the same key, so only the key's rule refuses.
		{"an empty subject key", subjectKey(""), "22023"},
		{"a subject key over 200 bytes", subjectKey(strings.Repeat("k", 201)), "22023"},
		{"a subject key with a line break", subjectKey("person\n42"), "22023"},
		{"a subject key with a right-to-left override", subjectKey("person-\u202e24"), "22023"},
		{"a subject key with a no-break space", subjectKey("person\u00a042"), "22023"},
		{"a subject key over 200 bytes, another app's type", func(c *call, i int) {
			subjectKey(strings.Repeat("k", 201))(c, i)
			c.types[i] = "billing.invoice.paid"
		}, "22023"},
		{"no subject", func(c *call, i int) {
			c.envelopes[i] = []byte(`{"id":"` + *c.ids[i] + `","source":"app:contacts","type":"contacts.person.updated","dataversion":1}`)
			c.subjects[i] = nil
		}, "22023"},
		{"a trace context of a number", trace(`{"traceparent":1}`), "22023"},
		{"a trace context that is not an object", trace(`["00-x"]`), "22023"},
		{"a trace context of JSON null", trace(`null`), "22023"},
		{"a trace context over 32 KiB", trace(`{"tracestate":"` + strings.Repeat("x", 32<<10) + `"}`), "22023"},
		// Which refusal wins: the declarations, then the bodies' sizes,
		// then their contents, then the stripes.
		{"another app's type in an oversized body", func(c *call, i int) { c.types[i] = "billing.invoice.paid"; big(c, i) }, "42501"},
		{"an oversized body naming another source", func(c *call, i int) { source(c, i); big(c, i) }, "54000"},
		{"a body naming another source, stripe out of range", func(c *call, i int) { source(c, i); stripe(5000)(c, i) }, "42501"},
		{"a stripe out of range, a trace context of a number", func(c *call, i int) { stripe(5000)(c, i); trace(`{"a":1}`)(c, i) }, "22023"},
		{"no id, another app's type", func(c *call, i int) { c.ids[i] = nil; c.types[i] = "billing.invoice.paid" }, "22023"},
	}
	written := func(c call) int {
		return e.countRows(`SELECT count(*) FROM events WHERE id = ANY($1::uuid[]) OR subject = ANY($2)`, c.ids, c.subjects)
	}
	// fastCall is the same call of one event to herald_publish_fast
	// (migration 0036), in a transaction: the sequence number it answered
	// (0 for NULL), the error it raised, and whether the transaction went
	// on (after NULL, it must).
	fastCall := func(c call) (seq int64, usable bool, err error) {
		tx, err := st.Pool.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(e.ctx)
		var got *int64
		err = tx.QueryRow(e.ctx, `SELECT herald_publish_fast($1::uuid, $2, $3, $4, $5, $6, $7, $8::text::jsonb)`,
			c.ids[0], c.types[0], c.versions[0], c.subjects[0], c.stripes[0], c.envelopes[0], c.hashes[0], c.traces[0]).Scan(&got)
		var one int
		usable = tx.QueryRow(e.ctx, `SELECT 1`).Scan(&one) == nil
		if got != nil {
			seq = *got
		}
		if err := tx.Commit(e.ctx); err != nil && usable {
			t.Fatal(err)
		}
		return seq, usable, err
	}
	// oneEach reports whether every argument of c holds one event, as
	// herald_publish_fast takes them.
	oneEach := func(c call) bool {
		return len(c.ids) == 1 && len(c.types) == 1 && len(c.versions) == 1 && len(c.subjects) == 1 && len(c.stripes) == 1 &&
			len(c.envelopes) == 1 && len(c.hashes) == 1 && len(c.traces) == 1
	}
	// fastWritesNothing wants herald_publish_fast to answer NULL for c,
	// write nothing and leave the transaction usable.
	fastWritesNothing := func(what string, c call) {
		t.Helper()
		if seq, usable, err := fastCall(c); err != nil || seq != 0 || !usable || written(c) != 0 {
			t.Errorf("herald_publish_fast %s: %d, %v, usable %v, %d written; want NULL and nothing", what, seq, err, usable, written(c))
		}
	}
	// publishRefuses wants herald_publish to refuse c with SQLSTATE code.
	publishRefuses := func(what string, c call, code string) {
		t.Helper()
		if err, pgErr := publishCall(c), (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != code {
			t.Errorf("herald_publish %s: %v, want SQLSTATE %s", what, err, code)
		}
	}
	for n, tc := range cases {
		for _, several := range []bool{false, true} {
			var c call
			if several {
				event(&c, fmt.Sprintf("good-%d", n))
			}
			tc.spoil(&c, event(&c, fmt.Sprintf("bad-%d", n)))
			err := publishCall(c)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != tc.code {
				t.Errorf("%s (several: %v): %v, want SQLSTATE %s", tc.name, several, err, tc.code)
			}
			// herald_publish_fast inserts nothing where herald_publish
			// refuses, and leaves the transaction usable; a body that is
			// not JSON fails its cast, raised as from herald_publish.
			if !several && oneEach(c) {
				seq, usable, ferr := fastCall(c)
				if tc.code == "22P02" {
					if !errors.As(ferr, &pgErr) || pgErr.Code != tc.code {
						t.Errorf("%s: herald_publish_fast: %v, want SQLSTATE %s raised", tc.name, ferr, tc.code)
					}
				} else if ferr != nil || seq != 0 || !usable {
					t.Errorf("%s: herald_publish_fast answered %d (%v), transaction usable %v; want NULL", tc.name, seq, ferr, usable)
				}
			}
			if got := written(c); got != 0 {
				t.Errorf("%s (several: %v): %d events written", tc.name, several, got)
			}
		}
	}
	// A role whose app was removed is refused first, whatever the body
	// (here not JSON), also where the removed app's declaration is live.
	u, err := url.Parse(st.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE publisher_roles SET app = 'gone' WHERE role = $1`, u.User.Username())
	for _, several := range []bool{false, true} {
		var c call
		if several {
			event(&c, "gone-good")
		}
		i := event(&c, "gone-bad")
		c.types[i] = "gone.thing.happened"
		c.envelopes[i] = []byte(`{"id":`)
		err := publishCall(c)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "no live app") {
			t.Errorf("a removed app's role (several: %v): %v, want 42501 for no live app", several, err)
		}
		if !several {
			if seq, usable, err := fastCall(c); err != nil || seq != 0 || !usable {
				t.Errorf("a removed app's role: herald_publish_fast answered %d (%v), usable %v; want NULL", seq, err, usable)
			}
		}
	}
	e.exec(`UPDATE publisher_roles SET app = 'contacts' WHERE role = $1`, u.User.Username())
	// The same calls unspoiled publish: one event, and two, with a trace
	// context.
	for _, count := range []int{1, 2} {
		var c call
		for i := range count {
			event(&c, fmt.Sprintf("fine-%d-%d", count, i))
			trace(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v"}`)(&c, i)
		}
		if err := publishCall(c); err != nil {
			t.Fatalf("%d well-formed events: %v", count, err)
		}
		if got := written(c); got != count {
			t.Errorf("%d well-formed events: %d written", count, got)
		}
	}
	// With the coarse stripes kept (a publisher of an older release may
	// hold a key's coarse row), it writes nothing and locks nothing: the
	// slow way locks both rows.
	e.exec(`UPDATE key_stripe_scheme SET coarse = true`)
	var kept call
	event(&kept, "fine-coarse-kept")
	fastWritesNothing("with coarse stripes kept", kept)
	e.exec(`UPDATE key_stripe_scheme SET coarse = false`)
	// A coarse stripe (a library from before migration 0032) publishes
	// nothing either way on a database that keeps no coarse rows, as this
	// new one: herald_publish says which library to upgrade (where coarse
	// rows are kept it publishes, TestPublisherRoleBesideAnOlderCaller).
	var coarse call
	stripe(255)(&coarse, event(&coarse, "fine-coarse-stripe"))
	publishRefuses("of an event on a coarse stripe", coarse, "55000")
	fastWritesNothing("of an event on a coarse stripe", coarse)
	// A retired declaration publishes nothing either way: herald_publish
	// refuses it, herald_publish_fast answers NULL.
	e.exec(`UPDATE declarations SET retired_at = now() WHERE type = 'contacts.person.updated' AND version = 1`)
	var retired call
	event(&retired, "fine-retired")
	publishRefuses("of a retired declaration's event", retired, "42501")
	fastWritesNothing("of a retired declaration's event", retired)
	e.exec(`UPDATE declarations SET retired_at = NULL WHERE type = 'contacts.person.updated' AND version = 1`)
	// herald_publish_fast publishes one well-formed event, with its trace
	// context, and answers NULL for its id taken.
	var c call
	event(&c, "fine-fast")
	trace(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)(&c, 0)
	if seq, _, err := fastCall(c); err != nil || seq == 0 || written(c) != 1 {
		t.Errorf("herald_publish_fast of a well-formed event: %d, %v, %d written; want it published", seq, err, written(c))
	}
	if seq, usable, err := fastCall(c); err != nil || seq != 0 || !usable || written(c) != 1 {
		t.Errorf("herald_publish_fast of the same event again: %d, %v, usable %v, %d written; want NULL and nothing more", seq, err, usable, written(c))
	}
}

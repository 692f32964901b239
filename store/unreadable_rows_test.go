package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/store"
)

// insertEventRow writes a row of contacts.person.updated into the event log
// as the owner, bypassing every publisher's checks, with the columns given.
func insertEventRow(s *store.Store, state string, id, subject, version, trace any) error {
	_, err := s.Pool.Exec(context.Background(), `INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state, trace_context)
		VALUES ($1, 'contacts', 'contacts.person.updated', $2, $3, '\x7b7d', 'h', $4, $5)`, id, version, subject, state, trace)
	return err
}

// TestUpgradeHealsRowsTheRelayCannotRead: accepted events a publisher role
// could write before migration 0034 (no id, no subject; a trace context
// not an object of strings), at which the relay's read failed at every
// round, are refused (no id or subject) or lose their trace context on the
// upgrade, and the relay reads the log past them.
func TestUpgradeHealsRowsTheRelayCannotRead(t *testing.T) {
	ctx := context.Background()
	s := openStoreAt(t, 33)
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	insert := func(id, subject, trace any) {
		t.Helper()
		if err := insertEventRow(s, "accepted", id, subject, 1, trace); err != nil {
			t.Fatal(err)
		}
	}
	good, traced := "0b6e1f36-5f8d-4d7e-9a51-000000000001", "0b6e1f36-5f8d-4d7e-9a51-000000000002"
	insert(nil, "no-id", nil)
	insert("0b6e1f36-5f8d-4d7e-9a51-000000000003", nil, nil)
	insert(traced, "bad-trace", `{"traceparent":1}`)
	insert(good, "good", `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)
	if _, err := s.Undispatched(ctx, 100, 0); err == nil {
		t.Fatal("the relay read the log at 0033 past rows it cannot scan: the test's rows are not the defect's")
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pending, err := s.Undispatched(ctx, 100, 0)
	if err != nil {
		t.Fatalf("the relay's read after the upgrade: %v", err)
	}
	got := map[string]store.TraceContext{}
	for _, ev := range pending {
		got[ev.ID] = ev.TraceContext
	}
	if len(pending) != 2 || got[traced] != nil || got[good]["traceparent"] == "" {
		t.Errorf("pending after the upgrade = %+v, want the good event with its trace and the other without", pending)
	}
	rows, err := s.Pool.Query(ctx, `SELECT coalesce(subject, ''), code FROM events WHERE state = 'rejected' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	codes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var subject, code string
		err := r.Scan(&subject, &code)
		return subject + ":" + code, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "no-id:id_invalid,:subject_invalid"; strings.Join(codes, ",") != want {
		t.Errorf("refused on the upgrade: %v, want %s", codes, want)
	}
	// The constraint (0035's, judged by 0037's function since), added NOT
	// VALID, holds for the healed rows too.
	if _, err := s.Pool.Exec(ctx, `ALTER TABLE events VALIDATE CONSTRAINT events_accepted_readable`); err != nil {
		t.Errorf("validate the readable-event constraint after the heal: %v", err)
	}
}

// TestAcceptedEventsMustBeReadable: migration 0035's constraint (judged by
// 0037's function) refuses an accepted event the relay could not read from
// any writer, here the owner writing the table itself: no id, subject or
// version, or a trace context that herald_publish (0034) refuses, which it
// judges alike, value by value. Other states are not the relay's to read,
// and pass.
func TestAcceptedEventsMustBeReadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStoreAt(t, 0)
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	n := 0
	insert := func(state string, id, subject, version, trace any) error {
		n++
		if id == "new" {
			id = fmt.Sprintf("0b6e1f36-5f8d-4d7e-9a51-%012d", n)
		}
		return insertEventRow(s, state, id, subject, version, trace)
	}
	refused := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.ConstraintName == "events_accepted_readable"
	}
	for _, c := range []struct {
		name                 string
		id, subject, version any
	}{{"no id", nil, "s", 1}, {"no subject", "new", nil, 1}, {"no version", "new", "s", nil}} {
		if err := insert("accepted", c.id, c.subject, c.version, nil); !refused(err) {
			t.Errorf("an accepted event with %s: %v, want the constraint's refusal", c.name, err)
		}
		for _, state := range []string{"rejected", "dispatched"} {
			if err := insert(state, c.id, c.subject, c.version, `{"traceparent":1}`); err != nil {
				t.Errorf("a %s event with %s: %v, want it written", state, c.name, err)
			}
		}
	}
	// herald_publish's judgement of a trace context: 0034's predicate, as
	// its check and its heal of the old rows spell it.
	const publishRefuses = `SELECT CASE WHEN jsonb_typeof(t) <> 'object' OR octet_length(t::text) > 32768 THEN true
		ELSE EXISTS (SELECT 1 FROM jsonb_each(t) AS x WHERE jsonb_typeof(x.value) <> 'string') END FROM (SELECT $1::jsonb AS t) v`
	for _, trace := range []string{
		`{}`, `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v"}`,
		`{"a":""}`, `{"a":"x","b":"y","c":"z"}`, `{"tracestate":"` + strings.Repeat("x", 32<<10-18) + `"}`, // 32,768 bytes as jsonb's text
		`{"a":1}`, `{"a":1.5}`, `{"a":true}`, `{"a":null}`, `{"a":["x"]}`, `{"a":[]}`, `{"a":{"b":"c"}}`, `{"a":{}}`,
		`{"a":"x","b":2}`, `["x"]`, `[]`, `[{"a":"x"}]`, `"x"`, `1`, `null`, `true`,
		`{"tracestate":"` + strings.Repeat("x", 32<<10-17) + `"}`, // one byte more
	} {
		var want bool
		if err := s.Pool.QueryRow(ctx, publishRefuses, trace).Scan(&want); err != nil {
			t.Fatal(err)
		}
		err := insert("accepted", "new", "s", 1, trace)
		if got := refused(err); got != want || (err != nil && !got) {
			t.Errorf("an accepted event with trace context %.40s: %v; herald_publish refuses it: %v", trace, err, want)
		}
	}
	if err := insert("accepted", "new", "s", 1, nil); err != nil {
		t.Errorf("an accepted event without a trace context: %v", err)
	}
	// An update is held to it too: that event given a bad trace context.
	if _, err := s.Pool.Exec(ctx, `UPDATE events SET trace_context = '{"traceparent":1}' WHERE id = $1`,
		fmt.Sprintf("0b6e1f36-5f8d-4d7e-9a51-%012d", n)); !refused(err) {
		t.Errorf("an update giving an accepted event a trace context of a number: %v, want the constraint's refusal", err)
	}
	if _, err := s.Undispatched(ctx, 100, 0); err != nil {
		t.Errorf("the relay's read of what the constraint let in: %v", err)
	}
}

// TestReadableCheckIgnoresSearchPath: a session whose search_path puts a
// schema of its own before pg_catalog, with operators and functions of the
// names the check uses that would let every row through, still has its
// unreadable rows refused (0037's function names pg_catalog's; 0035's
// expression was stored with its objects resolved).
func TestReadableCheckIgnoresSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStoreAt(t, 0)
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	var schema string
	if err := s.Pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	shadow := schema + "_shadow"
	t.Cleanup(func() { _, _ = s.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+shadow+` CASCADE`) })
	for _, stmt := range []string{
		`CREATE SCHEMA ` + shadow,
		`CREATE FUNCTION ` + shadow + `.always(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'`,
		`CREATE FUNCTION ` + shadow + `.never(integer, integer) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false'`,
		`CREATE OPERATOR ` + shadow + `.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = ` + shadow + `.always)`,
		`CREATE OPERATOR ` + shadow + `.> (LEFTARG = integer, RIGHTARG = integer, FUNCTION = ` + shadow + `.never)`,
		`CREATE FUNCTION ` + shadow + `.jsonb_typeof(jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT ''object'''`,
		`CREATE FUNCTION ` + shadow + `.jsonb_path_exists(jsonb, jsonpath) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false'`,
	} {
		if _, err := s.Pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A connection of its own: PL/pgSQL plans the function's body once a
	// session, with the session's search_path.
	if _, err := conn.Exec(ctx, `SET search_path TO `+shadow+`, pg_catalog, `+schema); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), `RESET search_path`)
		conn.Conn().Close(context.Background())
	}()
	for i, row := range []struct {
		name               string
		id, subject, trace any
	}{
		{"no id", nil, "s", nil},
		{"a trace context of a number", "0b6e1f36-5f8d-4d7e-9a51-000000000901", "s", `{"traceparent":1}`},
		{"a trace context that is an array", "0b6e1f36-5f8d-4d7e-9a51-000000000902", "s", `["x"]`},
		{"a trace context too long", "0b6e1f36-5f8d-4d7e-9a51-000000000903", "s", `{"tracestate":"` + strings.Repeat("x", 32<<10) + `"}`},
	} {
		_, err := conn.Exec(ctx, `INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state, trace_context)
			VALUES ($1, 'contacts', 'contacts.person.updated', 1, $2, '\x7b7d', 'h', 'accepted', $3)`, row.id, row.subject, row.trace)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "events_accepted_readable" {
			t.Errorf("row %d, %s, under a search_path that shadows pg_catalog: %v; want the constraint's refusal", i, row.name, err)
		}
	}
}

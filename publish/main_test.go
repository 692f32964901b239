package publish_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/publish"
	"herald/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// personSchema is the data schema of contacts.person.updated@1.
const personSchema = `{
	"type": "object",
	"required": ["name"],
	"properties": {
		"name": {"type": "string"},
		"address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}},
		"tags": {"type": "array", "items": {"type": "string"}}
	}
}`

// fixedNow is the clock of the publishers under test.
var fixedNow = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// env is a migrated store with apps and declarations:
//
//	contacts (active): person.updated@1 (personSchema), person.updated@2 (retired),
//	                   blob.stored@1 (any data)
//	billing (active):  invoice.paid@1
//	gone (removed):    thing.happened@1
type env struct {
	t     *testing.T
	ctx   context.Context
	store *store.Store
	url   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := testenv.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	e := &env{t: t, ctx: ctx, store: st, url: url}
	e.exec(`INSERT INTO apps (id, endpoint, delivery_path, manifest, content_hash, removed_at) VALUES
		('contacts', 'http://contacts', '/d', '{}', 'x', NULL),
		('billing', 'http://billing', '/d', '{}', 'x', NULL),
		('gone', 'http://gone', '/d', '{}', 'x', now())`)
	e.declare("contacts", "person.updated", 1, personSchema)
	e.declare("contacts", "person.updated", 2, `{}`)
	e.exec(`UPDATE declarations SET retired_at = now() WHERE type = 'contacts.person.updated' AND version = 2`)
	e.declare("contacts", "blob.stored", 1, `{}`)
	e.declare("billing", "invoice.paid", 1, `{}`)
	e.declare("gone", "thing.happened", 1, `{}`)
	return e
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.store.Pool.Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) declare(app, name string, version int, schema string) {
	e.t.Helper()
	e.exec(`INSERT INTO declarations (type, version, app, name, subject, data_schema)
		VALUES ($1, $2, $3, $4, 'thing', $5)`, app+"."+name, version, app, name, schema)
}

// publisher returns a publisher on e's store with a fixed clock unless opts
// has one.
func (e *env) publisher(opts publish.Options) *publish.Publisher {
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	return publish.New(e.store, opts)
}

// count returns the number of events rows in the given state.
func (e *env) count(state string) int {
	e.t.Helper()
	var n int
	if err := e.store.Pool.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE state = $1`, state).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// person is a valid request for contacts.person.updated@1.
func person(subject, name string) publish.Request {
	data, _ := json.Marshal(map[string]string{"name": name})
	return publish.Request{App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: subject, Data: data}
}

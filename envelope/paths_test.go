package envelope_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"herald/envelope"
	"herald/internal/testenv"
	"herald/manifest"
	"herald/publish"
	"herald/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestPublishAndStoreWriteOneEnvelope publishes an app's event (package
// publish) and has Herald emit an operational event (package store), then
// rebuilds both rows from their fields with this package: the stored
// envelopes and content hashes must be exactly what it writes, byte for
// byte, so neither path can drift from the other.
func TestPublishAndStoreWriteOneEnvelope(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureHeraldApp(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Parse("shop.json", []byte(`{"app":"shop","endpoint":"http://shop.example",
		"events":[{"name":"order.placed","version":1,"subject":"order","title":"Order placed",
		           "description":"An order was placed.","dataSchema":{"type":"object"}}],
		"subscribes":[{"type":"herald.subscription.state_changed","version":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyManifest(ctx, m, "alice"); err != nil {
		t.Fatal(err)
	}
	// <, > and & in the data and the subject: publish writes them readable.
	if _, err := publish.New(st, publish.Options{}).Publish(ctx, publish.Request{App: "shop",
		Type: "shop.order.placed", Version: 1, Subject: "o<1>&2",
		Data: json.RawMessage(`{ "note": "<b>&</b>", "total": 1.50, "lines": [2, 1] }`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetSubscriptionPaused(ctx, "shop:herald.subscription.state_changed@1", true, "alice",
		"<maintenance> & more"); err != nil {
		t.Fatal(err)
	}

	rows, err := st.Pool.Query(ctx, `SELECT source_app, type, version, subject, envelope, content_hash
		FROM events WHERE state <> 'rejected' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]int{}
	for rows.Next() {
		var app, typ, subject, hash string
		var version int
		var stored []byte
		if err := rows.Scan(&app, &typ, &version, &subject, &stored, &hash); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			ID          string          `json:"id"`
			Time        time.Time       `json:"time"`
			TraceParent string          `json:"traceparent"`
			TraceState  string          `json:"tracestate"`
			Data        json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(stored, &doc); err != nil {
			t.Fatalf("%s envelope %s: %v", app, stored, err)
		}
		rebuilt := envelope.Envelope{ID: doc.ID, App: app, Type: typ, Subject: subject, Time: doc.Time,
			Version: version, Data: doc.Data, TraceParent: doc.TraceParent, TraceState: doc.TraceState}.Encode()
		if string(rebuilt) != string(stored) {
			t.Errorf("%s %s: stored envelope\n%s\nis not the package's\n%s", app, typ, stored, rebuilt)
		}
		canonical, err := envelope.Canonical(doc.Data)
		if err != nil {
			t.Fatal(err)
		}
		if want := envelope.ContentHash(app, typ, version, subject, canonical); hash != want {
			t.Errorf("%s %s: stored content hash %s, the package's %s", app, typ, hash, want)
		}
		seen[app]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The app's event, and two state changes (blocked to active, active to
	// paused) of its subscription to Herald's events.
	if seen["shop"] != 1 || seen[store.HeraldApp] < 2 {
		t.Fatalf("events by app %v, want 1 of shop and 2 or more of herald", seen)
	}
}

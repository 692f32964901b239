package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"herald/store"
)

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
		if _, err := s.Pool.Exec(ctx, `INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state, trace_context)
			VALUES ($1, 'contacts', 'contacts.person.updated', 1, $2, '\x7b7d', 'h', 'accepted', $3)`, id, subject, trace); err != nil {
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
}

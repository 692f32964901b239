package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"

	"herald/internal/testenv"
	"herald/manifest"
	"herald/store"
)

// openSyncStore returns a migrated store in a fresh schema.
func openSyncStore(t testing.TB) *store.Store {
	t.Helper()
	return openStoreAt(t, 0)
}

// openStoreAt is a store of a new schema, closed at the test's end,
// migrated up to migration last (every migration when 0): an upgrade test
// writes what an older schema allowed, then migrates the rest.
func openStoreAt(t testing.TB, last int) *store.Store {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	if last == 0 {
		_, err = s.Migrate(ctx)
	} else {
		_, err = s.MigrateTo(ctx, last)
	}
	if err != nil {
		t.Fatalf("migrate to %d: %v", last, err)
	}
	return s
}

// decl builds a declared event of version v with a small schema.
func decl(name string, v int) manifest.Event {
	return manifest.Event{
		Name: name, Version: v, Subject: "thing", Title: "Title of " + name,
		DataSchema: json.RawMessage(`{"type":"object"}`),
	}
}

// withPlace returns e as a resource-scoped event.
func withPlace(e manifest.Event) manifest.Event {
	e.Place = json.RawMessage(`{"kind":"project"}`)
	return e
}

// subTo builds a subscribes entry.
func subTo(eventType string, v int) manifest.Subscription {
	return manifest.Subscription{Type: eventType, Version: v}
}

// mkManifest builds a manifest for app.
func mkManifest(app string, events []manifest.Event, subs ...manifest.Subscription) *manifest.Manifest {
	return &manifest.Manifest{
		App: app, Endpoint: "https://" + app + ".internal:8443",
		Events: events, Subscribes: subs,
	}
}

// mustApply applies m as operator "alice" and fails the test on error.
func mustApply(t *testing.T, s *store.Store, m *manifest.Manifest) store.ApplyResult {
	t.Helper()
	res, err := s.ApplyManifest(context.Background(), m, "alice")
	if err != nil {
		t.Fatalf("apply %s: %v", m.App, err)
	}
	return res
}

// states maps every subscription id to "state/reason".
func states(t *testing.T, s *store.Store) map[string]string {
	t.Helper()
	subs, err := s.ListSubscriptions(context.Background(), "")
	if err != nil {
		t.Fatalf("list subscriptions: %v", err)
	}
	out := map[string]string{}
	for _, sub := range subs {
		out[sub.ID] = sub.State + "/" + sub.Reason
	}
	return out
}

// declarationStates maps every declaration "type@version" of app to
// "live" or "retired", plus "+place" for resource-scoped ones.
func declarationStates(t *testing.T, s *store.Store, app string) map[string]string {
	t.Helper()
	d, err := s.GetApp(context.Background(), app)
	if err != nil {
		t.Fatalf("get app %s: %v", app, err)
	}
	out := map[string]string{}
	for _, dec := range d.Declarations {
		v := "live"
		if dec.RetiredAt != nil {
			v = "retired"
		}
		if dec.Place != nil {
			v += "+place"
		}
		out[fmt.Sprintf("%s@%d", dec.Type, dec.Version)] = v
	}
	return out
}

// auditRows returns the audit rows with action (all when empty), oldest first.
func auditRows(t *testing.T, s *store.Store, action, target string) []store.AuditRow {
	t.Helper()
	rows, err := s.ListAudit(context.Background(), store.AuditFilter{
		Action: action, TargetID: target, Limit: store.MaxAuditLimit,
	})
	if err != nil {
		t.Fatalf("list audit: %v", err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	return rows
}

func countAudit(t *testing.T, s *store.Store) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit`).Scan(&n); err != nil {
		t.Fatalf("count audit: %v", err)
	}
	return n
}

// stateChangeMeta is the metadata of a subscription.state_changed row.
type stateChangeMeta struct {
	From       string  `json:"from"`
	To         string  `json:"to"`
	FromReason *string `json:"fromReason"`
	ToReason   *string `json:"toReason"`
	Reason     string  `json:"reason"`
}

func decodeStateChange(t *testing.T, r store.AuditRow) stateChangeMeta {
	t.Helper()
	var m stateChangeMeta
	if err := json.Unmarshal(r.Metadata, &m); err != nil {
		t.Fatalf("audit %d metadata %s: %v", r.ID, r.Metadata, err)
	}
	return m
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// assertAuditChains checks that the audit trail tells each subscription's
// whole history: a first_seen row, then state_changed rows each starting
// where the previous one ended, ending at the current state. So every change
// wrote exactly one row and no row was written without a change.
func assertAuditChains(t *testing.T, s *store.Store) {
	t.Helper()
	current := states(t, s)
	first := map[string]bool{}
	for _, r := range auditRows(t, s, store.ActionSubscriptionFirstSeen, "") {
		if first[r.TargetID] {
			t.Errorf("subscription %s: two first_seen rows", r.TargetID)
		}
		first[r.TargetID] = true
	}
	chain := map[string]string{}
	for id := range current {
		if !first[id] {
			t.Errorf("subscription %s: no first_seen row", id)
		}
		chain[id] = store.StateBlocked + "/" + store.ReasonEventNotDeclared
	}
	for _, r := range auditRows(t, s, store.ActionSubscriptionStateChanged, "") {
		m := decodeStateChange(t, r)
		from := m.From + "/" + deref(m.FromReason)
		to := m.To + "/" + deref(m.ToReason)
		if from == to {
			t.Errorf("audit %d on %s: no change (%s)", r.ID, r.TargetID, from)
		}
		if chain[r.TargetID] != from {
			t.Errorf("audit %d on %s: from %s, but the previous state was %s", r.ID, r.TargetID, from, chain[r.TargetID])
		}
		chain[r.TargetID] = to
	}
	for id, want := range current {
		if chain[id] != want {
			t.Errorf("subscription %s: audit trail ends at %s, state is %s", id, chain[id], want)
		}
	}
}

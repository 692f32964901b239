package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"herald/manifest"
	"herald/store"
)

const (
	personUpdated = "contacts.person.updated"
	invoicePaid   = "billing.invoice.paid"
	billingSub    = "billing:contacts.person.updated@1"
	contactsSub   = "contacts:billing.invoice.paid@1"
)

func contactsManifest(events ...manifest.Event) *manifest.Manifest {
	return mkManifest("contacts", events, subTo(invoicePaid, 1))
}

func billingManifest(subs ...manifest.Subscription) *manifest.Manifest {
	return mkManifest("billing", []manifest.Event{decl("invoice.paid", 1)}, subs...)
}

func TestApplyNewApp(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()

	res := mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.deleted", 2)))
	want := store.ApplyResult{App: "contacts", DeclarationsAdded: 2, SubscriptionsAdded: 1}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result = %+v, want %+v", res, want)
	}
	if got := states(t, s); !reflect.DeepEqual(got, map[string]string{contactsSub: "blocked/event_not_declared"}) {
		t.Errorf("states = %v", got)
	}
	d, err := s.GetApp(ctx, "contacts")
	if err != nil {
		t.Fatal(err)
	}
	if d.Endpoint != "https://contacts.internal:8443" || d.DeliveryPath != manifest.DefaultDeliveryPath ||
		d.ContentHash != contactsManifest(decl("person.updated", 1), decl("person.deleted", 2)).Hash() || d.RemovedAt != nil {
		t.Errorf("app = %+v", d.App)
	}
	var stored manifest.Manifest
	if err := json.Unmarshal(d.Manifest, &stored); err != nil || stored.App != "contacts" || len(stored.Events) != 2 {
		t.Errorf("stored manifest %s (%v)", d.Manifest, err)
	}
	if len(d.Declarations) != 2 || d.Declarations[1].Type != personUpdated || d.Declarations[1].Name != "person.updated" ||
		d.Declarations[1].Subject != "thing" || !d.Declarations[1].Automation || d.Declarations[1].Place != nil ||
		d.Declarations[1].Title != "Title of person.updated" {
		t.Errorf("declarations = %+v", d.Declarations)
	}
	if len(d.Subscriptions) != 1 || d.Subscriptions[0].ID != contactsSub || d.Subscriptions[0].Version != 1 ||
		d.Subscriptions[0].Type != invoicePaid || d.Subscriptions[0].App != "contacts" {
		t.Errorf("subscriptions = %+v", d.Subscriptions)
	}
	if rows := auditRows(t, s, store.ActionSubscriptionFirstSeen, contactsSub); len(rows) != 1 || rows[0].Actor != "alice" {
		t.Errorf("first_seen rows = %+v", rows)
	}
	applied := auditRows(t, s, store.ActionAppApplied, "contacts")
	if len(applied) != 1 {
		t.Fatalf("app.applied rows = %d", len(applied))
	}
	var meta map[string]any
	if err := json.Unmarshal(applied[0].Metadata, &meta); err != nil {
		t.Fatal(err)
	}
	if meta["hash"] != d.ContentHash || meta["declarationsAdded"] != 2.0 || meta["subscriptionsAdded"] != 1.0 ||
		meta["declarationsRetired"] != 0.0 || meta["subscriptionsCancelled"] != 0.0 {
		t.Errorf("app.applied metadata = %v", meta)
	}
	if applied[0].TargetType != store.TargetApp || applied[0].Actor != "alice" || applied[0].Outcome != store.OutcomeAllowed {
		t.Errorf("app.applied row = %+v", applied[0])
	}
	assertAuditChains(t, s)
}

func TestPublisherAppliedLaterUnblocksSubscriber(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
	if got := states(t, s)[billingSub]; got != "blocked/event_not_declared" {
		t.Fatalf("before the publisher: %s", got)
	}

	res := mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	// contacts' own subscription to billing's event is active at once, and
	// billing's is unblocked by the new publisher.
	wantChanges := []store.StateChange{
		{SubscriptionID: billingSub, From: "blocked", FromReason: "event_not_declared", To: "active"},
		{SubscriptionID: contactsSub, From: "blocked", FromReason: "event_not_declared", To: "active"},
	}
	if !reflect.DeepEqual(res.StateChanges, wantChanges) {
		t.Errorf("state changes = %+v, want %+v", res.StateChanges, wantChanges)
	}
	want := map[string]string{billingSub: "active/", contactsSub: "active/"}
	if got := states(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("states = %v, want %v", got, want)
	}
	rows := auditRows(t, s, store.ActionSubscriptionStateChanged, billingSub)
	if len(rows) != 1 {
		t.Fatalf("state_changed rows for %s = %d, want 1", billingSub, len(rows))
	}
	m := decodeStateChange(t, rows[0])
	if m.From != "blocked" || deref(m.FromReason) != "event_not_declared" || m.To != "active" || m.ToReason != nil {
		t.Errorf("metadata = %s", rows[0].Metadata)
	}
	if rows[0].Actor != "alice" || rows[0].TargetType != store.TargetSubscription {
		t.Errorf("row = %+v", rows[0])
	}
	assertAuditChains(t, s)
}

func TestRetireAndRedeclare(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.created", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
	before, err := s.GetApp(ctx, "contacts")
	if err != nil {
		t.Fatal(err)
	}

	res := mustApply(t, s, contactsManifest(decl("person.created", 1)))
	if res.DeclarationsRetired != 1 || res.DeclarationsAdded != 0 || res.DeclarationsUpdated != 0 {
		t.Errorf("retire result = %+v", res)
	}
	if got := states(t, s)[billingSub]; got != "blocked/event_not_declared" {
		t.Errorf("after retiring: %s", got)
	}
	if got := declarationStates(t, s, "contacts"); got[personUpdated+"@1"] != "retired" || got["contacts.person.created@1"] != "live" {
		t.Errorf("declarations = %v", got)
	}
	retired := auditRows(t, s, store.ActionDeclarationRetired, "")
	if len(retired) != 1 || retired[0].TargetID != personUpdated+"@1" || retired[0].TargetType != store.TargetDeclaration {
		t.Errorf("declaration.retired rows = %+v", retired)
	}

	res = mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.created", 1)))
	if res.DeclarationsRestored != 1 || res.DeclarationsUpdated != 0 || res.DeclarationsAdded != 0 {
		t.Errorf("redeclare result = %+v", res)
	}
	if got := states(t, s)[billingSub]; got != "active/" {
		t.Errorf("after redeclaring: %s", got)
	}
	after, err := s.GetApp(ctx, "contacts")
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range after.Declarations {
		if d.RetiredAt != nil {
			t.Errorf("%s still retired", d.Type)
		}
		if !d.CreatedAt.Equal(before.Declarations[i].CreatedAt) {
			t.Errorf("%s created_at changed", d.Type)
		}
	}
	if n := len(auditRows(t, s, store.ActionDeclarationRestored, personUpdated+"@1")); n != 1 {
		t.Errorf("declaration.restored rows = %d", n)
	}
	assertAuditChains(t, s)
}

func TestDeclarationChangesUpdateInPlace(t *testing.T) {
	t.Parallel()
	changed := func(f func(*manifest.Event)) manifest.Event {
		e := decl("person.updated", 1)
		f(&e)
		return e
	}
	no := false
	tests := []struct {
		name        string
		event       manifest.Event
		wantUpdated int
		wantState   string
	}{
		{"title", changed(func(e *manifest.Event) { e.Title = "New title" }), 1, "active/"},
		{"description", changed(func(e *manifest.Event) { e.Description = "More words" }), 1, "active/"},
		{"subject", changed(func(e *manifest.Event) { e.Subject = "person" }), 1, "active/"},
		{"schema (widened)", changed(func(e *manifest.Event) { e.DataSchema = json.RawMessage(`{"type":["object","null"]}`) }), 1, "active/"},
		{"automation", changed(func(e *manifest.Event) { e.Automation = &no }), 1, "active/"},
		{"place", withPlace(decl("person.updated", 1)), 1, "blocked/resource_events_unsupported"},
		{"explicit null place", changed(func(e *manifest.Event) { e.Place = json.RawMessage(`null`) }), 0, "active/"},
		{"schema formatting only", changed(func(e *manifest.Event) { e.DataSchema = json.RawMessage(`{ "type" : "object" }`) }), 0, "active/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openSyncStore(t)
			ctx := context.Background()
			mustApply(t, s, contactsManifest(decl("person.updated", 1)))
			mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
			before, err := s.GetApp(ctx, "contacts")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // so a new updated_at differs
			m := contactsManifest(tt.event)
			m.Endpoint += "/v2" // the manifest always changes, the declaration maybe not
			res := mustApply(t, s, m)
			if res.Unchanged || res.DeclarationsUpdated != tt.wantUpdated || res.DeclarationsAdded != 0 || res.DeclarationsRetired != 0 {
				t.Errorf("result = %+v", res)
			}
			if got := states(t, s)[billingSub]; got != tt.wantState {
				t.Errorf("subscriber state = %s, want %s", got, tt.wantState)
			}
			after, err := s.GetApp(ctx, "contacts")
			if err != nil {
				t.Fatal(err)
			}
			b, a := before.Declarations[0], after.Declarations[0]
			if !a.CreatedAt.Equal(b.CreatedAt) {
				t.Errorf("created_at changed")
			}
			if bumped := a.UpdatedAt.After(b.UpdatedAt); bumped != (tt.wantUpdated > 0) {
				t.Errorf("updated_at %v -> %v, bumped = %v", b.UpdatedAt, a.UpdatedAt, bumped)
			}
			if a.Title != tt.event.Title || a.Subject != tt.event.Subject || a.Automation != tt.event.IsAutomation() ||
				(a.Place != nil) != tt.event.HasPlace() || a.Description != tt.event.Description {
				t.Errorf("declaration = %+v", a)
			}
			if after.Endpoint != "https://contacts.internal:8443/v2" {
				t.Errorf("endpoint = %s", after.Endpoint)
			}
			assertAuditChains(t, s)
		})
	}
}

func TestPlaceEventBlocksSubscribers(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
	mustApply(t, s, contactsManifest(withPlace(decl("person.updated", 1))))
	if got := states(t, s)[billingSub]; got != "blocked/resource_events_unsupported" {
		t.Fatalf("state = %s", got)
	}
	res := mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	want := store.StateChange{SubscriptionID: billingSub, From: "blocked", FromReason: "resource_events_unsupported", To: "active"}
	if len(res.StateChanges) != 1 || res.StateChanges[0] != want {
		t.Errorf("state changes = %+v", res.StateChanges)
	}
	assertAuditChains(t, s)
}

func TestSubscriptionRemovedAndRestored(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		publish       bool
		wantRestored  string
		wantCancelled store.StateChange
	}{
		{"declared event", true, "active/",
			store.StateChange{SubscriptionID: billingSub, From: "active", To: "cancelled", ToReason: "subscription_removed"}},
		{"undeclared event", false, "blocked/event_not_declared",
			store.StateChange{SubscriptionID: billingSub, From: "blocked", FromReason: "event_not_declared", To: "cancelled", ToReason: "subscription_removed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openSyncStore(t)
			if tt.publish {
				mustApply(t, s, contactsManifest(decl("person.updated", 1)))
			}
			mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
			// An operator paused one of its keys, whose workflow then ended.
			if _, err := s.Pool.Exec(context.Background(),
				`INSERT INTO paused_keys (subscription_id, subject) VALUES ($1, 'p1')`, billingSub); err != nil {
				t.Fatal(err)
			}

			res := mustApply(t, s, billingManifest())
			if res.SubscriptionsCancelled != 1 || len(res.StateChanges) != 1 || res.StateChanges[0] != tt.wantCancelled {
				t.Errorf("cancel result = %+v", res)
			}
			if got := states(t, s)[billingSub]; got != "cancelled/subscription_removed" {
				t.Errorf("after removal: %s", got)
			}
			var paused int
			if err := s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM paused_keys`).Scan(&paused); err != nil || paused != 0 {
				t.Errorf("%d paused keys (%v) after the removal, want 0: a restored subscription would start them paused", paused, err)
			}
			// Applying again without it leaves the cancelled one alone.
			if res := mustApply(t, s, billingManifest(subTo("contacts.other", 1))); res.SubscriptionsCancelled != 0 {
				t.Errorf("cancelled twice: %+v", res)
			}

			res = mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
			if res.SubscriptionsRestored != 1 || res.SubscriptionsAdded != 0 {
				t.Errorf("restore result = %+v", res)
			}
			if got := states(t, s)[billingSub]; got != tt.wantRestored {
				t.Errorf("after restore: %s, want %s", got, tt.wantRestored)
			}
			if n := len(auditRows(t, s, store.ActionSubscriptionFirstSeen, billingSub)); n != 1 {
				t.Errorf("first_seen rows = %d, want 1", n)
			}
			assertAuditChains(t, s)
		})
	}
}

func TestUnchangedManifestWritesNothing(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
	auditBefore := countAudit(t, s)
	appBefore, err := s.GetApp(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)

	m := billingManifest(subTo(personUpdated, 1))
	m.Events[0].DataSchema = json.RawMessage("{\n  \"type\": \"object\"\n}") // same content, other formatting
	res := mustApply(t, s, m)
	if !reflect.DeepEqual(res, store.ApplyResult{App: "billing", Unchanged: true}) {
		t.Errorf("result = %+v", res)
	}
	if n := countAudit(t, s); n != auditBefore {
		t.Errorf("audit rows %d -> %d", auditBefore, n)
	}
	appAfter, err := s.GetApp(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(appBefore, appAfter) {
		t.Errorf("app changed:\n%+v\n%+v", appBefore, appAfter)
	}
}

func TestPauseSurvivesRecomputeAndRemoval(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))

	sub, err := s.SetSubscriptionPaused(ctx, billingSub, true, "bob", "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	if sub.State != store.StatePaused || sub.Reason != store.ReasonPausedByOperator {
		t.Fatalf("paused = %+v", sub)
	}
	rows := auditRows(t, s, store.ActionSubscriptionStateChanged, billingSub)
	if len(rows) != 2 || rows[1].Actor != "bob" || decodeStateChange(t, rows[1]).Reason != "maintenance" {
		t.Errorf("pause audit = %+v", rows)
	}

	// Retiring and re-declaring the event never touches the pause.
	for _, m := range []*manifest.Manifest{contactsManifest(), contactsManifest(decl("person.updated", 1))} {
		if res := mustApply(t, s, m); len(res.StateChanges) != 0 {
			t.Errorf("state changes = %+v", res.StateChanges)
		}
		if got := states(t, s)[billingSub]; got != "paused/paused_by_operator" {
			t.Errorf("after recompute: %s", got)
		}
	}
	// Removing it from the manifest cancels it even though paused.
	res := mustApply(t, s, billingManifest())
	want := store.StateChange{SubscriptionID: billingSub, From: "paused", FromReason: "paused_by_operator", To: "cancelled", ToReason: "subscription_removed"}
	if len(res.StateChanges) != 1 || res.StateChanges[0] != want {
		t.Errorf("state changes = %+v", res.StateChanges)
	}
	// Restoring it gives the computed state, not the old pause.
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
	if got := states(t, s)[billingSub]; got != "active/" {
		t.Errorf("restored: %s", got)
	}
	assertAuditChains(t, s)
}

func TestResumeRecomputes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		publish *manifest.Manifest
		want    string
	}{
		{"declared", contactsManifest(decl("person.updated", 1)), "active/"},
		{"retired", contactsManifest(), "blocked/event_not_declared"},
		{"place", contactsManifest(withPlace(decl("person.updated", 1))), "blocked/resource_events_unsupported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openSyncStore(t)
			ctx := context.Background()
			mustApply(t, s, contactsManifest(decl("person.updated", 1)))
			mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
			if _, err := s.SetSubscriptionPaused(ctx, billingSub, true, "bob", ""); err != nil {
				t.Fatal(err)
			}
			mustApply(t, s, tt.publish)
			sub, err := s.SetSubscriptionPaused(ctx, billingSub, false, "carol", "done")
			if err != nil {
				t.Fatal(err)
			}
			if got := sub.State + "/" + sub.Reason; got != tt.want {
				t.Errorf("resumed = %s, want %s", got, tt.want)
			}
			rows := auditRows(t, s, store.ActionSubscriptionStateChanged, billingSub)
			if last := rows[len(rows)-1]; last.Actor != "carol" || decodeStateChange(t, last).From != "paused" {
				t.Errorf("resume audit = %+v", last)
			}
			assertAuditChains(t, s)
		})
	}
}

func TestPauseResumeRefusals(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1), subTo("contacts.gone", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
	const cancelled = "billing:contacts.gone@1"

	tests := []struct {
		name      string
		id        string
		pause     bool
		wantState string // non-empty: the call fails with a *StateError naming it
		notFound  bool
	}{
		{"resume active", billingSub, false, "active", false},
		{"pause cancelled", cancelled, true, "cancelled", false},
		{"resume cancelled", cancelled, false, "cancelled", false},
		{"pause unknown", "billing:nope@1", true, "", true},
		{"resume unknown", "billing:nope@1", false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := countAudit(t, s)
			_, err := s.SetSubscriptionPaused(ctx, tt.id, tt.pause, "bob", "")
			var se *store.StateError
			switch {
			case tt.notFound && !errors.Is(err, store.ErrNotFound):
				t.Errorf("err = %v, want ErrNotFound", err)
			case !tt.notFound && (!errors.As(err, &se) || se.State != tt.wantState || se.SubscriptionID != tt.id):
				t.Errorf("err = %v, want a StateError for state %s", err, tt.wantState)
			case err != nil && !strings.Contains(err.Error(), tt.id):
				t.Errorf("error %q does not name the subscription", err)
			}
			if n := countAudit(t, s); n != before {
				t.Errorf("audit rows %d -> %d", before, n)
			}
		})
	}

	// Pausing twice: the second is a no-op.
	if _, err := s.SetSubscriptionPaused(ctx, billingSub, true, "bob", ""); err != nil {
		t.Fatal(err)
	}
	before := countAudit(t, s)
	sub, err := s.SetSubscriptionPaused(ctx, billingSub, true, "bob", "")
	if err != nil || sub.State != store.StatePaused {
		t.Errorf("second pause = %+v, %v", sub, err)
	}
	if n := countAudit(t, s); n != before {
		t.Errorf("second pause wrote audit rows: %d -> %d", before, n)
	}
	assertAuditChains(t, s)
}

func TestRemoveApp(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))
	if got := states(t, s); got[billingSub] != "active/" || got[contactsSub] != "active/" {
		t.Fatalf("states = %v", got)
	}

	res, err := s.RemoveApp(ctx, "contacts", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if res.DeclarationsRetired != 1 || res.SubscriptionsCancelled != 1 || len(res.StateChanges) != 2 {
		t.Errorf("result = %+v", res)
	}
	want := map[string]string{billingSub: "blocked/event_not_declared", contactsSub: "cancelled/subscription_removed"}
	if got := states(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("states = %v, want %v", got, want)
	}
	d, err := s.GetApp(ctx, "contacts")
	if err != nil {
		t.Fatal(err)
	}
	if d.RemovedAt == nil || d.Declarations[0].RetiredAt == nil {
		t.Errorf("after removal: %+v", d)
	}
	if rows := auditRows(t, s, store.ActionAppRemoved, "contacts"); len(rows) != 1 || rows[0].Actor != "bob" {
		t.Errorf("app.removed rows = %+v", rows)
	}

	// Removing again changes nothing.
	before := countAudit(t, s)
	if res, err := s.RemoveApp(ctx, "contacts", "bob"); err != nil || !res.Unchanged {
		t.Errorf("second removal = %+v, %v", res, err)
	}
	if n := countAudit(t, s); n != before {
		t.Errorf("second removal wrote audit rows")
	}

	// The same manifest again restores everything.
	res = mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	if res.Unchanged || res.DeclarationsRestored != 1 || res.SubscriptionsRestored != 1 {
		t.Errorf("re-apply result = %+v", res)
	}
	if got := states(t, s); got[billingSub] != "active/" || got[contactsSub] != "active/" {
		t.Errorf("states after re-apply = %v", got)
	}
	if d, err := s.GetApp(ctx, "contacts"); err != nil || d.RemovedAt != nil {
		t.Errorf("app after re-apply = %+v, %v", d.App, err)
	}
	assertAuditChains(t, s)
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"RemoveApp", func() error { _, err := s.RemoveApp(ctx, "ghost", "bob"); return err }},
		{"GetApp", func() error { _, err := s.GetApp(ctx, "ghost"); return err }},
		{"GetSubscription", func() error { _, err := s.GetSubscription(ctx, "ghost:a.b@1"); return err }},
		{"DeliveryTarget", func() error { _, err := s.DeliveryTarget(ctx, "ghost:a.b@1"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("err = %v, want ErrNotFound", err)
			}
		})
	}
	if n := countAudit(t, s); n != 0 {
		t.Errorf("audit rows = %d", n)
	}
}

func TestApplyRefusesNoApp(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	for _, m := range []*manifest.Manifest{nil, {}} {
		if _, err := s.ApplyManifest(context.Background(), m, "bob"); err == nil {
			t.Errorf("apply %+v: no error", m)
		}
	}
}

func TestSubscriptionOnlyOwnerDeclares(t *testing.T) {
	t.Parallel()
	// billing subscribing to "contacts.x" is not satisfied by some other
	// app's declaration: only contacts can declare contacts.* types, and a
	// removed owner declares nothing.
	s := openSyncStore(t)
	mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.updated", 2)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1), subTo(personUpdated, 3)))
	got := states(t, s)
	if got[billingSub] != "active/" || got["billing:contacts.person.updated@3"] != "blocked/event_not_declared" {
		t.Errorf("states = %v", got)
	}
}

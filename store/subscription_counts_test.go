package store_test

import (
	"context"
	"testing"

	"herald/store"
)

// TestSubscriptionCounts counts outcome rows per status and subscription:
// billing has one event in each of four statuses, audit one delivered; the
// app filter keeps one app's subscriptions.
func TestSubscriptionCounts(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	mustApply(t, s, mkManifest("audit", nil, subTo("contacts.person.updated", 1)))
	const auditSub = "audit:contacts.person.updated@1"

	counts, err := s.SubscriptionCounts(ctx, "")
	if err != nil || len(counts) != 0 {
		t.Fatalf("counts before any dispatch: %v, %v", counts, err)
	}
	var ds []store.Dispatch
	for i, ev := range evs {
		ds = append(ds, store.Dispatch{SubscriptionID: billingPersonSub, EventID: ev.ID, Seq: int64(i + 1), Subject: ev.Subject})
	}
	ds = append(ds, store.Dispatch{SubscriptionID: auditSub, EventID: evs[3].ID, Seq: 4, Subject: "p2"})
	if _, err := s.RecordDispatch(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1},
		{EventID: evs[1].ID, Seq: 2, Status: store.EventFailed, Attempts: 8, Code: "attempts_exhausted"},
		{EventID: evs[2].ID, Seq: 3, Status: store.EventCancelled},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, auditSub, "p2", []store.OutcomeUpdate{
		{EventID: evs[3].ID, Seq: 4, Status: store.EventExpired, Code: "retention_expired"},
	}); err != nil {
		t.Fatal(err)
	}

	counts, err = s.SubscriptionCounts(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	wantBilling := store.DeliveryCounts{Queued: 1, Delivered: 1, Failed: 1, Cancelled: 1}
	wantAudit := store.DeliveryCounts{Expired: 1}
	if len(counts) != 2 || counts[billingPersonSub] != wantBilling || counts[auditSub] != wantAudit {
		t.Fatalf("counts = %+v; want billing %+v, audit %+v", counts, wantBilling, wantAudit)
	}
	if got := counts[billingPersonSub].Total(); got != 4 {
		t.Errorf("billing total = %d, want 4", got)
	}

	counts, err = s.SubscriptionCounts(ctx, "billing")
	if err != nil || len(counts) != 1 || counts[billingPersonSub] != wantBilling {
		t.Fatalf("counts of app billing = %+v, %v", counts, err)
	}
	counts, err = s.SubscriptionCounts(ctx, "nobody")
	if err != nil || len(counts) != 0 {
		t.Fatalf("counts of an unknown app = %+v, %v", counts, err)
	}
}

// TestHeldPerSubscription: billing holds one queued event on key p2 and a
// failed one on key p1 (a failed key, whatever else it holds); audit's only
// event expired, so it holds nothing but is still listed with zeros.
func TestHeldPerSubscription(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	mustApply(t, s, mkManifest("audit", nil, subTo("contacts.person.updated", 1)))
	const auditSub = "audit:contacts.person.updated@1"
	var ds []store.Dispatch
	for i, ev := range evs {
		ds = append(ds, store.Dispatch{SubscriptionID: billingPersonSub, EventID: ev.ID, Seq: int64(i + 1), Subject: ev.Subject})
	}
	ds = append(ds, store.Dispatch{SubscriptionID: auditSub, EventID: evs[3].ID, Seq: 4, Subject: "p2"})
	if _, err := s.RecordDispatch(ctx, ds); err != nil {
		t.Fatal(err)
	}
	held := func() map[string]store.HeldCounts {
		t.Helper()
		list, err := s.HeldPerSubscription(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.HeldCounts{}
		for _, h := range list {
			out[h.SubscriptionID] = h
		}
		return out
	}
	got := held()
	if b := got[billingPersonSub]; b.App != "billing" || b.Queued != 4 || b.PendingKeys != 2 || b.FailedKeys != 0 {
		t.Errorf("billing after dispatch = %+v, want 4 queued on 2 pending keys", b)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventFailed, Attempts: 8, Code: "attempts_exhausted"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, auditSub, "p2", []store.OutcomeUpdate{
		{EventID: evs[3].ID, Seq: 4, Status: store.EventExpired, Code: "retention_expired"},
	}); err != nil {
		t.Fatal(err)
	}
	got = held()
	want := map[string]store.HeldCounts{
		billingPersonSub: {SubscriptionID: billingPersonSub, App: "billing", Queued: 3, PendingKeys: 1, FailedKeys: 1},
		auditSub:         {SubscriptionID: auditSub, App: "audit"},
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s = %+v, want %+v", id, got[id], w)
		}
	}

	// Key p2's event fails an attempt: p2 is retrying. Then the app is
	// unreachable, then the subscription paused: each takes precedence over
	// the one before, and the failed key stays failed.
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p2", []store.OutcomeUpdate{
		{EventID: evs[3].ID, Seq: 4, Status: store.EventQueued, Attempts: 2, LastCode: "handler_failed"},
	}); err != nil {
		t.Fatal(err)
	}
	wantBilling := func(when string, w store.HeldCounts) {
		t.Helper()
		w.SubscriptionID, w.App, w.Queued, w.FailedKeys = billingPersonSub, "billing", 3, 1
		if b := held()[billingPersonSub]; b != w {
			t.Errorf("billing %s = %+v, want %+v", when, b, w)
		}
	}
	wantBilling("with p2 retrying", store.HeldCounts{RetryingKeys: 1})
	if err := s.MarkUnreachable(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	apps, err := s.UnreachableApps(ctx)
	if err != nil || len(apps) != 1 || apps[0].App != "billing" || apps[0].Since.IsZero() {
		t.Fatalf("unreachable apps = %+v, %v", apps, err)
	}
	wantBilling("unreachable", store.HeldCounts{UnreachableKeys: 1})
	if _, err := s.SetSubscriptionPaused(ctx, billingPersonSub, true, "tester", "test"); err != nil {
		t.Fatal(err)
	}
	wantBilling("paused", store.HeldCounts{PausedKeys: 1})
}

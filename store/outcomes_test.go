package store_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"herald/store"
)

// outcomeFixture: contacts declares contacts.person.updated@1, billing
// subscribes; three events of key p1 and one of p2 are in the log.
func outcomeFixture(t *testing.T) (*store.Store, []store.NewEvent) {
	t.Helper()
	s := openSyncStore(t)
	c := mkManifest("contacts", nil)
	c.Events = append(c.Events, decl("person.updated", 1))
	mustApply(t, s, c)
	mustApply(t, s, mkManifest("billing", nil, subTo("contacts.person.updated", 1)))
	evs := []store.NewEvent{
		newEvent("contacts.person.updated", "p1", "a"), newEvent("contacts.person.updated", "p1", "b"),
		newEvent("contacts.person.updated", "p1", "c"), newEvent("contacts.person.updated", "p2", "d"),
	}
	if _, err := s.InsertEvents(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return s, evs
}

const billingPersonSub = "billing:contacts.person.updated@1"

func TestDeliveryBatchReadsTargetEventsAndOutcomes(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	existing, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
	})
	if err != nil || len(existing) != 0 {
		t.Fatalf("first dispatch: rows there before %v, %v", existing, err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 2, LastCode: "handler_failed", LastError: "HTTP 500",
			DeliveredBy: "run-1/head"},
		// A queued outcome keeps no execution, whatever the caller says.
		{EventID: evs[1].ID, Seq: 2, Status: store.EventQueued, Attempts: 1, DeliveredBy: "run-1/head"},
	}); err != nil {
		t.Fatal(err)
	}
	b, err := s.DeliveryBatch(ctx, billingPersonSub, "", []string{evs[0].ID, evs[1].ID, evs[2].ID, "00000000-0000-4000-8000-000000000000"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Target.App != "billing" || b.Target.State != store.StateActive || b.Target.Type != "contacts.person.updated" ||
		b.Target.URL() != "https://billing.internal:8443/api/_internal/events/v1/deliver" {
		t.Fatalf("target %+v", b.Target)
	}
	if len(b.Events) != 3 || b.Events[evs[0].ID].Outcome != store.EventDelivered ||
		b.Events[evs[1].ID].Outcome != store.EventQueued || b.Events[evs[2].ID].Outcome != "" ||
		string(b.Events[evs[1].ID].Envelope) != string(evs[1].Envelope) || b.Events[evs[2].ID].Seq != 3 {
		t.Fatalf("events %+v", b.Events)
	}
	if b.Events[evs[0].ID].DeliveredBy != "run-1/head" || b.Events[evs[1].ID].DeliveredBy != "" {
		t.Fatalf("delivered by %q and %q, want run-1/head and none",
			b.Events[evs[0].ID].DeliveredBy, b.Events[evs[1].ID].DeliveredBy)
	}
	// A re-dispatch reports each row's status (one settled, one queued),
	// and a filtered verdict writes over neither.
	existing, err = s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1", Filtered: true, Code: "filter_no_match"},
	})
	if want := map[store.Dispatch]string{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID}: store.EventDelivered,
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID}: store.EventQueued,
	}; err != nil || !reflect.DeepEqual(existing, want) {
		t.Fatalf("re-dispatch: rows there before %v, %v; want %v", existing, err, want)
	}
	if out, err := s.EventOutcomes(ctx, evs[1].ID); err != nil || len(out) != 1 || out[0].Status != store.EventQueued {
		t.Fatalf("the queued event's outcome after a filtered re-dispatch: %+v, %v", out, err)
	}
	out, err := s.EventOutcomes(ctx, evs[0].ID)
	if err != nil || len(out) != 1 || out[0].Attempts != 2 || out[0].LastCode != "handler_failed" || out[0].DeliveredAt == nil {
		t.Fatalf("outcomes of the delivered event %+v %v", out, err)
	}
	if _, err := s.DeliveryBatch(ctx, "nobody:x.y@1", "", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown subscription: %v", err)
	}
}

func TestRequeueChecksTheKey(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	// Events 1-3 of p1 and 4 of p2 were handed out; 1 and 3 were delivered,
	// 2 is still queued. A fifth, undispatched event of p1 follows.
	if _, err := s.Pool.Exec(ctx, `UPDATE events SET state = 'dispatched', dispatched_at = now()`); err != nil {
		t.Fatal(err)
	}
	var ds []store.Dispatch
	for i, ev := range evs[:3] {
		ds = append(ds, store.Dispatch{SubscriptionID: billingPersonSub, EventID: ev.ID, Seq: int64(i + 1), Subject: "p1"})
	}
	if _, err := s.RecordDispatch(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Status: store.EventDelivered}, {EventID: evs[2].ID, Status: store.EventDelivered}}); err != nil {
		t.Fatal(err)
	}
	late := newEvent("contacts.person.updated", "p1", "e")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{late}); err != nil {
		t.Fatal(err)
	}
	got, refused, err := s.Requeue(ctx, billingPersonSub, "p1",
		[]string{evs[2].ID, evs[0].ID, evs[1].ID, evs[3].ID, late.ID, "not-a-uuid", "00000000-0000-4000-8000-000000000000"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != evs[0].ID || got[1].ID != evs[2].ID {
		t.Fatalf("requeued %+v, want events 1 and 3 in sequence order", got)
	}
	want := map[string]string{evs[1].ID: "already_queued", evs[3].ID: "event_not_for_key", late.ID: "not_dispatched_yet",
		"not-a-uuid": "event_not_found", "00000000-0000-4000-8000-000000000000": "event_not_found"}
	if len(refused) != len(want) {
		t.Fatalf("refused %v", refused)
	}
	for id, why := range want {
		if refused[id] != why {
			t.Fatalf("refused %v, want %v", refused, want)
		}
	}
	keys, err := s.WindowEvents(ctx, billingPersonSub, "", time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil || len(keys) != 2 || keys[0].Subject != "p1" || len(keys[0].Events) != 4 || keys[1].Subject != "p2" {
		t.Fatalf("window %+v %v", keys, err)
	}
}

// TestRetentionKeepsHeldEvents: an old event a key still holds stays, with
// its outcome row; settled outcome rows past retention go.
func TestRetentionKeepsHeldEvents(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1},
		{EventID: evs[1].ID, Seq: 2, Status: store.EventFailed, Attempts: 8, Code: "attempts_exhausted"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE events SET state = 'dispatched', dispatched_at = now() - interval '40 days'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE outcomes SET updated_at = now() - interval '40 days'`); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := s.PurgeEvents(ctx, time.Now().Add(-30*24*time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		if !n.Full(100) {
			break
		}
	}
	if _, err := s.GetEvent(ctx, evs[1].ID); err != nil {
		t.Fatalf("the held event was purged: %v", err)
	}
	if _, err := s.GetEvent(ctx, evs[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the delivered event is still there: %v", err)
	}
	if out, _ := s.EventOutcomes(ctx, evs[1].ID); len(out) != 1 || out[0].Status != store.EventFailed {
		t.Fatalf("held outcome %+v", out)
	}
	if out, _ := s.EventOutcomes(ctx, evs[0].ID); len(out) != 0 {
		t.Fatalf("settled outcome kept past retention: %+v", out)
	}
}

// TestRecordOutcomesWritesOnlyTheKeysEvents: whatever a caller claims, an
// outcome is written only for an accepted event of the subscription and of
// that subject key, and a delivered event is never marked cancelled.
func TestRecordOutcomesWritesOnlyTheKeysEvents(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Status: store.EventDelivered, Attempts: 1},
		{EventID: evs[3].ID, Status: store.EventCancelled}, // key p2's event
		{EventID: "not-a-uuid", Status: store.EventCancelled},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := s.EventOutcomes(ctx, evs[3].ID); len(out) != 0 {
		t.Fatalf("another key's event got an outcome: %+v", out)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Status: store.EventCancelled}}); err != nil {
		t.Fatal(err)
	}
	if out, _ := s.EventOutcomes(ctx, evs[0].ID); len(out) != 1 || out[0].Status != store.EventDelivered || out[0].Subject != "p1" {
		t.Fatalf("delivered outcome rewritten: %+v", out)
	}
}

// TestAttemptFailureLeavesASettledRow: a run left posting by a terminate
// reports its attempt's failure after the key's new run settled the event
// (an operator cancelled it, or it expired). The failure turned the row
// back into queued or failed: the new run, past it, delivered it again
// after later events once it read from the start, or the relay held the
// key on an event the operator had cancelled. A failure changes only a row
// still queued or failed; a delivery is recorded whatever the row says.
func TestAttemptFailureLeavesASettledRow(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	write := func(us ...store.OutcomeUpdate) {
		t.Helper()
		if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", us); err != nil {
			t.Fatal(err)
		}
	}
	row := func(id string) store.EventOutcome {
		t.Helper()
		out, err := s.EventOutcomes(ctx, id)
		if err != nil || len(out) != 1 {
			t.Fatalf("outcomes of %s: %+v %v", id, out, err)
		}
		return out[0]
	}
	// evs[0]: cancelled by the new run after an attempt; evs[2]: delivered.
	write(store.OutcomeUpdate{EventID: evs[0].ID, Status: store.EventQueued, Attempts: 1, LastCode: "http_503"})
	write(store.OutcomeUpdate{EventID: evs[0].ID, Status: store.EventCancelled, Code: "cancelled_by_operator"})
	write(store.OutcomeUpdate{EventID: evs[2].ID, Status: store.EventDelivered, Attempts: 1})
	// The stale run's failures, one at a time and both in one statement
	// (the writer batches what arrives together), beside a held row's.
	write(store.OutcomeUpdate{EventID: evs[0].ID, Status: store.EventQueued, Attempts: 2, LastCode: "http_500"})
	write(store.OutcomeUpdate{EventID: evs[0].ID, Status: store.EventFailed, Attempts: 8, Code: "attempts_exhausted", LastCode: "http_500"},
		store.OutcomeUpdate{EventID: evs[2].ID, Status: store.EventQueued, Attempts: 2, LastCode: "http_500"},
		store.OutcomeUpdate{EventID: evs[1].ID, Status: store.EventQueued, Attempts: 1, LastCode: "http_500"})
	if r := row(evs[0].ID); r.Status != store.EventCancelled || r.Attempts != 1 || r.LastCode != "http_503" || r.Code != "cancelled_by_operator" {
		t.Fatalf("a stale attempt's failures over a cancelled row: %+v, want it cancelled as it was", r)
	}
	if r := row(evs[2].ID); r.Status != store.EventDelivered || r.Attempts != 1 || r.LastCode != "" {
		t.Fatalf("a stale attempt's failure over a delivered row: %+v, want it delivered as it was", r)
	}
	if r := row(evs[1].ID); r.Status != store.EventQueued || r.Attempts != 1 || r.LastCode != "http_500" {
		t.Fatalf("a failure over no row beside them: %+v, want queued after one attempt", r)
	}
	// A held row takes failures as before; a delivery is recorded over a
	// cancelled row (it happened).
	write(store.OutcomeUpdate{EventID: evs[1].ID, Status: store.EventFailed, Attempts: 2, Code: "schema_mismatch"})
	if r := row(evs[1].ID); r.Status != store.EventFailed || r.Attempts != 2 {
		t.Fatalf("a failure over a queued row: %+v, want failed after two attempts", r)
	}
	write(store.OutcomeUpdate{EventID: evs[0].ID, Status: store.EventDelivered, Attempts: 3})
	if r := row(evs[0].ID); r.Status != store.EventDelivered {
		t.Fatalf("a stale attempt's delivery over a cancelled row: %+v, want delivered", r)
	}
}

// TestRefusedFailureIsNotAudited: a head's failure for good that its row
// refuses (the event was delivered or cancelled meanwhile, by the key's
// new run after a terminate) writes no delivery.failed row and does not
// mark the key failed, so no herald.key.failed goes out for an event that
// is not held; a failure the row takes writes both.
func TestRefusedFailureIsNotAudited(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	if _, err := s.EnsureHeraldApp(ctx); err != nil { // its key events are declared
		t.Fatal(err)
	}
	target := store.DeliveryWorkflowID(billingPersonSub, "p1")
	fail := func(id string) {
		t.Helper()
		e := store.AuditEntry{Action: store.ActionDeliveryFailed, Outcome: "failed", TargetType: store.TargetDelivery,
			TargetID: target, ErrorCode: "attempts_exhausted", Metadata: map[string]any{"eventId": id, "seq": 1}}
		if err := s.RecordWithAudit(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{{EventID: id, Status: store.EventFailed,
			Attempts: 8, Code: "attempts_exhausted", LastCode: "http_500"}}, []store.AuditEntry{e}); err != nil {
			t.Fatal(err)
		}
	}
	counts := func(id string) (audits, failedKeys, keyEvents int) {
		t.Helper()
		if err := s.Pool.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM audit WHERE action = $1 AND metadata->>'eventId' = $2),
			       (SELECT count(*) FROM failed_keys WHERE subscription_id = $3 AND event_id = $2::uuid),
			       (SELECT count(*) FROM events WHERE type = $4)`,
			store.ActionDeliveryFailed, id, billingPersonSub, store.TypeKeyFailed).Scan(&audits, &failedKeys, &keyEvents); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[2].ID, Status: store.EventDelivered, Attempts: 1},
		{EventID: evs[1].ID, Status: store.EventQueued, Attempts: 1, LastCode: "http_500"},
	}); err != nil {
		t.Fatal(err)
	}
	fail(evs[2].ID)
	if a, f, k := counts(evs[2].ID); a != 0 || f != 0 || k != 0 {
		t.Fatalf("a failure the delivered row refused: %d delivery.failed rows, %d failed_keys rows, %d %s events; want none",
			a, f, k, store.TypeKeyFailed)
	}
	fail(evs[1].ID)
	if a, f, k := counts(evs[1].ID); a != 1 || f != 1 || k != 1 {
		t.Fatalf("a failure over a queued row: %d delivery.failed rows, %d failed_keys rows, %d %s events; want one each",
			a, f, k, store.TypeKeyFailed)
	}
}

// TestBacklogReadsAndDropsQueuedEvents: a key's backlog is its queued events
// above a seq, in order; dropping it settles exactly those.
func TestBacklogReadsAndDropsQueuedEvents(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	var ds []store.Dispatch
	for i, ev := range evs[:3] {
		ds = append(ds, store.Dispatch{SubscriptionID: billingPersonSub, EventID: ev.ID, Seq: int64(i + 1), Subject: "p1"})
	}
	if _, err := s.RecordDispatch(ctx, ds); err != nil {
		t.Fatal(err)
	}
	got, err := s.QueuedAfter(ctx, billingPersonSub, "p1", 1, 10)
	if err != nil || len(got) != 2 || got[0].ID != evs[1].ID || got[1].Seq != 3 || got[0].QueuedAt.IsZero() {
		t.Fatalf("backlog after 1: %+v %v", got, err)
	}
	n, err := s.CancelQueuedAfter(ctx, billingPersonSub, "p1", 2, store.EventCancelled, "subscription_removed")
	if err != nil || n != 1 {
		t.Fatalf("dropped %d, %v; want 1", n, err)
	}
	if out, _ := s.EventOutcomes(ctx, evs[2].ID); len(out) != 1 || out[0].Status != store.EventCancelled || out[0].Code != "subscription_removed" {
		t.Fatalf("outcome %+v", out)
	}
}

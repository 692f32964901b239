package store_test

import (
	"context"
	"errors"
	"testing"

	"herald/store"
)

// TestEventIDsPerSourceApp: one app cannot take the id another app will
// publish next. The second app's event with the id is accepted (not
// id_conflict); each app's own idempotency holds; look-ups by id alone say
// the id is ambiguous (the event, its outcomes), by app find each; a
// subscription's delivery batch and outcomes see only the event of its type.
func TestEventIDsPerSourceApp(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t) // contacts.person.updated events; billing subscribes
	ctx := context.Background()
	mustApply(t, s, mkManifest("billing", nil, subTo("contacts.person.updated", 1)))
	mustApply(t, s, mkManifest("mallory", nil))

	// Mallory publishes under the id contacts will use next.
	next := newEvent("contacts.person.updated", "p9", "genuine")
	squat := newEvent("mallory.thing.happened", "x", "squat")
	squat.ID = next.ID
	if ins, err := s.InsertEvents(ctx, []store.NewEvent{squat}); err != nil || ins[0].Conflict || ins[0].Duplicate {
		t.Fatalf("mallory's event: %+v, %v", ins, err)
	}
	ins, err := s.InsertEvents(ctx, []store.NewEvent{next})
	if err != nil || ins[0].Conflict || ins[0].Duplicate || ins[0].Seq == 0 {
		t.Fatalf("contacts' event under an id mallory took first: %+v, %v; want it accepted", ins, err)
	}
	// Each app's own idempotency still holds.
	again, err := s.InsertEvents(ctx, []store.NewEvent{next})
	if err != nil || !again[0].Duplicate || again[0].Seq != ins[0].Seq {
		t.Fatalf("contacts' event again: %+v, %v; want a duplicate", again, err)
	}
	changed := next
	changed.ContentHash = "other"
	if c, err := s.InsertEvents(ctx, []store.NewEvent{changed}); err != nil || !c[0].Conflict {
		t.Fatalf("contacts' id with other content: %+v, %v; want a conflict", c, err)
	}

	if _, err := s.GetEvent(ctx, next.ID); !errors.Is(err, store.ErrAmbiguousEvent) {
		t.Errorf("GetEvent of an id two apps use: %v, want ErrAmbiguousEvent", err)
	}
	if ev, err := s.GetAppEvent(ctx, "contacts", next.ID); err != nil || ev.SourceApp != "contacts" || ev.Seq != ins[0].Seq {
		t.Errorf("GetAppEvent(contacts): %+v, %v", ev, err)
	}
	if ev, err := s.GetEvent(ctx, evs[0].ID); err != nil || ev.ID != evs[0].ID {
		t.Errorf("GetEvent of an id one app uses: %+v, %v", ev, err)
	}

	// The subscription to contacts' type sees contacts' event only.
	b, err := s.DeliveryBatch(ctx, billingPersonSub, "", []string{next.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Events[next.ID]; got.Seq != ins[0].Seq || got.Type != "contacts.person.updated" || got.SourceApp != "contacts" {
		t.Fatalf("delivery batch of billing's subscription: %+v, want contacts' event (seq %d)", got, ins[0].Seq)
	}
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: next.ID, Seq: ins[0].Seq, Subject: "p9"},
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := s.EventOutcomes(ctx, next.ID); !errors.Is(err, store.ErrAmbiguousEvent) {
		t.Errorf("EventOutcomes of an id two apps use: %+v, %v; want ErrAmbiguousEvent", out, err)
	}
	if out, err := s.EventOutcomesOf(ctx, next.ID, "mallory.thing.happened", 1); err != nil || len(out) != 0 {
		t.Errorf("outcomes of mallory's event: %+v, %v; want none", out, err)
	}
	if out, err := s.EventOutcomesOf(ctx, next.ID, "contacts.person.updated", 1); err != nil || len(out) != 1 {
		t.Errorf("outcomes of contacts' event: %+v, %v; want billing's", out, err)
	}
}

// TestEnvelopesCarryTheSourceApp: two apps publish events with the same
// id; each app's look-up of the id finds its own body, never the other's,
// and an app with no event of the id finds nothing.
func TestEnvelopesCarryTheSourceApp(t *testing.T) {
	t.Parallel()
	s, _ := outcomeFixture(t) // contacts.person.updated
	ctx := context.Background()
	mustApply(t, s, mkManifest("mallory", nil))
	genuine := newEvent("contacts.person.updated", "p9", "genuine")
	squat := newEvent("mallory.thing.happened", "x", "squat")
	squat.ID = genuine.ID
	squat.Envelope = []byte(`{"id":"` + genuine.ID + `","source":"app:mallory"}`)
	for _, ev := range []store.NewEvent{squat, genuine} {
		if ins, err := s.InsertEvents(ctx, []store.NewEvent{ev}); err != nil || ins[0].Conflict || ins[0].Duplicate {
			t.Fatalf("insert %s: %+v, %v", ev.Type, ins, err)
		}
	}
	for app, want := range map[string][]byte{"contacts": genuine.Envelope, "mallory": squat.Envelope} {
		got, err := s.Envelopes(ctx, app, []string{genuine.ID, "not-a-uuid"})
		if err != nil {
			t.Fatalf("Envelopes(%s): %v", app, err)
		}
		if len(got) != 1 || string(got[genuine.ID]) != string(want) {
			t.Errorf("Envelopes(%s) = %q, want only %s's body %q", app, got, app, want)
		}
	}
	if got, err := s.Envelopes(ctx, "billing", []string{genuine.ID}); err != nil || len(got) != 0 {
		t.Errorf("Envelopes(billing) = %q, %v; want nothing", got, err)
	}
}

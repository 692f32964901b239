package relay_test

import (
	"context"
	"fmt"
	"testing"

	"herald/relay"
	"herald/store"
	"herald/workflows"
)

// TestHeldKeyIsNotSignalled: while a key's head has failed twice, or for
// good, the relay writes the rows of the key's new events and marks them
// dispatched but does not signal them (the key's workflow reads them from
// the rows once the head resolves, in order after it); a head that failed
// once, or was queued less than store.HeldAfter ago, another subscription's
// key and the key once its head is delivered are signalled as before.
func TestHeldKeyIsNotSignalled(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	billing, crm := "billing:contacts.person.updated@1", "crm:contacts.person.updated@1"
	publishN(t, p, "contacts.person.updated", "p1", 1) // seq 1
	publishN(t, p, "contacts.person.updated", "p2", 1) // seq 2
	r := &relay.Relay{Store: st, Temporal: &fakeTemporal{}}
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	head := eventIDOfSeq(t, st, 1)
	other := eventIDOfSeq(t, st, 2)
	// billing's p1 retries its head (two attempts spent); billing's p2 has
	// spent one, which a lost worker could hide from its workflow.
	if err := st.RecordOutcomes(ctx, billing, "p1", []store.OutcomeUpdate{
		{EventID: head, Seq: 1, Status: store.EventQueued, Attempts: 2, LastCode: "handler_failed"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordOutcomes(ctx, billing, "p2", []store.OutcomeUpdate{
		{EventID: other, Seq: 2, Status: store.EventQueued, Attempts: 1, LastCode: "handler_failed"}}); err != nil {
		t.Fatal(err)
	}
	// A head queued less than store.HeldAfter ago does not hold its key:
	// the events right behind a head that failed at once are signalled.
	p1 := store.KeyRef{SubscriptionID: billing, Subject: "p1"}
	if held, err := st.HeldKeys(ctx, []store.KeyRef{p1}); err != nil || held[p1] {
		t.Fatalf("a head queued just now holds its key: %v %v", held, err)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE outcomes SET queued_at = queued_at - make_interval(secs => $1)`,
		2*store.HeldAfter.Seconds()); err != nil {
		t.Fatal(err)
	}
	publishN(t, p, "contacts.person.updated", "p1", 2) // seq 3, 4
	publishN(t, p, "contacts.person.updated", "p2", 1) // seq 5
	tmp := &fakeTemporal{}
	r.Temporal = tmp
	round, err := r.DispatchOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{
		workflows.DeliveryID(crm, "p1"):     {3, 4},
		workflows.DeliveryID(billing, "p2"): {5},
		workflows.DeliveryID(crm, "p2"):     {5},
	}
	if got := tmp.bySeq(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("signals while billing's p1 holds:\n got %v\nwant %v", got, want)
	}
	if round.Held != 2 || round.Dispatched != 3 {
		t.Fatalf("round %+v, want 2 held pairs and all 3 events dispatched", round)
	}
	if lag, err := st.RelayLag(ctx); err != nil || lag.Undispatched != 0 {
		t.Fatalf("lag %+v %v: held events are dispatched all the same", lag, err)
	}
	// What the key's workflow reads when its head resolves: the rows
	// after its cursor (the head's seq), in order.
	q, err := st.KeyQueue(ctx, billing, "p1", 1, 10, nil, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Rows) != 2 || q.Rows[0].Seq != 3 || q.Rows[1].Seq != 4 {
		t.Fatalf("rows after the head %+v, want seqs 3 and 4", q.Rows)
	}

	// Failed for good: still held.
	if err := st.RecordOutcomes(ctx, billing, "p1", []store.OutcomeUpdate{
		{EventID: head, Seq: 1, Status: store.EventFailed, Attempts: 2, Code: "attempts_exhausted"}}); err != nil {
		t.Fatal(err)
	}
	publishN(t, p, "contacts.person.updated", "p1", 1) // seq 6
	tmp = &fakeTemporal{}
	r.Temporal = tmp
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tmp.bySeq(); got[workflows.DeliveryID(billing, "p1")] != nil || fmt.Sprint(got[workflows.DeliveryID(crm, "p1")]) != "[6]" {
		t.Fatalf("signals while billing's p1 has failed: %v", got)
	}

	// The head resolves (an operator cancels it): the next event is
	// signalled again; 3, 4 and 6 are the workflow's to read.
	if err := st.RecordOutcomes(ctx, billing, "p1", []store.OutcomeUpdate{
		{EventID: head, Seq: 1, Status: store.EventCancelled}}); err != nil {
		t.Fatal(err)
	}
	publishN(t, p, "contacts.person.updated", "p1", 1) // seq 7
	tmp = &fakeTemporal{}
	r.Temporal = tmp
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tmp.bySeq(); fmt.Sprint(got[workflows.DeliveryID(billing, "p1")]) != "[7]" {
		t.Fatalf("signals once billing's p1 head is cancelled: %v", got)
	}
}

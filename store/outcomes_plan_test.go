package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"herald/store"
)

// TestOneEventStatementsKeepTheirPlan: a key's usual delivery reads and
// writes one event. With it as an array parameter, PostgreSQL planned the
// statements anew on every execution (the generic plan, priced for 10
// elements, never beat a custom one for 1), which cost more than running
// them; the one-event statements keep a generic plan. Each runs
// on one connection more often than the plan cache's 5 custom plans, and
// that connection's prepared statements show how they were planned.
func TestOneEventStatementsKeepTheirPlan(t *testing.T) {
	t.Parallel()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
		{SubscriptionID: billingPersonSub, EventID: evs[1].ID, Seq: 2, Subject: "p1"},
	}); err != nil {
		t.Fatal(err)
	}
	// A log and outcome rows of some size, with statistics, as a running
	// deployment has: on a few unanalysed rows every plan costs the same.
	var more []store.NewEvent
	var dispatch []store.Dispatch
	for i := range 2000 {
		ev := newEvent("contacts.person.updated", fmt.Sprintf("k%d", i), "h")
		more = append(more, ev)
		dispatch = append(dispatch, store.Dispatch{SubscriptionID: billingPersonSub, EventID: ev.ID, Subject: ev.Subject})
	}
	seqs, err := s.InsertEvents(ctx, more)
	if err != nil {
		t.Fatal(err)
	}
	for i := range dispatch {
		dispatch[i].Seq = seqs[i].Seq
	}
	if _, err := s.RecordDispatch(ctx, dispatch); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `ANALYZE events, outcomes, subscriptions, apps`); err != nil {
		t.Fatal(err)
	}
	one, err := store.Open(ctx, s.Pool.Config().ConnString(), store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	const runs = 14 // 7 of each write
	for i := range runs {
		b, err := one.DeliveryBatch(ctx, billingPersonSub, "", []string{evs[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) != 1 || b.Events[evs[0].ID].Seq != 1 || b.Target.App != "billing" {
			t.Fatalf("run %d: batch %+v", i, b)
		}
		// Both forms of the write: with a delivery (the failed-key probe
		// rides along) and without.
		status := store.EventQueued
		if i%2 == 1 {
			status = store.EventDelivered
		}
		if err := one.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
			{EventID: evs[1].ID, Seq: 2, Status: status, Attempts: i + 1, LastError: "HTTP 500"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := s.DeliveryBatch(ctx, billingPersonSub, "", []string{evs[1].ID})
	if err != nil || b.Events[evs[1].ID].Outcome != store.EventDelivered {
		t.Fatalf("one-row write: %+v, %v", b.Events, err)
	}

	rows, err := one.Pool.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var stmt string
		var generic, custom int64
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		var name string
		switch {
		case strings.Contains(stmt, "LEFT JOIN events e ON"):
			name = "delivery batch"
		case strings.Contains(stmt, "INSERT INTO outcomes") && strings.Contains(stmt, "WITH written"):
			name = "outcome write with a delivery"
		case strings.Contains(stmt, "INSERT INTO outcomes"):
			name = "outcome write"
		default:
			continue
		}
		seen[name] = true
		if generic == 0 || custom > 5 {
			t.Errorf("%s: %d generic and %d custom plans in %d runs; want the generic plan kept\n%s",
				name, generic, custom, runs, stmt)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"delivery batch", "outcome write with a delivery", "outcome write"} {
		if !seen[name] {
			t.Errorf("%s: not among the connection's prepared statements", name)
		}
	}
}

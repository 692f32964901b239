package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"herald/filter"
	"herald/relay"
	"herald/workflows"
)

// TestCostlyFilterRestsAfterAStreak: a filter that runs into its cost limit
// on every event, one event per round (a paced stream never spends a
// round's budget), rests after relay.FilterErrorStreak such evaluations in
// a row: its next events are delivered unjudged, counted under cost_limit,
// without evaluation. An evaluation that succeeds breaks the streak.
func TestCostlyFilterRestsAfterAStreak(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	const costly = `data.items.all(x, int(x) in data.items)`
	subscribe(t, st, "billing", costly, true)
	// Each `in` is charged the list's 2,000 items: the cost limit after
	// some 50 cheap steps, far within the deadline even under -race.
	heavy := `{"items":[` + strings.TrimSuffix(strings.Repeat("1,", 2000), ",") + `],"s":""}`
	obs := &countingObserver{}
	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp, Observer: obs}
	n := 0
	one := func(data string) relay.Round {
		t.Helper()
		n++
		publishData(t, p, fmt.Sprintf("p%d", n), data)
		round, _ := dispatchWithin(t, r, time.Minute)
		return round
	}
	for i := 1; i < relay.FilterErrorStreak; i++ {
		if round := one(heavy); round.FilterErrors != 1 {
			t.Fatalf("heavy event %d: round %+v, want one filter error", i, round)
		}
	}
	if obs.errors(billingSub, filter.ReasonCost) != relay.FilterErrorStreak-1 {
		t.Fatalf("filter errors %v, want %d cost_limit (the event must hit the limit)", obs.byReason, relay.FilterErrorStreak-1)
	}
	// A cheap event judged (a match) breaks the streak.
	if round := one(`{"items":[1],"s":""}`); round.FilterErrors != 0 {
		t.Fatalf("cheap event: round %+v, want it judged", round)
	}
	for i := 1; i < relay.FilterErrorStreak; i++ {
		one(heavy)
	}
	if _, rests := r.FilterRests(billingSub, costly); rests {
		t.Fatalf("the filter rests after %d costly evaluations in a row, want %d", relay.FilterErrorStreak-1, relay.FilterErrorStreak)
	}
	one(heavy)
	reason, rests := r.FilterRests(billingSub, costly)
	if !rests || reason != filter.ReasonCost {
		t.Fatalf("after %d costly evaluations in a row the filter rests %v (reason %q), want it resting on cost_limit",
			relay.FilterErrorStreak, rests, reason)
	}
	// Resting: delivered unjudged and counted, even a cheap event.
	before := obs.errors(billingSub, filter.ReasonCost)
	if round := one(`{"items":[1],"s":""}`); round.FilterErrors != 1 || round.Filtered != 0 {
		t.Fatalf("while resting: round %+v, want the event delivered on a filter error", round)
	}
	if obs.errors(billingSub, filter.ReasonCost) != before+1 {
		t.Fatalf("filter errors %v, want the resting filter's event counted under cost_limit", obs.byReason)
	}
	delivered := 0
	for id, seqs := range tmp.bySeq() {
		if strings.HasPrefix(id, workflows.DeliveryID(billingSub, "")) {
			delivered += len(seqs)
		}
	}
	if delivered != n {
		t.Fatalf("billing was signalled %d events, want all %d", delivered, n)
	}
}

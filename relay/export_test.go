package relay

import (
	"context"
	"time"

	"herald/store"
)

// FilterRests reports whether the filter text of subscription id rests now,
// and the reason its events are counted under meanwhile.
func (r *Relay) FilterRests(id, text string) (string, bool) { return r.resting(id, text, time.Now()) }

// FilterErrorStreak is filterErrorStreak.
const FilterErrorStreak = filterErrorStreak

// AbandonOnStop makes r stop, when its context ends, as a frozen worker
// would: giving nothing back.
func AbandonOnStop(r *Relay) { r.abandon = true }

// RestFilter makes the filter text of subscription id rest now, its events
// counted under reason, as after a timeout or a streak of costly rounds.
func RestFilter(r *Relay, id, text, reason string) { r.rest(id, text, reason, time.Now()) }

// EndFilterRest ends the rest of the filter text of subscription id, as
// its cooldown running out would.
func EndFilterRest(r *Relay, id, text string) { r.resting(id, text, time.Now().Add(filterCooldown)) }

// ReconcileOnce runs r's reconcile once with m, from no loops, as serve's
// first does (after Run's defaults); stop ends the loops it started.
func ReconcileOnce(ctx context.Context, r *Relay, m *store.Member) (stop func()) {
	r.defaults()
	lctx, cancel := context.WithCancel(ctx)
	loops := map[int]*partitionLoop{}
	r.reconcile(lctx, m, loops, make(chan *partitionLoop))
	return func() {
		cancel()
		for _, l := range loops {
			<-l.done
		}
	}
}

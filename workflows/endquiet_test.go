package workflows_test

import (
	"reflect"
	"testing"
	"time"

	"herald/activities"
	"herald/workflows"
)

// TestQuietKeyEnds: with Params.EndQuietKeys (HERALD_END_QUIET_KEYS) a run
// that took no event signal completes once the rows say the key owes
// nothing, without waiting out its idle timeout; a run that took a signal,
// or found more rows before ending, waits idle as before. Without the
// setting every run waits idle.
func TestQuietKeyEnds(t *testing.T) {
	t.Parallel()
	const idle = 10 * time.Minute
	for _, tc := range []struct {
		name     string
		endQuiet bool
		signal   bool // the event also comes as a signal
		late     bool // a second row appears while the first is delivered
		want     []string
		waits    bool
	}{
		{name: "quiet key, setting on", endQuiet: true, want: ids(1)},
		{name: "quiet key, setting off", want: ids(1), waits: true},
		{name: "signalled key", endQuiet: true, signal: true, want: ids(1), waits: true},
		{name: "a row comes before the end", endQuiet: true, late: true, want: ids(1, 2), waits: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.firstAttemptVersion(workflows.OneMarkerVersion)
			h.params.IdleTimeout = idle
			h.params.EndQuietKeys = tc.endQuiet
			h.store.dispatched = []int64{1} // the relay's row, as for an eager start
			if tc.signal {
				h.eventsAt(0, 1)
			}
			if tc.late {
				h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
					if id == eventID(1) {
						h.store.mu.Lock()
						h.store.dispatched = append(h.store.dispatched, 2) // written, not signalled
						h.store.mu.Unlock()
					}
					return activities.PostResult{}
				})
			}
			h.run()
			if got := h.sub.delivered(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
			took := h.env.Now().Sub(h.start)
			if tc.waits && took < idle {
				t.Fatalf("completed after %v, want the idle timeout (%v) waited", took, idle)
			}
			if !tc.waits && took >= time.Minute {
				t.Fatalf("completed after %v, want at once", took)
			}
		})
	}
}

package workflows_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"

	"herald/activities"
	"herald/workflows"
)

// TestQuietKeyEnds: with Params.EndQuietKeys (HERALD_END_QUIET_KEYS) a run
// that took no event signal completes once the rows say the key owes
// nothing, without waiting out its idle timeout; a run that took a signal,
// or found more rows before ending, waits idle as before. Without the
// setting every run waits idle. The delivery that empties a quiet run's
// queue reads the rows after it in the same local activity
// (DeliverInput.ThenRead), so the run ends with no local read of its own
// (localReads counts those after the start's), unless that read failed.
func TestQuietKeyEnds(t *testing.T) {
	t.Parallel()
	const idle = 10 * time.Minute
	for _, tc := range []struct {
		name     string
		endQuiet bool
		signal   bool // the event also comes as a signal
		late     bool // a second row appears while the first is delivered
		// failRead fails the delivery's read of the rows after it.
		failRead   bool
		want       []string
		waits      bool
		localReads int
	}{
		{name: "quiet key, setting on", endQuiet: true, want: ids(1)},
		{name: "quiet key, setting off", want: ids(1), waits: true, localReads: 1},
		{name: "signalled key", endQuiet: true, signal: true, want: ids(1), waits: true, localReads: 1},
		{name: "a row comes before the end", endQuiet: true, late: true, want: ids(1, 2), waits: true, localReads: 1},
		{name: "the delivery's read fails", endQuiet: true, failRead: true, want: ids(1), localReads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.firstAttemptVersion(workflows.OneMarkerVersion)
			h.params.IdleTimeout = idle
			h.params.EndQuietKeys = tc.endQuiet
			h.store.dispatched = []int64{1} // the relay's row, as for an eager start
			if tc.failRead {
				h.store.failQueueRead = func(n int) bool { return n == 2 }
			}
			localReads := 0
			h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
				if info.ActivityType.Name == "KeyQueue" {
					localReads++
				}
			})
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
			if localReads != tc.localReads {
				t.Fatalf("the run read the key's rows in %d local activities of its own after the start's, want %d", localReads, tc.localReads)
			}
		})
	}
}

package workflows_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// TestQuietKeyEnds: with Params.EndQuietKeys (HERALD_END_QUIET_KEYS), or
// the relay's hint Params.Quiet in the input, a run that took no event
// signal completes once the rows say the key owes nothing, without waiting
// out its idle timeout; a run that took a signal, found more rows before
// ending, or was started with the hint Params.Busy waits idle as before.
// Without the setting or the hint every run waits idle. The delivery that empties a quiet run's
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
		failRead bool
		// quiet and busy are the relay's hints in the run's input.
		quiet, busy bool
		want        []string
		waits       bool
		localReads  int
	}{
		{name: "quiet key, setting on", endQuiet: true, want: ids(1)},
		{name: "quiet key, setting off", want: ids(1), waits: true, localReads: 1},
		{name: "signalled key", endQuiet: true, signal: true, want: ids(1), waits: true, localReads: 1},
		{name: "a row comes before the end", endQuiet: true, late: true, want: ids(1, 2), waits: true, localReads: 1},
		{name: "the delivery's read fails", endQuiet: true, failRead: true, want: ids(1), localReads: 1},
		{name: "quiet hint, setting off", quiet: true, want: ids(1)},
		{name: "busy hint, setting on", endQuiet: true, busy: true, want: ids(1), waits: true, localReads: 1},
		{name: "busy and quiet hints", quiet: true, busy: true, want: ids(1), waits: true, localReads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := quietHarness(t, tc.endQuiet, 1)
			h.params.Quiet, h.params.Busy = tc.quiet, tc.busy
			if tc.failRead {
				h.store.failQueueRead = func(n int) bool { return n == 2 }
			}
			localReads := countLocalReads(h)
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
			if *localReads != tc.localReads {
				t.Fatalf("the run read the key's rows in %d local activities of its own after the start's, want %d", *localReads, tc.localReads)
			}
		})
	}
}

// TestQuietReadNotReusedAfterAnAction: an operator's pause taken while the
// quiet run's delivery runs makes the run no longer quiet, so the rows that
// delivery read are not what ends it: a row written later (not signalled)
// is delivered after the resume, not stranded by the earlier read.
func TestQuietReadNotReusedAfterAnAction(t *testing.T) {
	t.Parallel()
	h := quietHarness(t, true, 1)
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) { // paused while the quiet delivery runs
			h.env.SignalWorkflow(workflows.SignalPause, workflows.ControlSignal{})
		}
		return activities.PostResult{}
	})
	h.at(time.Minute, func() {
		h.store.mu.Lock()
		h.store.dispatched = append(h.store.dispatched, 2) // written, not signalled
		h.store.mu.Unlock()
	})
	h.signalAt(2*time.Minute, workflows.SignalResume, workflows.ControlSignal{})
	h.run()
	if got, want := h.sub.delivered(), ids(1, 2); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

// TestQuietReadOnlyInItsTask: the rows a quiet run's delivery read decide
// its end only in that workflow task. Here the run's read of its backlog
// fails after the delivery, it waits (a later task), and the read then
// finds the backlog gone: the run reads the rows again for itself and
// completes, rather than going by what the delivery read (which still
// named the settled row).
func TestQuietReadOnlyInItsTask(t *testing.T) {
	t.Parallel()
	h := quietHarness(t, true, 1, 2, 3, 4, 5)
	h.params.MaxQueue = 4 // the start reads 4 of the 5
	h.env.SetCurrentHistoryLength(3)
	h.store.failQueueRead = func(n int) bool {
		// Reads: 1 the start's, 2 the delivery's (it finds 5), 3 the
		// backlog's, which fails; meanwhile row 5 is settled elsewhere
		// and the run's next task begins.
		if n == 3 {
			h.store.outcomes[eventID(5)] = store.EventCancelled
			h.env.SetCurrentHistoryLength(9)
			return true
		}
		return false
	}
	localReads := countLocalReads(h)
	h.run()
	if got, want := h.sub.delivered(), ids(1, 2, 3, 4); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	// The backlog's two reads, then the run's own before it completes, at
	// once: on the delivery's read it would have queued row 5 again and
	// waited out its idle timeout.
	if *localReads != 3 {
		t.Fatalf("the run read the key's rows in %d local activities after the start's, want 3", *localReads)
	}
	if took := h.env.Now().Sub(h.start); took >= time.Minute {
		t.Fatalf("completed after %v, want at once", took)
	}
}

// TestQuietKeyKeepsItsLease: a quiet run whose delivery could not give the
// key's lease back (the database did not answer) does not end: the lease
// is its run's, and the key's next run would wait for it to lapse. It
// waits idle, as a run that took a signal does.
func TestQuietKeyKeepsItsLease(t *testing.T) {
	t.Parallel()
	h := quietHarness(t, true, 1)
	h.store.releaseErr = errors.New("the database did not answer")
	h.run()
	if got, want := h.sub.delivered(), ids(1); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if took := h.env.Now().Sub(h.start); took < 10*time.Minute {
		t.Fatalf("completed after %v, want the idle timeout waited", took)
	}
}

// quietHarness is a harness whose run ends quiet (Params.EndQuietKeys) or
// waits idle 10 minutes, with the relay's rows of seqs, as for an eager start.
func quietHarness(t *testing.T, endQuiet bool, seqs ...int64) *harness {
	h := newHarness(t)
	h.firstAttemptVersion(workflows.OneMarkerVersion)
	h.params.IdleTimeout = 10 * time.Minute
	h.params.EndQuietKeys = endQuiet
	h.store.dispatched = seqs
	return h
}

// countLocalReads counts the run's local reads of the key's rows (KeyQueue;
// the start's read is DeliveryStart).
func countLocalReads(h *harness) *int {
	n := new(int)
	h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if info.ActivityType.Name == "KeyQueue" {
			*n++
		}
	})
	return n
}

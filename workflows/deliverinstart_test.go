package workflows_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// startWatch counts a run's activities by type, local and regular, and
// keeps what each of its start's reads answered.
type startWatch struct {
	local, regular map[string]int
	starts         []workflows.StartResult
}

func watchStarts(t *testing.T, h *harness) *startWatch {
	w := &startWatch{local: map[string]int{}, regular: map[string]int{}}
	h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if isStart(info) {
			w.local[workflows.StartActivity]++
			return
		}
		w.local[info.ActivityType.Name]++
	})
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		w.regular[info.ActivityType.Name]++
	})
	h.env.SetOnLocalActivityCompletedListener(func(info *activity.Info, result converter.EncodedValue, err error) {
		if !isStart(info) || err != nil {
			return
		}
		var res workflows.StartResult
		if err := result.Get(&res); err != nil || res.Settings.SubscriptionID == "" {
			return // another local activity's result, under the same name
		}
		w.starts = append(w.starts, res)
	})
	return w
}

// quietStart is the harness of a quiet key's run the relay started with
// version in its input (Params.Quiet), its rows owing the events seqs.
func quietStart(t *testing.T, version int, seqs ...int64) *harness {
	h := quietHarness(t, false, seqs...)
	h.params.Quiet = true
	h.params.Version = version
	return h
}

// isStart: the local activity may be StartActivity. The test environment
// names the closures Register registers, and the listener sees other local
// activities, under one of their names; a result is a start's only if it
// has the settings.
func isStart(info *activity.Info) bool {
	return info.ActivityType.Name == workflows.StartActivity || info.ActivityType.Name == workflows.SettingsActivity
}

// TestDeliverInStart: a quiet key's run the relay started bare at
// DeliverInStartVersion delivers what its rows owe in its start's read,
// one local activity in all, and ends there: no Deliver local activity,
// no read of its own before it ends, the key's order and outcome rows as
// a local attempt leaves them. A head that failed the first time goes to
// a regular activity, as after any local attempt.
func TestDeliverInStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		seqs []int64
		fail bool // the first POST answers 500
	}{
		{name: "one event", seqs: []int64{1}},
		{name: "two events, one batch", seqs: []int64{1, 2}},
		{name: "the first attempt fails", seqs: []int64{1}, fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := quietStart(t, workflows.DeliverInStartVersion, tc.seqs...)
			if tc.fail {
				h.sub.setRespond(func(_ string, _, nth int) activities.PostResult {
					if nth == 0 {
						return fail(activities.CodeHandlerFailed, 500)
					}
					return activities.PostResult{}
				})
			}
			w := watchStarts(t, h)
			h.run()
			if got, want := h.sub.delivered(), ids(tc.seqs...); !reflect.DeepEqual(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
			for _, seq := range tc.seqs {
				if o := h.store.outcome(eventID(seq)); o != store.EventDelivered {
					t.Fatalf("event %d's outcome row is %q, want delivered", seq, o)
				}
			}
			if len(w.starts) != 1 || w.starts[0].First == nil {
				t.Fatalf("start reads %+v, want one that delivered", w.starts)
			}
			if got := w.starts[0].First.Events; len(got) != len(tc.seqs) || got[0] != event(tc.seqs[0]) {
				t.Fatalf("the start delivered %v, want the batch of %v", got, tc.seqs)
			}
			if w.local[workflows.StartActivity] != 1 || w.local["Deliver"] != 0 {
				t.Fatalf("local activities %v, want the start's read alone", w.local)
			}
			if tc.fail {
				if w.regular["Deliver"] == 0 {
					t.Fatalf("activities %v, want the retry as a regular Deliver", w.regular)
				}
				return
			}
			if len(w.regular) != 0 || w.local["KeyQueue"] != 0 {
				t.Fatalf("activities %v and local %v after the start, want none: the start's read after its delivery decides",
					w.regular, w.local)
			}
			if took := h.env.Now().Sub(h.start); took >= time.Minute {
				t.Fatalf("completed after %v, want at once", took)
			}
		})
	}
}

// TestDeliverInStartOnlyWhatARunWould: the start's read delivers nothing
// a fresh run would not deliver at once as its local first attempt: a
// paused key, a failed head, an event at its hold expiry, a run at
// BareStartVersion, or one not started quiet-bare. Each is left to the run,
// which does what it did before (holds, expires, delivers in a Deliver
// local activity).
func TestDeliverInStartOnlyWhatARunWould(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		version int
		setup   func(h *harness)
		// want: the events delivered; expired: the one that expires instead.
		want    []string
		expired string
		local   int // Deliver local activities
		// attempt is the first POST's attempt number (0: 1); after, the
		// workflow time before which nothing may go.
		attempt int
		after   time.Duration
	}{
		{name: "BareStartVersion", version: workflows.BareStartVersion, want: ids(1), local: 1},
		{name: "NoMarkerVersion", version: workflows.NoMarkerVersion, want: ids(1), local: 1},
		{name: "paused", version: workflows.DeliverInStartVersion, setup: func(h *harness) {
			h.store.paused = true
			h.signalAt(time.Minute, workflows.SignalResume, workflows.ControlSignal{})
		}, want: ids(1), local: 1},
		// Re-armed after its cooldown, then a local attempt.
		{name: "failed head", version: workflows.DeliverInStartVersion, setup: func(h *harness) {
			h.store.outcomes[eventID(1)] = store.EventFailed
		}, want: ids(1), local: 1},
		{name: "past its hold expiry", version: workflows.DeliverInStartVersion, setup: func(h *harness) {
			h.params.HoldExpiry = time.Hour
			h.store.queuedAt = time.Now().Add(-time.Hour - time.Second)
		}, expired: eventID(1)},
		// A head an earlier run tried: its next attempt is a regular
		// activity's, numbered after the row's.
		{name: "head tried before", version: workflows.DeliverInStartVersion, setup: func(h *harness) {
			h.store.rowAttempts = map[string]int{eventID(1): 1}
		}, want: ids(1), attempt: 2},
		// An operator's pause that came with the run's first task is
		// applied before anything goes.
		{name: "paused by a signal in the first task", version: workflows.DeliverInStartVersion, setup: func(h *harness) {
			h.signalAt(0, workflows.SignalPause, workflows.ControlSignal{})
			h.signalAt(time.Minute, workflows.SignalResume, workflows.ControlSignal{})
		}, want: ids(1), local: 1, after: time.Minute},
		// A start's read tried again (its first try failed) reads only: a
		// delivery in it would count the retry as the event's attempt.
		{name: "the start's read tried again", version: workflows.DeliverInStartVersion, setup: func(h *harness) {
			h.store.failQueueRead = func(n int) bool { return n == 1 }
		}, want: ids(1), local: 1},
		// Not expired yet when the run looks, but close: left to the run.
		{name: "within a minute of its hold expiry", version: workflows.DeliverInStartVersion, setup: func(h *harness) {
			h.params.HoldExpiry = time.Hour
			h.store.queuedAt = time.Now().Add(-time.Hour + 30*time.Second)
		}, want: ids(1), local: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := quietStart(t, tc.version, 1)
			if tc.setup != nil {
				tc.setup(h)
			}
			w := watchStarts(t, h)
			h.run()
			if len(w.starts) == 0 {
				t.Fatal("no start read")
			}
			for i, s := range w.starts {
				if s.First != nil {
					t.Fatalf("start read %d delivered %v, want nothing", i, s.First.Events)
				}
			}
			if got := h.sub.delivered(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
			if tc.expired != "" {
				if o := h.store.outcome(tc.expired); o != store.EventExpired {
					t.Fatalf("the event's outcome row is %q, want expired", o)
				}
			}
			want := max(tc.attempt, 1)
			for _, c := range h.sub.all() {
				if c.Attempt != want {
					t.Fatalf("a POST of %s made as attempt %d, want %d", c.EventID, c.Attempt, want)
				}
			}
			if went := h.sub.start.Sub(h.start); tc.after > 0 && went < tc.after {
				t.Fatalf("the first POST went %v after the start, want after %v", went, tc.after)
			}
			if w.local["Deliver"] != tc.local {
				t.Fatalf("%d Deliver local activities, want %d (local %v, regular %v)", w.local["Deliver"], tc.local, w.local, w.regular)
			}
		})
	}
}

// TestDeliverInStartBatchEndsAtATriedEvent: the start's batch is the run's:
// an event an earlier run tried ends it, so it goes in its turn, after the
// head, as a regular activity's.
func TestDeliverInStartBatchEndsAtATriedEvent(t *testing.T) {
	t.Parallel()
	h := quietStart(t, workflows.DeliverInStartVersion, 1, 2, 3)
	h.store.rowAttempts = map[string]int{eventID(2): 1}
	w := watchStarts(t, h)
	h.run()
	if len(w.starts) == 0 || w.starts[0].First == nil {
		t.Fatalf("start reads %+v, want the first to deliver", w.starts)
	}
	if got := w.starts[0].First.Events; !reflect.DeepEqual(got, []activities.Event{event(1)}) {
		t.Fatalf("the start delivered %v, want event 1 alone", got)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Fatalf("delivered %v, want 1, 2, 3", got)
	}
}

// TestDeliverInStartAfterFailedReads: a run whose start's read failed both
// tries reads again on a later turn (refillFromLog); that read may deliver
// too, and the run applies it there: one POST, the run's own.
func TestDeliverInStartAfterFailedReads(t *testing.T) {
	t.Parallel()
	h := quietStart(t, workflows.DeliverInStartVersion, 1)
	h.store.failQueueRead = func(n int) bool { return n <= 2 }
	w := watchStarts(t, h)
	h.run()
	if len(w.starts) != 1 || w.starts[0].First == nil {
		t.Fatalf("start reads %+v, want one, the later turn's, that delivered", w.starts)
	}
	if n := len(h.sub.callsFor(eventID(1))); n != 1 {
		t.Fatalf("event 1 POSTed %d times, want once", n)
	}
	if w.local["Deliver"] != 0 {
		t.Fatalf("local activities %v, want no Deliver of the run's own", w.local)
	}
}

// TestDeliverInStartUnderTheSubscriptionsPolicy: the start's read delivers
// under the subscription's maxAttempts, as the run's own first attempt
// does: with one attempt allowed and a subscriber answering 500, the key
// makes one POST and holds its head exhausted, whether the run delivers
// in its read (DeliverInStartVersion) or after it (BareStartVersion).
func TestDeliverInStartUnderTheSubscriptionsPolicy(t *testing.T) {
	t.Parallel()
	for _, version := range []int{workflows.BareStartVersion, workflows.DeliverInStartVersion} {
		t.Run(fmt.Sprint("version ", version), func(t *testing.T) {
			h := quietStart(t, version, 1)
			h.params.MaxRearms = workflows.NoRearms
			h.store.setPolicy(store.Policy{MaxAttempts: 1})
			h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
			w := watchStarts(t, h)
			held := h.queryAt(time.Hour)
			h.signalAt(2*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
			h.run()
			if inStart := len(w.starts) > 0 && w.starts[0].First != nil; inStart != (version == workflows.DeliverInStartVersion) {
				t.Fatalf("the start's read delivered: %v at version %d", inStart, version)
			}
			if n := len(h.sub.callsFor(eventID(1))); n != 1 {
				t.Fatalf("event 1 POSTed %d times, want once (maxAttempts 1)", n)
			}
			if held.Head == nil || held.Head.MaxAttempts != 1 || held.Head.Code != activities.CodeAttemptsExhausted {
				t.Fatalf("held head %+v, want event 1 exhausted after its one attempt", held.Head)
			}
			// The attempt's own row says so: a task lost before the run
			// learnt of it leaves the next run a failed head, not one to
			// try again.
			var first *store.OutcomeUpdate
			for i, u := range h.store.updates {
				if u.EventID == eventID(1) {
					first = &h.store.updates[i]
					break
				}
			}
			if first == nil || first.Status != store.EventFailed || first.Code != activities.CodeAttemptsExhausted || first.Attempts != 1 {
				t.Fatalf("the attempt's outcome row %+v, want failed, attempts_exhausted, 1 attempt", first)
			}
		})
	}
}

// TestDeliverInStartAfterAnUpdateInTheFirstTask: an operator's Update that
// came with the run's first workflow task is applied before anything goes,
// as it was before the start's read could deliver: a pause holds the key
// until the resume, a cancel of the event settles it unsent.
func TestDeliverInStartAfterAnUpdateInTheFirstTask(t *testing.T) {
	t.Parallel()
	for _, version := range []int{workflows.BareStartVersion, workflows.DeliverInStartVersion} {
		t.Run(fmt.Sprint("pause, version ", version), func(t *testing.T) {
			h := quietStart(t, version, 1)
			pause := h.updateAt(0, workflows.UpdatePause, workflows.ControlSignal{Actor: "ann"})
			h.updateAt(time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
			w := watchStarts(t, h)
			h.run()
			for i, s := range w.starts {
				if s.First != nil {
					t.Fatalf("start read %d delivered %v, want nothing: the pause came first", i, s.First.Events)
				}
			}
			if !pause.result.Changed {
				t.Fatalf("the pause answered %+v, want it applied", pause.result)
			}
			if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
				t.Fatalf("delivered %v, want event 1 after the resume", got)
			}
			if went := h.sub.start.Sub(h.start); went < time.Minute {
				t.Fatalf("the first POST went %v after the start, want after the resume at 1m", went)
			}
		})
		t.Run(fmt.Sprint("cancel, version ", version), func(t *testing.T) {
			h := quietStart(t, version, 1)
			cancel := h.updateAt(0, workflows.UpdateCancel, workflows.CancelSignal{EventID: eventID(1), Actor: "ann"})
			h.run()
			if n := len(h.sub.all()); n != 0 {
				t.Fatalf("%d POSTs, want none: the event was cancelled first", n)
			}
			if !reflect.DeepEqual(cancel.result.Cancelled, ids(1)) {
				t.Fatalf("the cancel answered %+v, want event 1 cancelled", cancel.result)
			}
			if o := h.store.outcome(eventID(1)); o != store.EventCancelled {
				t.Fatalf("event 1's outcome row is %q, want cancelled", o)
			}
		})
	}
}

package workflows_test

import (
	"reflect"
	"testing"
	"time"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// Review of the merged heldkeys and errpolicy branches: a head that is
// settled by onFailure skip, after failed attempts the run learned of only
// from one regular execution's result (no turn began with the head showing
// attempts), left the relay's unsignalled rows unread until the key's idle
// timeout.

// lastCall is when the last POST of event seq was made.
func (h *harness) lastCall(seq int64) time.Duration {
	calls := h.sub.callsFor(eventID(seq))
	if len(calls) == 0 {
		return 0
	}
	return calls[len(calls)-1].At
}

// TestSkipAfterRetriedExecutionReadsUnsignalledEvents: under onFailure
// skip, a head whose attempts all ran inside one regular execution (its
// local first attempt was lost with its worker; Temporal retried the rest)
// is skipped; the event the relay left unsignalled meanwhile (the head's
// row showed two attempts) goes at once, not after the idle timeout.
func TestSkipAfterRetriedExecutionReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureSkip, MaxAttempts: 3})
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		switch {
		case id != eventID(1):
			return activities.PostResult{Status: 204}
		case nth == 0:
			panic("the worker of the local attempt dies")
		case nth == 2:
			// The relay writes row 2 and, seeing the head's row at two
			// attempts, does not signal it.
			h.store.mu.Lock()
			h.store.dispatched = append(h.store.dispatched, 2)
			h.store.mu.Unlock()
		}
		return fail(activities.CodeHandlerFailed, 500)
	})
	h.eventsAt(0, 1)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2)) {
		t.Fatalf("delivered %v, want 2 behind the skipped event", got)
	}
	if got := h.store.outcome(eventID(1)); got != store.EventCancelled {
		t.Fatalf("event 1's outcome %q, want cancelled (skipped)", got)
	}
	next, _ := h.firstOK(2)
	if wait := next - h.lastCall(1); wait > 10*time.Second {
		t.Fatalf("event 2 was delivered %v after its head was skipped: it waited for the idle timeout", wait)
	}
}

// TestRedeliveredSkippedEventReadsUnsignalledEvents: a skipped event that
// an operator redelivers fails again and is skipped again. Its attempts run
// in one regular execution (this run made its local first attempt the
// first time and delivered nothing since), so the run never began a turn
// with the head showing attempts; the event the relay left unsignalled
// meanwhile goes at once.
func TestRedeliveredSkippedEventReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureSkip, MaxAttempts: 3})
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id != eventID(1) {
			return activities.PostResult{Status: 204}
		}
		if nth == 4 { // the redelivery's second attempt
			h.store.mu.Lock()
			h.store.dispatched = append(h.store.dispatched, 2)
			h.store.mu.Unlock()
		}
		return fail(activities.CodeHandlerFailed, 500)
	})
	h.eventsAt(time.Second, 1)
	h.signalAt(5*time.Minute, workflows.SignalRedeliver, workflows.RedeliverSignal{EventID: eventID(1), Actor: "ann"})
	h.run()
	if n := len(h.sub.callsFor(eventID(1))); n != 6 {
		t.Fatalf("event 1 got %d POSTs, want 3 and 3 on its redelivery", n)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2)) {
		t.Fatalf("delivered %v, want 2 behind the redelivered, skipped event", got)
	}
	next, _ := h.firstOK(2)
	if wait := next - h.lastCall(1); wait > 10*time.Second {
		t.Fatalf("event 2 was delivered %v after the redelivered head was skipped: it waited for the idle timeout", wait)
	}
}

// TestCancelDuringRetriedExecutionReadsUnsignalledEvents: an operator
// cancels a head while the one regular execution that makes all its
// attempts waits for its next retry; the relay saw the head's row at two
// attempts and did not signal the event behind it. After the cancel that
// event goes at once, not after the idle timeout.
func TestCancelDuringRetriedExecutionReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		switch {
		case id != eventID(1):
			return activities.PostResult{Status: 204}
		case nth == 0:
			panic("the worker of the local attempt dies")
		case nth == 2:
			h.store.mu.Lock()
			h.store.dispatched = append(h.store.dispatched, 2)
			h.store.mu.Unlock()
		}
		return fail(activities.CodeHandlerFailed, 500)
	})
	h.eventsAt(0, 1)
	cancel := h.updateAt(3*time.Minute, workflows.UpdateCancel, workflows.CancelSignal{EventID: eventID(1), Actor: "alice"})
	h.run()
	if !cancel.done || !cancel.result.Changed {
		t.Fatalf("cancel answered %+v", cancel)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2)) {
		t.Fatalf("delivered %v, want 2 after the cancelled head", got)
	}
	if at, _ := h.firstOK(2); at > 3*time.Minute+10*time.Second {
		t.Fatalf("event 2 was delivered %v after the first POST; the cancel was at 3m", at)
	}
}

// TestExhaustedHeadRedeliveredReadsUnsignalledEvents: a head that failed
// for good under hold with its re-arms used up (exhausted) and that an
// operator redelivers lets the events the relay left unsignalled go right
// behind it, not after the idle timeout.
func TestExhaustedHeadRedeliveredReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.params.MaxRearms = workflows.NoRearms
	h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureHold, MaxAttempts: 2})
	fixed := false
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) && !fixed {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.rowAt(time.Minute, 2, 3)
	st := h.queryAt(2 * time.Minute)
	h.at(3*time.Minute, func() { fixed = true })
	redeliver := h.updateAt(3*time.Minute, workflows.UpdateRedeliver, workflows.RedeliverSignal{Actor: "alice"})
	h.run()
	if st.Status != workflows.StatusExhausted {
		t.Fatalf("before the redeliver the key shows %q, want exhausted", st.Status)
	}
	if !redeliver.done || !redeliver.result.Changed {
		t.Fatalf("redeliver answered %+v", redeliver)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Fatalf("delivered %v, want 1, 2, 3", got)
	}
	if at, _ := h.firstOK(3); at > 3*time.Minute+10*time.Second {
		t.Fatalf("event 3 was delivered %v after the first POST; the redeliver was at 3m", at)
	}
}

// TestRearmedHeadReadsEventsUnsignalledDuringItsAttempt: a re-arm writes
// no outcome row, so the head's row stays failed, and the relay leaves the
// key's new events unsignalled, until the re-armed attempt's result lands.
// An event that arrives while that attempt delivers the head goes right
// behind it, not after the idle timeout.
func TestRearmedHeadReadsEventsUnsignalledDuringItsAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		switch {
		case id != eventID(1):
			return activities.PostResult{Status: 204}
		case nth == 0:
			return fail(activities.CodeSchemaMismatch, 422)
		}
		// The re-armed attempt: the head's row still says failed, so the
		// relay writes row 2 without a signal.
		h.store.mu.Lock()
		h.store.dispatched = append(h.store.dispatched, 2)
		h.store.mu.Unlock()
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1, then 2", got)
	}
	head, _ := h.firstOK(1)
	next, _ := h.firstOK(2)
	if head < workflows.DefaultRearmCooldown {
		t.Fatalf("event 1 was delivered %v after its first POST, want after its re-arm", head)
	}
	if next-head > 10*time.Second {
		t.Fatalf("event 2 was delivered %v after the re-armed head: it waited for the idle timeout", next-head)
	}
}

// TestExpiredHeadReadsUnsignalledEvents: a held head that expires lets the
// events the relay left unsignalled go at once, not after the idle timeout:
// the expiry comes after the turn's noteHeld, and the key then idles.
func TestExpiredHeadReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.params.HoldExpiry = 3 * time.Hour
	h.params.MaxRearms = workflows.NoRearms
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) {
			return fail(activities.CodeSchemaMismatch, 422)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.rowAt(2*time.Hour, 2)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2)) {
		t.Fatalf("delivered %v, want 2", got)
	}
	if got := h.store.outcome(eventID(1)); got != store.EventExpired {
		t.Fatalf("event 1's outcome %q, want expired", got)
	}
	if at, _ := h.firstOK(2); at > 3*time.Hour+10*time.Second {
		t.Fatalf("event 2 was delivered %v after the first POST; the head expired at 3h", at)
	}
}

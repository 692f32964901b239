package workflows_test

import (
	"reflect"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// Tests of HeldKeysChange: the relay does not signal the new events of a
// key whose head is failing (store.HeldKeys); the key's run reads them from
// the rows once the head resolves. Each forces QueueFromLogVersion.

// rowAt makes the events with seqs rows of the key at a point of workflow
// time, as the relay writes them, without a signal: what it does for a key
// that holds on its head.
func (h *harness) rowAt(d time.Duration, seqs ...int64) {
	h.at(d, func() {
		h.store.mu.Lock()
		defer h.store.mu.Unlock()
		h.store.dispatched = append(h.store.dispatched, seqs...)
	})
}

// firstOK is when the first successful POST of event seq was made (workflow
// time since the first POST), and whether there was one.
func (h *harness) firstOK(seq int64) (time.Duration, bool) {
	for _, c := range h.sub.callsFor(eventID(seq)) {
		if c.OK {
			return c.At, true
		}
	}
	return 0, false
}

// TestRetriedHeadReadsUnsignalledEvents: events that became rows while the
// head was retrying, with no signal, are delivered in order right after the
// head, not after the key's idle timeout.
func TestRetriedHeadReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id == eventID(1) && nth < 2 {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.rowAt(2*time.Second, 2, 3) // between the head's 2nd and 3rd attempts
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Fatalf("delivered %v, want 1, 2, 3", got)
	}
	head, _ := h.firstOK(1)
	next, _ := h.firstOK(2)
	if next-head > 10*time.Second {
		t.Fatalf("event 2 was delivered %v after its head: it waited for the idle timeout, not for its head", next-head)
	}
}

// TestSkippedFailedHeadReadsUnsignalledEvents: a failed head that an
// operator cancels lets the events the relay left unsignalled go at once.
func TestSkippedFailedHeadReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.params.MaxRearms = workflows.NoRearms
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) {
			return fail(activities.CodeSchemaMismatch, 422)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.rowAt(time.Minute, 2, 3)
	st := h.queryAt(2 * time.Minute)
	cancel := h.updateAt(3*time.Minute, workflows.UpdateCancel, workflows.CancelSignal{EventID: eventID(1), Actor: "alice"})
	h.run()
	if st.Status != workflows.StatusExhausted { // no re-arms: used up at once (error-policy)
		t.Fatalf("before the cancel the key shows %q, want exhausted", st.Status)
	}
	if !cancel.done || !cancel.result.Changed {
		t.Fatalf("cancel answered %+v", cancel)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2, 3)) {
		t.Fatalf("delivered %v, want 2, 3", got)
	}
	if at, _ := h.firstOK(2); at > 3*time.Minute+10*time.Second {
		t.Fatalf("event 2 was delivered %v after the first POST; the cancel was at 3m", at)
	}
	if h.store.outcome(eventID(1)) != store.EventCancelled {
		t.Fatalf("head's outcome %q", h.store.outcome(eventID(1)))
	}
}

// TestRunBeforeHeldKeysWaitsForIdle: a run at workflow.DefaultVersion of
// HeldKeysChange (recorded before it) keeps its behaviour on replay: the
// unsignalled rows are read before it completes, after its idle timeout.
func TestRunBeforeHeldKeysWaitsForIdle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.env.OnGetVersion(workflows.HeldKeysChange, workflow.DefaultVersion, workflows.HeldKeysVersion).
		Return(workflow.DefaultVersion)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id == eventID(1) && nth < 2 {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.rowAt(2*time.Second, 2)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1, 2", got)
	}
	head, _ := h.firstOK(1)
	next, _ := h.firstOK(2)
	if next-head < workflows.DefaultIdleTimeout {
		t.Fatalf("event 2 went %v after its head; a run before HeldKeysChange reads it after its idle timeout", next-head)
	}
}

// TestRowWrittenAsHeadResolvesIsRead: the race the relay's skip relies on.
// The relay writes an event's row and reads the head still held while the
// attempt that delivers the head is under way; the run, once the head
// resolves, reads the row.
func TestRowWrittenAsHeadResolvesIsRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id != eventID(1) {
			return activities.PostResult{Status: 204}
		}
		if nth < 2 {
			return fail(activities.CodeHandlerFailed, 500)
		}
		// The successful attempt: the relay writes row 2 now, before the
		// head's delivered outcome lands.
		h.store.mu.Lock()
		h.store.dispatched = append(h.store.dispatched, 2)
		h.store.mu.Unlock()
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1, 2", got)
	}
	head, _ := h.firstOK(1)
	next, _ := h.firstOK(2)
	if next-head > 10*time.Second {
		t.Fatalf("event 2 was delivered %v after its head, want at once", next-head)
	}
}

// TestRetriedExecutionReadsUnsignalledEvents: a head whose failed attempts
// all ran inside one regular execution (its local first attempt was lost
// with its worker; Temporal retried the rest) was seen held by the relay
// although the run only learns of it from the result: the rows are read
// all the same.
func TestRetriedExecutionReadsUnsignalledEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		switch {
		case id != eventID(1):
			return activities.PostResult{Status: 204}
		case nth == 0:
			panic("the worker of the local attempt dies")
		case nth < 3:
			if nth == 2 {
				h.store.mu.Lock()
				h.store.dispatched = append(h.store.dispatched, 2)
				h.store.mu.Unlock()
			}
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1, 2", got)
	}
	head, _ := h.firstOK(1)
	next, _ := h.firstOK(2)
	if next-head > 10*time.Second {
		t.Fatalf("event 2 was delivered %v after its head, want at once", next-head)
	}
}

// TestCancelAllOfHeldKeyCancelsUnsignalledRows: an operator's cancel --all
// of a held key cancels the events the relay did not signal too, not only
// those its run had read: none of them is delivered afterwards.
func TestCancelAllOfHeldKeyCancelsUnsignalledRows(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.params.MaxRearms = workflows.NoRearms
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) {
			return fail(activities.CodeSchemaMismatch, 422)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(0, 1)
	h.rowAt(time.Minute, 2, 3)
	cancel := h.updateAt(2*time.Minute, workflows.UpdateCancel, workflows.CancelSignal{All: true, Actor: "alice"})
	h.run()
	if !cancel.done || !cancel.result.Changed {
		t.Fatalf("cancel --all answered %+v", cancel)
	}
	if got := h.sub.delivered(); len(got) != 0 {
		t.Fatalf("delivered %v after cancel --all, want nothing", got)
	}
	for _, seq := range []int64{1, 2, 3} {
		if o := h.store.outcome(eventID(seq)); o != store.EventCancelled {
			t.Fatalf("event %d's outcome %q, want cancelled", seq, o)
		}
	}
}

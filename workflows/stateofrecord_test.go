package workflows_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// Tests of QueueFromLogVersion: the outcome rows are what a key owes. Each
// forces that version, so they run the same with -regular-first-attempt.

// TestNewRunTakesWhatTheKeyOwes: a run started with no event of its own
// (after a terminate, by the relay's re-drive) holds the failed head its
// rows name, with the queued events behind it; a redelivery of the head
// restarts its row, and all three go in order.
func TestNewRunTakesWhatTheKeyOwes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.params.MaxRearms = workflows.NoRearms
	h.store.dispatched = []int64{1, 2, 3}
	h.store.outcomes[eventID(1)] = store.EventFailed
	st := h.queryAt(time.Second)
	redeliver := h.updateAt(2*time.Second, workflows.UpdateRedeliver, workflows.RedeliverSignal{Actor: "alice"})
	h.run()
	if st.Status != workflows.StatusExhausted || st.Head == nil || st.Head.EventID != eventID(1) || len(st.Queued) != 2 {
		t.Fatalf("the new run shows %q head %+v queued %+v; want the failed head 1 and 2, 3 behind", st.Status, st.Head, st.Queued)
	}
	if !redeliver.done || !redeliver.result.Changed {
		t.Fatalf("redeliver answered %+v", redeliver)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Fatalf("delivered %v, want 1, 2, 3", got)
	}
	restarted := false
	for _, u := range h.store.updates {
		restarted = restarted || u.EventID == eventID(1) && u.Status == store.EventQueued && u.Restart
	}
	if !restarted {
		t.Fatalf("the head's redelivery wrote no restarted row: %+v", h.store.updates)
	}
}

// TestInputSettingsAreIgnored: a workflow started with a 1 ns delivery
// timeout and hold expiry in its input delivers with the worker's.
func TestInputSettingsAreIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.settings = workflows.Params{RetrySchedule: []time.Duration{time.Second, time.Second}}
	h.params.DeliveryTimeout, h.params.HoldExpiry = time.Nanosecond, time.Nanosecond
	h.params.RetrySchedule = []time.Duration{time.Nanosecond}
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id == eventID(1) && nth < 2 {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(time.Second, 1, 2)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1 then 2 on the worker's schedule", got)
	}
	if n := len(h.sub.callsFor(eventID(1))); n != 3 {
		t.Fatalf("event 1 got %d attempts, want 3 (the worker's schedule)", n)
	}
	for _, u := range h.store.updates {
		if u.Status == store.EventExpired {
			t.Fatalf("an event expired under the input's hold expiry: %+v", u)
		}
	}
}

// TestInvalidOperatorSignalsChangeNothing: a pause signal with a reason
// over 1,000 bytes or an actor with a control character is refused as the
// Update would be: the key is not paused and no audit row is written.
func TestInvalidOperatorSignalsChangeNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{Reason: strings.Repeat("x", 1001)})
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{Actor: "eve\nforged"})
	h.signalAt(time.Second, workflows.SignalRedeliver, workflows.RedeliverSignal{Reason: strings.Repeat("x", 1<<20)})
	h.eventsAt(2*time.Second, 1)
	st := h.queryAt(3 * time.Second)
	h.run()
	if st.KeyPaused || len(h.store.audits) != 0 {
		t.Fatalf("invalid signals: paused %v, audit rows %+v", st.KeyPaused, h.store.audits)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestForgedCarryIsIgnored: a start that is no continue-as-new carries no
// state, whatever its input says: a carried pause, a hold clock from 1970
// and a wait a century long change nothing.
func TestForgedCarryIsIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.store.dispatched = []int64{1, 2}
	h.params.Carry = &workflows.Carry{
		Queue:     []workflows.QueueItem{{Event: event(1), QueuedAt: time.Unix(0, 0)}},
		KeyPaused: true, WaitUntil: h.start.Add(100 * 365 * 24 * time.Hour), WaitStatus: workflows.StatusUnreachable,
	}
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1 and 2", got)
	}
	for _, u := range h.store.updates {
		if u.Status == store.EventExpired {
			t.Fatalf("a forged carry expired %+v", u)
		}
	}
}

// TestHeadWaitsForAnotherRunsLease: while another run of the key (one left
// posting by a terminate) holds its lease, the head is not sent and spends
// no attempt; it goes once the lease is free.
func TestHeadWaitsForAnotherRunsLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.leaseRefusals = 3 // the local attempt's take, then two of the regular execution's
	h.eventsAt(time.Second, 1, 2)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v", got)
	}
	if calls := h.sub.callsFor(eventID(1)); len(calls) != 1 || calls[0].Attempt != 1 {
		t.Fatalf("event 1's POSTs %+v, want one, attempt 1", calls)
	}
	if h.store.leaseRefusals != 0 {
		t.Fatalf("%d refusals left: the lease was not asked for", h.store.leaseRefusals)
	}
}

// TestLostLocalDeliveryIsCounted: when a local attempt of this run
// delivered an event and its worker died before the workflow task
// completed, the task runs again and reads the event's row as delivered by
// this run: it is counted once, not sent again.
func TestLostLocalDeliveryIsCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.store.outcomes[eventID(1)] = store.EventDelivered
	h.store.deliveredBy[eventID(1)] = "default-test-run-id/" + eventID(1) // the test environment's run id
	h.store.outcomes[eventID(2)] = store.EventDelivered
	h.store.deliveredBy[eventID(2)] = "another-run/" + eventID(2) // a re-send of one delivered before
	h.eventsAt(time.Second, 1, 2, 3)
	st := h.queryAt(time.Minute)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(3)) {
		t.Fatalf("delivered %v, want only 3", got)
	}
	if st.Counters.Delivered != 2 {
		t.Fatalf("counted %d deliveries, want 2: event 1 (by this run's lost attempt) and 3", st.Counters.Delivered)
	}
}

// TestLostLocalBatchIsCounted: a workflow task read the rows after the
// cursor (a claim of event 2 made it look), and its local attempt delivered
// event 2 and event 3 behind it, whose row the relay had written but not
// yet signalled; then its worker died, with the relay in it, before the
// task completed. The relay started again found event 3's row delivered
// and signalled nothing of it. The task runs again: both are counted once
// from the rows, neither is sent again (chaos run at b3ade93).
func TestLostLocalBatchIsCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.eventsAt(time.Second, 1)
	h.at(time.Minute, func() {
		h.store.mu.Lock()
		defer h.store.mu.Unlock()
		h.store.dispatched = append(h.store.dispatched, 2, 3)
		for _, seq := range []int64{2, 3} {
			h.store.outcomes[eventID(seq)] = store.EventDelivered
			h.store.deliveredBy[eventID(seq)] = "default-test-run-id/" + eventID(2) // the lost local execution
		}
	})
	h.eventsAt(time.Minute+time.Second, 2)
	h.eventsAt(2*time.Minute, 4)
	st := h.queryAt(3 * time.Minute)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 4)) {
		t.Fatalf("delivered %v, want 1 and 4 (2 and 3 went in the lost task)", got)
	}
	if st.Counters.Delivered != 4 {
		t.Fatalf("counted %d deliveries, want 4: events 1 and 4, and 2 and 3 of the lost task", st.Counters.Delivered)
	}
	counted := map[string]int{}
	for _, o := range st.Outcomes {
		if o.Result == "delivered" {
			counted[o.EventID]++
		}
	}
	for _, seq := range []int64{1, 2, 3, 4} {
		if counted[eventID(seq)] != 1 {
			t.Fatalf("event %d has %d delivered outcomes, want 1 (outcomes %+v)", seq, counted[eventID(seq)], st.Outcomes)
		}
	}
}

// TestLostFirstTaskDeliveryIsCounted: the first workflow task of a run (no
// signal named its events: the relay started the run with them) delivered
// event 2 in a local attempt and was lost with its worker. The task runs
// again and its start reads event 2's row as delivered by this run: counted
// once, not sent again. Event 1, which a local attempt of an earlier run
// delivered, is not this run's to count.
func TestLostFirstTaskDeliveryIsCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.store.dispatched = []int64{1, 2, 3}
	h.store.outcomes[eventID(1)] = store.EventDelivered
	h.store.deliveredBy[eventID(1)] = "an-earlier-run/" + eventID(1)
	h.store.outcomes[eventID(2)] = store.EventDelivered
	h.store.deliveredBy[eventID(2)] = "default-test-run-id/" + eventID(2) // the test environment's run id
	st := h.queryAt(time.Minute)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(3)) {
		t.Fatalf("delivered %v, want only 3", got)
	}
	if st.Counters.Delivered != 2 {
		t.Fatalf("counted %d deliveries, want 2: event 2 (by this run's lost first task) and 3", st.Counters.Delivered)
	}
}

// TestSignalThatDoesNotDecodeIsDropped: a signal whose payload does not
// decode into its type (a wrong JSON type, sent by hand) made the SDK's
// Receive drop it and wait, inside the run's handling of it, for the next
// one of its name that decodes: nothing else of the run moved, and the
// key's next event was never delivered. It is dropped now, and the run
// goes on (CorruptSignalChange).
func TestSignalThatDoesNotDecodeIsDropped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.signalAt(time.Second, workflows.SignalCancel, map[string]any{"all": "true"})
	h.signalAt(time.Second, workflows.SignalPause, map[string]any{"reason": 5})
	h.signalAt(time.Second, workflows.SignalRedeliver, map[string]any{"eventIds": "x"})
	h.signalAt(time.Second, workflows.SignalEvent, map[string]any{"events": "x"})
	h.signalAt(time.Second, workflows.SignalAttempt, []int{1})
	h.eventsAt(2*time.Second, 1, 2)
	st := h.queryAt(3 * time.Second)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1 and 2", got)
	}
	if st.KeyPaused || len(h.store.audits) != 0 {
		t.Fatalf("signals that do not decode: paused %v, audit rows %+v", st.KeyPaused, h.store.audits)
	}
}

package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

func TestDeliversManyEventsInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.eventsAt(time.Second, seqRange(1, 40)...)
	h.eventsAt(2*time.Second, seqRange(41, 60)...)
	h.eventsAt(3*time.Second, seqRange(61, 100)...)
	st := h.queryAt(time.Hour)
	h.params.IdleTimeout = 2 * time.Hour
	h.run()
	if got, want := h.sub.delivered(), ids(seqRange(1, 100)...); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %d events, out of order or missing:\n got %v\nwant %v", len(got), got, want)
	}
	for _, c := range h.sub.all() {
		if c.Attempt != 1 {
			t.Fatalf("event %s delivered with attempt %d, want 1", c.EventID, c.Attempt)
		}
	}
	if st.Status != workflows.StatusIdle || st.Counters.Delivered != 100 || len(st.Outcomes) != 20 {
		t.Fatalf("state after delivery: status %q, counters %+v, %d outcomes", st.Status, st.Counters, len(st.Outcomes))
	}
	if len(h.store.audits) != 0 {
		t.Fatalf("the happy path wrote audit rows: %+v", h.store.audits)
	}
}

func TestDuplicateEventsAreIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.eventsAt(time.Second, 1, 2, 3)
	h.eventsAt(2*time.Second, 2, 3, 4) // a relay re-send after a crash
	h.eventsAt(3*time.Second, 1, 4, 5)
	h.run()
	if got, want := h.sub.delivered(), ids(1, 2, 3, 4, 5); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

// TestFullRetrySchedule: a head that always fails gets 8 attempts with the
// schedule's exact delays, then the key holds; later events wait.
func TestFullRetrySchedule(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.MaxRearms = 1
	h.params.RearmCooldown = 100 * time.Hour
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2, 3)
	retrying := h.queryAt(time.Second + 3*time.Second)
	failed := h.queryAt(5 * time.Hour)
	h.signalAt(5*time.Hour+time.Minute, workflows.SignalCancel, workflows.CancelSignal{Actor: "alice", Reason: "bad event"})
	h.run()

	calls := h.sub.callsFor(eventID(1))
	if len(calls) != 8 {
		t.Fatalf("head got %d attempts, want 8: %+v", len(calls), calls)
	}
	want := []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour}
	for i := 1; i < len(calls); i++ {
		gap := calls[i].At - calls[i-1].At
		if gap < want[i-1] || gap > want[i-1]+2*time.Second {
			t.Errorf("delay before attempt %d = %v, want %v", i+1, gap, want[i-1])
		}
		if calls[i].Attempt != i+1 {
			t.Errorf("attempt header %d, want %d", calls[i].Attempt, i+1)
		}
	}
	if retrying.Status != workflows.StatusRetrying || retrying.Head == nil || retrying.Head.Attempt < 1 ||
		retrying.Head.Code != activities.CodeHandlerFailed || retrying.Head.NextAttemptAt == nil {
		t.Errorf("state while retrying: %+v head %+v", retrying, retrying.Head)
	}
	if failed.Status != workflows.StatusFailed || failed.Head.Attempt != 8 || len(failed.Queued) != 2 ||
		failed.Queued[0].HeldBy != eventID(1) {
		t.Errorf("state when failed: %+v head %+v", failed, failed.Head)
	}
	// Spent attempts end as attempts_exhausted; the last attempt's code stays beside it.
	if failed.Head.Code != activities.CodeAttemptsExhausted || failed.Head.LastCode != activities.CodeHandlerFailed {
		t.Errorf("exhausted head code %q, last code %q", failed.Head.Code, failed.Head.LastCode)
	}
	if f := h.store.auditsOf(workflows.AuditDeliveryFailed); len(f) != 1 || f[0].ErrorCode != activities.CodeAttemptsExhausted ||
		f[0].Metadata["lastCode"] != activities.CodeHandlerFailed {
		t.Errorf("delivery.failed rows %+v", f)
	}
	// Nothing behind the failed head was delivered before the cancel.
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2, 3)) {
		t.Errorf("delivered %v, want the held events only after the cancel", got)
	}
	if n := len(h.store.auditsOf(workflows.AuditDeliveryFailed)); n != 1 {
		t.Errorf("%d delivery.failed audit rows, want 1", n)
	}
	c := h.store.auditsOf(workflows.AuditDeliveryCancelled)
	if len(c) != 1 || c[0].Actor != "alice" || c[0].Metadata["reason"] != "bad event" || c[0].Metadata["eventId"] != eventID(1) {
		t.Errorf("cancel audit rows: %+v", c)
	}
}

func TestSchemaMismatchIsTerminalAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) {
			return fail(activities.CodeSchemaMismatch, 422)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2)
	st := h.queryAt(10 * time.Minute)
	h.signalAt(20*time.Minute, workflows.SignalCancel, workflows.CancelSignal{})
	h.run()
	if n := len(h.sub.callsFor(eventID(1))); n != 1 {
		t.Fatalf("422 was attempted %d times, want 1", n)
	}
	if st.Status != workflows.StatusFailed || st.Head.Code != activities.CodeSchemaMismatch {
		t.Fatalf("state: %+v head %+v", st, st.Head)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2)) {
		t.Fatalf("delivered %v", got)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if nth == 0 {
			return activities.PostResult{Code: activities.CodeThrottled, Status: 429, RetryAfter: 90 * time.Second}
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1)
	h.run()
	calls := h.sub.callsFor(eventID(1))
	if len(calls) != 2 || !calls[1].OK {
		t.Fatalf("calls %+v", calls)
	}
	if gap := calls[1].At - calls[0].At; gap < 90*time.Second || gap > 92*time.Second {
		t.Fatalf("retry after %v, want Retry-After's 90s instead of the schedule's 1s", gap)
	}
}

// TestUnreachableWaitsWithoutSpendingAttempts: refused connections wait on
// durable timers (30s, 60s, 120s) and the attempt is not counted.
func TestUnreachableWaitsWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sub.setRespond(func(_ string, _, nth int) activities.PostResult {
		if nth < 3 {
			return activities.PostResult{Code: activities.CodeSubscriberUnreachable, Message: "connection refused"}
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2)
	st := h.queryAt(time.Second + 10*time.Second)
	h.run()
	calls := h.sub.callsFor(eventID(1))
	if len(calls) != 4 {
		t.Fatalf("calls %+v", calls)
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute}
	for i := 1; i < 4; i++ {
		if calls[i].Attempt != 1 {
			t.Errorf("call %d has attempt %d; unreachable attempts must not count", i, calls[i].Attempt)
		}
		if gap := calls[i].At - calls[i-1].At; gap < want[i-1] || gap > want[i-1]+2*time.Second {
			t.Errorf("wait before call %d = %v, want %v", i+1, gap, want[i-1])
		}
	}
	if st.Status != workflows.StatusUnreachable {
		t.Errorf("status while unreachable: %q", st.Status)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Errorf("delivered %v", got)
	}
}

func TestRedeliverGivesFreshAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.MaxRearms = 1
	h.params.RearmCooldown = 100 * time.Hour
	healthy := false
	h.sub.setRespond(func(_ string, _, _ int) activities.PostResult {
		if !healthy {
			return fail(activities.CodeSchemaMismatch, 422)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2, 3)
	h.at(time.Hour, func() { h.sub.mu.Lock(); healthy = true; h.sub.mu.Unlock() })
	h.signalAt(time.Hour+time.Second, workflows.SignalRedeliver, workflows.RedeliverSignal{Actor: "bob", Reason: "fixed"})
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Fatalf("delivered %v", got)
	}
	calls := h.sub.callsFor(eventID(1))
	if len(calls) != 2 || calls[1].Attempt != 1 {
		t.Fatalf("redelivery must start with fresh attempts: %+v", calls)
	}
	r := h.store.auditsOf(workflows.AuditDeliveryRedelivered)
	if len(r) != 1 || r[0].Actor != "bob" || r[0].Outcome != "allowed" {
		t.Fatalf("redeliver audit rows: %+v", r)
	}
}

func TestRedeliverByIDDeliversAgainBeforeTheQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.subjects[eventID(99)] = "person-7"
	h.store.missing[eventID(42)] = true
	h.eventsAt(time.Second, 1)
	h.signalAt(time.Minute, workflows.SignalPause, workflows.ControlSignal{})
	h.eventsAt(2*time.Minute, 2, 3)
	h.signalAt(3*time.Minute, workflows.SignalRedeliver, workflows.RedeliverSignal{EventID: eventID(1)})
	h.signalAt(3*time.Minute, workflows.SignalRedeliver, workflows.RedeliverSignal{EventID: eventID(99)})
	h.signalAt(3*time.Minute, workflows.SignalRedeliver, workflows.RedeliverSignal{EventID: eventID(42)})
	h.signalAt(4*time.Minute, workflows.SignalResume, workflows.ControlSignal{})
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 1, 2, 3)) {
		t.Fatalf("delivered %v, want event 1 again before 2 and 3", got)
	}
	var outcomes []string
	for _, a := range h.store.auditsOf(workflows.AuditDeliveryRedelivered) {
		outcomes = append(outcomes, a.Outcome+":"+a.ErrorCode)
	}
	if want := []string{"allowed:", "failed:event_not_for_key", "failed:event_not_found"}; !reflect.DeepEqual(outcomes, want) {
		t.Fatalf("redeliver audits %v, want %v", outcomes, want)
	}
}

func TestCancelByIDAndAll(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{Actor: "carol"})
	h.eventsAt(2*time.Second, 1, 2, 3, 4, 5)
	h.signalAt(3*time.Second, workflows.SignalCancel, workflows.CancelSignal{EventID: eventID(2)})
	h.signalAt(4*time.Second, workflows.SignalResume, workflows.ControlSignal{Actor: "carol"})
	h.signalAt(5*time.Second, workflows.SignalPause, workflows.ControlSignal{})
	h.eventsAt(6*time.Second, 6, 7, 8)
	h.signalAt(7*time.Second, workflows.SignalCancel, workflows.CancelSignal{All: true, Reason: "drop"})
	h.signalAt(8*time.Second, workflows.SignalResume, workflows.ControlSignal{})
	h.eventsAt(9*time.Second, 9)
	st := h.queryAt(time.Hour)
	h.params.IdleTimeout = 2 * time.Hour
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 3, 4, 5, 9)) {
		t.Fatalf("delivered %v", got)
	}
	c := h.store.auditsOf(workflows.AuditDeliveryCancelled)
	if len(c) != 2 || c[1].Metadata["count"] != float64(3) {
		t.Fatalf("cancel audits %+v", c)
	}
	if st.Counters.Cancelled != 4 || st.Counters.Delivered != 5 {
		t.Fatalf("counters %+v", st.Counters)
	}
	if n := len(h.store.auditsOf(workflows.AuditDeliveryPaused)); n != 2 {
		t.Fatalf("%d pause audits, want 2", n)
	}
}

func TestPauseHoldsUntilResume(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{})
	h.eventsAt(2*time.Second, 1, 2)
	paused := h.queryAt(time.Hour)
	h.signalAt(2*time.Hour, workflows.SignalResume, workflows.ControlSignal{})
	h.run()
	if paused.Status != workflows.StatusPaused {
		t.Fatalf("status an hour after the pause: %+v, want paused", paused)
	}
	// Nothing went while the key was paused: an hour in, event 1 is still
	// the head, event 2 queued behind it, and none was delivered.
	if paused.Counters.Delivered != 0 || paused.Head == nil || paused.Head.EventID != eventID(1) ||
		paused.Head.Attempt != 0 || len(paused.Queued) != 1 {
		t.Fatalf("an hour into the pause: delivered %d, head %+v, queued %+v; want 0 delivered, event 1 unattempted at the head, 1 queued",
			paused.Counters.Delivered, paused.Head, paused.Queued)
	}
	if n := len(h.sub.callsFor(eventID(1))); n != 1 {
		t.Fatalf("event 1 POSTed %d times, want once", n)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestRearmAfterCooldownAndCap: a failed key re-arms itself after the
// cooldown, at most MaxRearms times in a row.
func TestRearmAfterCooldownAndCap(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.RetrySchedule = []time.Duration{time.Second} // 2 attempts per arming
	h.sub.setRespond(func(_ string, _, _ int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
	h.eventsAt(time.Second, 1)
	capped := h.queryAt(10 * time.Hour)
	h.signalAt(11*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
	h.run()
	calls := h.sub.callsFor(eventID(1))
	if len(calls) != 2*4 {
		t.Fatalf("%d attempts, want 2 per arming × (1 + 3 re-arms)", len(calls))
	}
	for _, i := range []int{2, 4, 6} {
		if gap := calls[i].At - calls[i-1].At; gap < time.Hour || gap > time.Hour+5*time.Second {
			t.Errorf("re-arm %d after %v, want the 1h cooldown", i/2, gap)
		}
		if calls[i].Attempt != 1 {
			t.Errorf("re-armed attempt numbered %d", calls[i].Attempt)
		}
	}
	if n := len(h.store.auditsOf(workflows.AuditDeliveryRearmed)); n != 3 {
		t.Errorf("%d rearm audits, want 3", n)
	}
	if capped.Status != workflows.StatusExhausted || capped.Counters.Rearms != 3 || capped.Head.NextAttemptAt != nil {
		t.Errorf("state after the cap: %+v head %+v", capped, capped.Head)
	}
}

func TestSubscriptionCancelledCancelsQueueAndCompletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.setState("cancelled", "subscription_removed")
	h.eventsAt(time.Second, 1, 2, 3)
	h.run()
	if n := len(h.sub.all()); n != 0 {
		t.Fatalf("%d POSTs to a cancelled subscription", n)
	}
	c := h.store.auditsOf(workflows.AuditDeliveryCancelled)
	if len(c) != 1 || c[0].Metadata["count"] != float64(3) {
		t.Fatalf("cancel audits %+v", c)
	}
}

func TestBlockedSubscriptionWaitsWithoutAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.setState("blocked", "event_not_declared")
	h.eventsAt(time.Second, 1)
	blocked := h.queryAt(30 * time.Minute)
	h.at(time.Hour, func() { h.store.setState("paused", "paused_by_operator") })
	paused := h.queryAt(2 * time.Hour)
	h.at(3*time.Hour, func() { h.store.setState("active", "") })
	h.signalAt(3*time.Hour, workflows.SignalResume, workflows.ControlSignal{})
	h.run()
	if blocked.Status != workflows.StatusBlocked || paused.Status != workflows.StatusPaused {
		t.Fatalf("statuses %q then %q", blocked.Status, paused.Status)
	}
	calls := h.sub.all()
	if len(calls) != 1 || calls[0].Attempt != 1 || calls[0].At != 0 {
		t.Fatalf("calls %+v", calls)
	}
}

// TestIdleCompletionKeepsLastMomentSignal: an event that arrives in the same
// workflow task as the idle timer is delivered, not lost.
func TestIdleCompletionKeepsLastMomentSignal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.IdleTimeout = time.Minute
	h.eventsAt(time.Second, 1)
	// Just before the idle timer fires: buffered without a workflow task, so
	// the signal and the timer reach the workflow in the same task.
	h.at(time.Second+time.Minute-time.Millisecond, func() {
		h.env.SignalWorkflowSkippingWorkflowTask(workflows.SignalEvent, workflows.EventSignal{Events: []activities.Event{event(2)}})
	})
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestContinueAsNewCarriesQueue: after SignalsPerRun signals the run
// continues as new, carrying every queued event, including ones buffered at
// the last moment, in order; the next run takes NoMarkerVersion.
func TestContinueAsNewCarriesQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.SignalsPerRun = 3
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{})
	h.eventsAt(2*time.Second, 1, 2)
	h.at(3*time.Second, func() {
		h.env.SignalWorkflowSkippingWorkflowTask(workflows.SignalEvent, workflows.EventSignal{Events: []activities.Event{event(3)}})
		h.env.SignalWorkflow(workflows.SignalEvent, workflows.EventSignal{Events: []activities.Event{event(4)}})
	})
	h.execute()
	err := h.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	var next workflows.Params
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatalf("decode carried params: %v", err)
	}
	if next.Carry == nil || !next.Carry.KeyPaused || next.SubscriptionID != h.params.SubscriptionID {
		t.Fatalf("carried params %+v", next)
	}
	// This run asked GetVersion; the next one need not.
	if next.Version != workflows.NoMarkerVersion {
		t.Fatalf("the next run's version %d, want NoMarkerVersion", next.Version)
	}
	var got []string
	for _, it := range next.Carry.Queue {
		got = append(got, it.Event.ID)
	}
	if !reflect.DeepEqual(got, ids(1, 2, 3, 4)) {
		t.Fatalf("carried queue %v", got)
	}
}

// TestBatchStopsAtFirstFailure: in one activity execution, the events after
// a failed one are not sent; the failed one keeps its attempt count and
// waits the schedule's delay before its next attempt.
func TestBatchStopsAtFirstFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id == eventID(2) && nth < 2 {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2, 3, 4)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3, 4)) {
		t.Fatalf("delivered %v", got)
	}
	calls := h.sub.all()
	var order []string
	for _, c := range calls {
		order = append(order, c.EventID[len(c.EventID)-1:])
	}
	if got := fmt.Sprint(order); got != "[1 2 2 2 3 4]" {
		t.Fatalf("POST order %s: nothing may follow a failed event in its batch", got)
	}
	two := h.sub.callsFor(eventID(2))
	if two[0].Attempt != 1 || two[1].Attempt != 2 || two[2].Attempt != 3 {
		t.Fatalf("attempt numbers %+v", two)
	}
	if g := two[1].At - two[0].At; g < time.Second || g > 2*time.Second {
		t.Fatalf("first retry after %v, want the schedule's 1s", g)
	}
	if g := two[2].At - two[1].At; g < 5*time.Second || g > 6*time.Second {
		t.Fatalf("second retry after %v, want the schedule's 5s", g)
	}
}

// TestOperatorSignalInterruptsRetries: a cancel for a head that is retrying
// takes effect at once, not after the remaining schedule (hours).
func TestOperatorSignalInterruptsRetries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) {
			return fail(activities.CodeHandlerFailed, 503)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2)
	h.signalAt(10*time.Minute, workflows.SignalCancel, workflows.CancelSignal{Actor: "dave"})
	h.run()
	calls := h.sub.all()
	last := calls[len(calls)-1]
	if last.EventID != eventID(2) || !last.OK {
		t.Fatalf("calls %+v", calls)
	}
	if n := len(h.sub.callsFor(eventID(1))); n != 5 {
		t.Fatalf("head got %d attempts; the cancel at 10m must stop the schedule after the 5th (2m36s)", n)
	}
	if last.At > 11*time.Minute {
		t.Fatalf("event 2 delivered at %v: the cancel waited for the retries", last.At)
	}
	c := h.store.auditsOf(workflows.AuditDeliveryCancelled)
	if len(c) != 1 || c[0].Outcome != "allowed" || c[0].Actor != "dave" {
		t.Fatalf("cancel audits %+v", c)
	}
	if n := len(h.store.auditsOf(workflows.AuditDeliveryFailed)); n != 0 {
		t.Fatalf("an interrupted delivery wrote %d delivery.failed rows", n)
	}
}

// TestLongQueueCarriedAsIDs: a long held queue continues as new as ids and
// sequence numbers only, small enough for Temporal's payload limit; the next
// run reads the bodies back and delivers them, in order.
func TestLongQueueCarriedAsIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// The size is what this tests, not the time: each run's code takes
	// 15,000 events (three times the default MaxQueue) in one stretch,
	// under 100 ms alone but past the SDK's 1 s deadlock detection twice
	// on a loaded CI machine (TMPRL1101), once in each run: the harness
	// gives the detector 20 s.
	h.params.SignalsPerRun = 3
	h.params.MaxQueue = 15000 // the default 5,000 spills earlier (TestLongQueueSpillsToTheBacklog)
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{})
	seqs := seqRange(1, 15000)
	h.eventsAt(2*time.Second, seqs[:7500]...)
	h.eventsAt(3*time.Second, seqs[7500:]...)
	h.execute()
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	// Temporal refuses payloads over 2 MB; bodies used to hit it at ~10,000.
	if size := can.Input.Size(); size > 1900_000 {
		t.Fatalf("15,000 queued events carried in %d bytes, want under 1.9 MB", size)
	}
	var next workflows.Params
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if len(next.Carry.Queue) != len(seqs) {
		t.Fatalf("carried %d events", len(next.Carry.Queue))
	}

	// The next run: resume and deliver from ids (15,000 again).
	h2 := newHarness(t)
	h2.params = next
	if *regularFirstAttempt {
		// As a next run recorded before NoMarkerVersion: its input did not
		// say the version, and GetVersion answers for it.
		h2.params.Version = 0
	}
	h2.store.dispatched = seqs // the rows the relay wrote
	h2.signalAt(time.Second, workflows.SignalResume, workflows.ControlSignal{})
	h2.run()
	if got := h2.sub.delivered(); !reflect.DeepEqual(got, ids(seqs...)) {
		t.Fatalf("delivered %d events after continue-as-new, want all 15000 in order", len(got))
	}
	// Since QueueFromLogVersion every run takes its settings from the
	// worker; before, a continued run used those it carried.
	if asked := h2.settingsAsked > 0; asked == *regularFirstAttempt {
		t.Fatalf("a continued run asked the worker for settings %d times", h2.settingsAsked)
	}
}

// TestDatabaseOutageRechecksSoon: when the subscription cannot be read, the
// key looks again after 5 s, 10 s, 20 s… rather than a full re-check interval.
func TestDatabaseOutageRechecksSoon(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.setState(activities.SubscriptionUnknown, "connection refused")
	h.eventsAt(time.Second, 1)
	h.at(time.Second+30*time.Second, func() { h.store.setState("active", "") })
	// Looks at 1s, 6s, 16s and 36s: delivered on the fourth, well before the
	// one-minute re-check interval.
	during := h.queryAt(20 * time.Second)
	after := h.queryAt(40 * time.Second)
	h.run()
	if calls := h.sub.all(); len(calls) != 1 || calls[0].Attempt != 1 {
		t.Fatalf("calls %+v", calls)
	}
	if during.Status != workflows.StatusBlocked || after.Status != workflows.StatusIdle || after.Counters.Delivered != 1 {
		t.Fatalf("status %q during the outage, %q (%+v) 10 s after it", during.Status, after.Status, after.Counters)
	}
}

// TestLimitedHeadSpendsNoAttempt: while the app's limits hold the head back,
// executions end with outcome limited and the next starts at once; no
// attempt is spent, and a later event held back goes in the next execution,
// in order.
func TestLimitedHeadSpendsNoAttempt(t *testing.T) {
	// Parallel: it waits for turns in real time (seconds of idle waiting),
	// in a test environment of its own.
	t.Parallel()
	h := newHarness(t)
	h.store.limits = store.Limits{MaxPerSecond: 1}
	// Acquires 1-3 (the head, three executions) and 6 (the third event,
	// behind two delivered ones) are refused.
	h.store.refuse = func(n int) bool { return n <= 3 || n == 6 }
	h.eventsAt(time.Second, 1, 2, 3)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Fatalf("delivered %v, want 1, 2, 3 in order", got)
	}
	for _, c := range h.sub.all() {
		if c.Attempt != 1 {
			t.Errorf("event %s delivered with attempt %d; waits for the limits must not count", c.EventID, c.Attempt)
		}
	}
	if h.store.acquires != 7 {
		t.Errorf("%d acquires, want 7 (three refused for the head, one for event 3)", h.store.acquires)
	}
	if len(h.store.audits) != 0 {
		t.Errorf("waits wrote audit rows: %+v", h.store.audits)
	}
}

// TestNoLimitsNoAcquire: an app without limits never asks for a turn, so
// its deliveries cost no extra database call.
func TestNoLimitsNoAcquire(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.eventsAt(time.Second, seqRange(1, 20)...)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(seqRange(1, 20)...)) {
		t.Fatalf("delivered %v", got)
	}
	if h.store.acquires != 0 {
		t.Errorf("%d acquires for an app without limits, want 0", h.store.acquires)
	}
}

// TestLimitedRetryKeepsAttemptCount: a head whose first attempt failed and
// whose retry is held back by the limits makes its next POST as attempt 2:
// the failed attempt stays spent, the wait spends none.
func TestLimitedRetryKeepsAttemptCount(t *testing.T) {
	// Parallel: it waits for turns in real time (seconds of idle waiting),
	// in a test environment of its own.
	t.Parallel()
	h := newHarness(t)
	h.store.limits = store.Limits{MaxInFlight: 1}
	h.store.refuse = func(n int) bool { return n == 2 || n == 3 }
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if nth == 0 {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1)
	h.run()
	calls := h.sub.callsFor(eventID(1))
	if len(calls) != 2 || calls[0].Attempt != 1 || calls[1].Attempt != 2 {
		t.Fatalf("calls %+v, want attempt 1 failed then attempt 2 delivered", calls)
	}
	if h.store.acquires != 4 {
		t.Errorf("%d acquires, want 4", h.store.acquires)
	}
}

// TestIdleFirstAttemptWritesNoStatus: with FirstAttemptChange, events that
// come one at a time to an idle key write no status search attribute per
// event. Before it (runs recorded without its marker, which must replay)
// each event writes delivering, then idle.
func TestIdleFirstAttemptWritesNoStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version workflow.Version
		want    []string
	}{
		{1, []string{"idle"}},
		{workflow.DefaultVersion, []string{"idle", "delivering", "idle", "delivering", "idle", "delivering", "idle", "delivering", "idle"}},
	} {
		t.Run(fmt.Sprint("version ", tc.version), func(t *testing.T) {
			h := newHarness(t)
			h.firstAttemptVersion(tc.version)
			h.params.IdleTimeout = 10 * time.Minute
			var statuses []string
			h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				if s, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(workflows.SAStatus); ok {
					statuses = append(statuses, s)
				}
			}).Return(nil)
			h.eventsAt(time.Second, 1)
			h.eventsAt(time.Minute, 2)
			h.eventsAt(2*time.Minute, 3)
			h.eventsAt(3*time.Minute, 4)
			// Started as the relay starts it: status delivering, no upsert.
			opts := h.startOptions()
			opts.TypedSearchAttributes = workflows.StartAttributes(h.params)
			h.env.SetStartWorkflowOptions(opts)
			h.env.ExecuteWorkflow(workflows.DeliveryWorkflowType, h.params)
			if !h.env.IsWorkflowCompleted() || h.env.GetWorkflowError() != nil {
				t.Fatalf("workflow completed %v, error %v", h.env.IsWorkflowCompleted(), h.env.GetWorkflowError())
			}
			if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3, 4)) {
				t.Fatalf("delivered %v", got)
			}
			if !reflect.DeepEqual(statuses, tc.want) {
				t.Fatalf("status upserts %v, want %v", statuses, tc.want)
			}
		})
	}
}

// TestLocalFirstAttempt: with FirstAttemptChange a head's first attempt
// runs as a local activity; a failed or limited one continues as a regular
// activity, with Temporal's retries, on the retry schedule; a terminal
// failure holds the key at once.
func TestLocalFirstAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		local   bool
		respond func(eventID string, attempt, nth int) activities.PostResult
		took    func(eventID string, nth int) time.Duration
		limits  store.Limits
		// Deliver runs, local and regular (each attempt of a regular
		// activity), and the attempts of event 1 at the subscriber.
		wantLocal, wantRegular int
		wantAttempts           []int
		wantFailed             bool
		// wantGap is the least time between event 1's first two POSTs.
		wantGap time.Duration
	}{
		{name: "every first attempt local", local: true, wantLocal: 3, wantAttempts: []int{1}},
		{name: "runs started before it", local: false, wantRegular: 3, wantAttempts: []int{1}},
		{name: "a failed first attempt is retried by a regular activity", local: true,
			respond: func(id string, attempt, _ int) activities.PostResult {
				if id == eventID(1) && attempt == 1 {
					return fail(activities.CodeHandlerFailed, 503)
				}
				return activities.PostResult{Status: 204}
			},
			// The regular activity's first attempt waits out the delay.
			wantLocal: 3, wantRegular: 2, wantAttempts: []int{1, 2}, wantGap: workflows.DefaultRetrySchedule[0]},
		{name: "an app with limits waits in a regular activity", local: true, limits: store.Limits{MaxPerSecond: 100},
			wantLocal: 3, wantRegular: 3, wantAttempts: []int{1}},
		{name: "a subscriber slower than the budget is handed over, uncounted", local: true,
			// 10 s for the first POST of event 1: more than a local attempt
			// may take, less than the delivery timeout. The regular
			// activity's first attempt waits until the cut POST would have
			// timed out; the key makes no more local attempts in this run.
			took: func(id string, nth int) time.Duration {
				if id == eventID(1) && nth == 0 {
					return 10 * time.Second
				}
				return 0
			},
			wantLocal: 1, wantRegular: 4, wantAttempts: []int{1, 1}, wantGap: activities.DefaultPostTimeout},
		{name: "a terminal first attempt holds the key", local: true,
			respond: func(id string, _, _ int) activities.PostResult {
				if id == eventID(1) {
					return fail(activities.CodeSchemaMismatch, 422)
				}
				return activities.PostResult{Status: 204}
			},
			wantLocal: 1, wantAttempts: []int{1}, wantFailed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if !tc.local {
				h.firstAttemptVersion(workflow.DefaultVersion)
			} else {
				h.firstAttemptVersion(1)
			}
			h.params.IdleTimeout = 10 * time.Minute
			h.sub.setRespond(tc.respond)
			h.sub.took = tc.took
			h.store.limits = tc.limits
			var local, regular int
			h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
				if info.ActivityType.Name == "Deliver" {
					local++
				}
			})
			h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
				if info.ActivityType.Name == "Deliver" {
					regular++
				}
			})
			h.eventsAt(time.Second, 1)
			h.eventsAt(time.Minute, 2)
			h.eventsAt(2*time.Minute, 3)
			if tc.wantFailed {
				h.signalAt(5*time.Minute, workflows.SignalCancel, workflows.CancelSignal{All: true})
			}
			h.run()
			if local != tc.wantLocal || regular != tc.wantRegular {
				t.Errorf("Deliver runs: %d local, %d regular; want %d, %d", local, regular, tc.wantLocal, tc.wantRegular)
			}
			calls := h.sub.callsFor(eventID(1))
			var attempts []int
			for _, c := range calls {
				attempts = append(attempts, c.Attempt)
			}
			if !reflect.DeepEqual(attempts, tc.wantAttempts) {
				t.Fatalf("attempts at event 1: %v, want %v", attempts, tc.wantAttempts)
			}
			if len(calls) == 2 && calls[1].At-calls[0].At < tc.wantGap {
				t.Errorf("second POST %v after the first, want at least %v", calls[1].At-calls[0].At, tc.wantGap)
			}
			if tc.wantFailed {
				if rows := h.store.auditsOf(workflows.AuditDeliveryFailed); len(rows) != 1 || rows[0].ErrorCode != activities.CodeSchemaMismatch {
					t.Fatalf("delivery.failed rows %+v", rows)
				}
				if got := h.sub.delivered(); len(got) != 0 {
					t.Fatalf("delivered %v behind a failed head", got)
				}
				return
			}
			if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
				t.Fatalf("delivered %v", got)
			}
			for _, seq := range []int64{1, 2, 3} {
				if got := h.store.outcome(eventID(seq)); got != store.EventDelivered {
					t.Errorf("outcome of %d = %q", seq, got)
				}
			}
		})
	}
}

// TestKeyStartedIdle: a key the relay starts for one event starts idle
// (workflows.OneEventStartAttributes). Its local first attempt writes no
// status; at OneMarkerVersion a first attempt that goes to a regular
// activity (the app has limits) shows delivering while it runs, since it
// may wait for seconds, and idle again once the event went. A run whose
// input says NoMarkerVersion behaves so whatever GetVersion would answer.
func TestKeyStartedIdle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		version workflow.Version
		limits  store.Limits
		want    []string
	}{
		{"local first attempt", workflows.OneMarkerVersion, store.Limits{}, nil},
		{"regular first attempt", workflows.OneMarkerVersion, store.Limits{MaxPerSecond: 100}, []string{"delivering", "idle"}},
		{"regular first attempt, run before OneMarkerVersion", workflows.QueueFromLogVersion, store.Limits{MaxPerSecond: 100}, nil},
		// GetVersion would say QueueFromLogVersion, but the input's version
		// is not asked: the run takes OneMarkerVersion's behaviour.
		{"regular first attempt, NoMarkerVersion in the input", workflows.NoMarkerVersion, store.Limits{MaxPerSecond: 100}, []string{"delivering", "idle"}},
		// Any other input version is ignored: GetVersion decides.
		{"regular first attempt, an unknown version in the input", workflows.DeliverInStartVersion + 1, store.Limits{MaxPerSecond: 100}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.version > workflows.OneMarkerVersion {
				h.params.Version = int(tc.version)
				h.firstAttemptVersion(workflows.QueueFromLogVersion)
			} else {
				h.firstAttemptVersion(tc.version)
			}
			h.store.limits = tc.limits
			var statuses []string
			h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				if s, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(workflows.SAStatus); ok {
					statuses = append(statuses, s)
				}
			}).Return(nil)
			if err := h.env.SetTypedSearchAttributesOnStart(workflows.OneEventStartAttributes(h.params)); err != nil {
				t.Fatal(err)
			}
			h.eventsAt(time.Second, 1)
			h.run()
			if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
				t.Fatalf("delivered %v", got)
			}
			if !reflect.DeepEqual(statuses, tc.want) {
				t.Fatalf("status upserts %v, want %v", statuses, tc.want)
			}
		})
	}
}

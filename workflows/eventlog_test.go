package workflows_test

import (
	"errors"
	"fmt"
	"reflect"
	"sort"

	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// Tests of the event log as the only copy of an event: Temporal carries ids
// and sequence numbers; what is sent, and to whom, comes from the log.

// TestForgedSignalsChangeNothing: events that are not this key's accepted
// events, whatever a signal claims, are never sent and take no queue space;
// they are audited as signal_rejected (one row per read of the rows, with a
// count; before QueueFromLogVersion one row per event, when its turn came),
// and the genuine events around them are delivered in order.
func TestForgedSignalsChangeNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.subjects[eventID(7)] = "person-2" // another key's event
	h.store.undispatched[eventID(8)] = true   // never handed to this subscription
	h.store.missing[eventID(9)] = true        // not in the log at all
	forged := []activities.Event{
		{ID: eventID(7), Seq: 7}, {ID: eventID(8), Seq: 8}, {ID: eventID(9), Seq: 9},
		{ID: "not-a-uuid", Seq: 10},
		{ID: eventID(11), Seq: 1 << 62}, // a genuine id with a huge seq
	}
	h.eventsAt(time.Second, 1)
	h.signalAt(2*time.Second, workflows.SignalEvent, workflows.EventSignal{Events: forged})
	h.eventsAt(3*time.Second, 2, 3)
	h.run()

	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Fatalf("delivered %v, want only the genuine 1, 2, 3", got)
	}
	// A huge seq must not make the key drop the genuine events after it.
	if h.store.outcome(eventID(2)) != store.EventDelivered || h.store.outcome(eventID(11)) != "" {
		t.Fatalf("outcomes: 2 %q, 11 %q", h.store.outcome(eventID(2)), h.store.outcome(eventID(11)))
	}
	if !*regularFirstAttempt {
		// QueueFromLogVersion: refused when signalled, one row for the
		// signal with the count.
		rows := h.store.auditsOf(workflows.AuditSignalRejected)
		if len(rows) != 1 || fmt.Sprint(rows[0].Metadata["count"]) != "5" || rows[0].Metadata["signal"] != workflows.SignalEvent ||
			rows[0].ErrorCode != activities.CodeSignalRejected || rows[0].Outcome != "failed" {
			t.Fatalf("signal_rejected rows %+v, want one with count 5", rows)
		}
		var got []string
		for _, id := range rows[0].Metadata["eventIds"].([]any) {
			got = append(got, id.(string))
		}
		sort.Strings(got)
		want := []string{eventID(11), eventID(7), eventID(8), eventID(9), "not-a-uuid"}
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("refused ids %v, want %v", got, want)
		}
		return
	}
	reasons := map[string]string{}
	for _, a := range h.store.auditsOf(workflows.AuditSignalRejected) {
		if a.ErrorCode != activities.CodeSignalRejected || a.Outcome != "failed" {
			t.Errorf("rejection row %+v", a)
		}
		reasons[a.Metadata["eventId"].(string)] = a.Metadata["reason"].(string)
	}
	want := map[string]string{
		eventID(7): "event_not_for_subject", eventID(8): "not_dispatched_to_subscription",
		eventID(9): "event_not_found", "not-a-uuid": "event_not_found", eventID(11): "seq_mismatch",
	}
	if !reflect.DeepEqual(reasons, want) {
		t.Fatalf("signal_rejected reasons %v, want %v", reasons, want)
	}
}

// TestBodyAndAudienceComeFromTheLog: a workflow started with another
// subscriber app still signs for the subscription's own app, and sends the
// body stored in the event log.
func TestBodyAndAudienceComeFromTheLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.SubscriberApp = "attacker"
	h.eventsAt(time.Second, 1)
	h.run()
	calls := h.sub.all()
	if len(calls) != 1 || calls[0].Audience != "billing" || calls[0].Body != string(envelope(1, "person-1")) {
		t.Fatalf("calls %+v", calls)
	}
}

// TestReSendOfSettledEventIsNotDelivered: an event whose outcome is already
// delivered (a relay re-send after the key's workflow completed) is skipped;
// an operator's redelivery of it is sent.
func TestReSendOfSettledEventIsNotDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.outcomes[eventID(1)] = store.EventDelivered
	h.eventsAt(time.Second, 1, 2)
	h.signalAt(time.Minute, workflows.SignalRedeliver, workflows.RedeliverSignal{EventID: eventID(1), Actor: "ops"})
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2, 1)) {
		t.Fatalf("delivered %v, want 2, then 1 only when an operator asked", got)
	}
}

// TestHeldEventsExpire: events held longer than the hold expiry are
// cancelled as retention_expired, with their outcome rows and an audit row.
func TestHeldEventsExpire(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.HoldExpiry = 3 * time.Hour
	h.params.MaxRearms = 1
	h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeSchemaMismatch, 422) })
	h.eventsAt(time.Second, 1, 2)
	h.eventsAt(time.Hour, 3)
	held := h.queryAt(2 * time.Hour)
	partly := h.queryAt(3*time.Hour + time.Minute)
	h.run()
	if len(held.Queued) != 2 || held.Status != workflows.StatusExhausted {
		t.Fatalf("state before expiry %+v", held)
	}
	if partly.Head == nil || partly.Head.EventID != eventID(3) || partly.Counters.Cancelled != 2 {
		t.Fatalf("after 3h the events of the first second expire, not event 3: %+v head %+v", partly, partly.Head)
	}
	for _, seq := range []int64{1, 2, 3} {
		if got := h.store.outcome(eventID(seq)); got != store.EventExpired {
			t.Errorf("event %d outcome %q, want expired", seq, got)
		}
	}
	// Audit metadata travels as JSON: numbers arrive as float64.
	rows := h.store.auditsOf(workflows.AuditDeliveryCancelled)
	if len(rows) != 2 || rows[0].ErrorCode != activities.CodeRetentionExpired || rows[0].Metadata["count"] != 2.0 {
		t.Fatalf("expiry audit rows %+v", rows)
	}
}

// TestRemovalCancelsFailedAndPausedKeys: the worker's word that the
// subscription is gone drops the queue of a key whatever it is doing.
func TestRemovalCancelsFailedAndPausedKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(h *harness)
	}{
		{"failed", func(h *harness) {
			h.params.MaxRearms = 0
			h.params.RearmCooldown = 100 * time.Hour
			h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeSchemaMismatch, 422) })
		}},
		{"paused", func(h *harness) {
			h.signalAt(500*time.Millisecond, workflows.SignalPause, workflows.ControlSignal{})
		}},
		{"unreachable", func(h *harness) {
			h.sub.setRespond(func(string, int, int) activities.PostResult {
				return activities.PostResult{Code: activities.CodeSubscriberUnreachable, Message: "refused"}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.setup(h)
			h.eventsAt(time.Second, 1, 2, 3)
			h.at(10*time.Minute, func() { h.store.setState("cancelled", "subscription_removed") })
			h.signalAt(10*time.Minute, workflows.SignalSubscription,
				workflows.SubscriptionSignal{State: "cancelled", Reason: "subscription_removed"})
			h.run() // completes: the workflow ends after dropping its queue
			if end := h.env.Now().Sub(h.start); end > 11*time.Minute {
				t.Fatalf("workflow ended %v after start, want right after the signal", end)
			}
			for _, seq := range []int64{1, 2, 3} {
				if got := h.store.outcome(eventID(seq)); got != store.EventCancelled {
					t.Errorf("event %d outcome %q, want cancelled", seq, got)
				}
			}
			rows := h.store.auditsOf(workflows.AuditDeliveryCancelled)
			if len(rows) != 1 || rows[0].ErrorCode != activities.CodeSubscriptionRemoved || rows[0].Metadata["count"] != 3.0 {
				t.Fatalf("audit rows %+v", rows)
			}
		})
	}
}

// TestStartWithoutSettingsAsksTheWorker: a workflow started by an
// operator's redeliver (no settings) takes the worker's, and redelivers an
// event it never held, in front of nothing, from the log.
func TestStartWithoutSettingsAsksTheWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.RetrySchedule = nil
	h.settings = workflows.Params{RetrySchedule: []time.Duration{time.Minute}, IdleTimeout: time.Minute}
	h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
	h.signalAt(0, workflows.SignalRedeliver, workflows.RedeliverSignal{EventIDs: []string{eventID(5), eventID(4)}})
	st := h.queryAt(30 * time.Minute)
	h.signalAt(31*time.Minute, workflows.SignalCancel, workflows.CancelSignal{All: true})
	h.run()
	if h.settingsAsked != 1 {
		t.Fatalf("asked the worker for settings %d times", h.settingsAsked)
	}
	// Two attempts in all, as the worker's one-retry schedule says, the
	// retry a minute after the first.
	if calls := h.sub.callsFor(eventID(4)); len(calls) != 2 || calls[1].At-calls[0].At < time.Minute {
		t.Fatalf("calls %+v", calls)
	}
	if st.Head == nil || st.Head.EventID != eventID(4) || st.Head.MaxAttempts != 2 || len(st.Queued) != 1 {
		t.Fatalf("state %+v head %+v: want 4 then 5, in sequence order", st, st.Head)
	}
	r := h.store.auditsOf(workflows.AuditDeliveryRedelivered)
	if len(r) != 1 || r[0].Metadata["count"] != 2.0 || !strings.HasPrefix(r[0].TargetID, "deliver:") {
		t.Fatalf("redeliver rows %+v", r)
	}
}

// TestForgedRemovalIsChecked: a "subscription removed" signal for a
// subscription the database still has active changes nothing.
func TestForgedRemovalIsChecked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{})
	h.eventsAt(2*time.Second, 1, 2)
	h.signalAt(time.Minute, workflows.SignalSubscription, workflows.SubscriptionSignal{State: "cancelled"})
	h.signalAt(2*time.Minute, workflows.SignalResume, workflows.ControlSignal{})
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want both events: the removal was forged", got)
	}
	rows := h.store.auditsOf(workflows.AuditSignalRejected)
	if len(rows) != 1 || rows[0].Metadata["reason"] != "subscription_not_cancelled" {
		t.Fatalf("signal_rejected rows %+v", rows)
	}
}

// TestOtherWorkflowCannotActForAKey: a workflow started under another id
// with a key's subscription and subject sends nothing and writes no
// outcome for that key.
func TestOtherWorkflowCannotActForAKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.workflowID = "deliver:forged"
	h.eventsAt(time.Second, 1)
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{})
	h.eventsAt(2*time.Second, 2)
	h.signalAt(time.Minute, workflows.SignalCancel, workflows.CancelSignal{All: true})
	h.signalAt(2*time.Minute, workflows.SignalResume, workflows.ControlSignal{})
	h.run()
	if calls := h.sub.all(); len(calls) != 0 {
		t.Fatalf("a forged workflow made %d POSTs", len(calls))
	}
	if len(h.store.updates) != 0 {
		t.Fatalf("a forged workflow wrote outcomes %+v", h.store.updates)
	}
	rows := h.store.auditsOf(workflows.AuditSignalRejected)
	if !*regularFirstAttempt {
		// QueueFromLogVersion: it completes at once, without a word.
		if len(rows) != 0 || h.store.queueReads != 0 {
			t.Fatalf("a forged workflow wrote %+v and read the rows %d times", rows, h.store.queueReads)
		}
		return
	}
	if len(rows) != 1 || rows[0].Metadata["reason"] != "not_the_key_workflow" {
		t.Fatalf("signal_rejected rows %+v", rows)
	}
}

// TestRetriedBatchSkipsWhatWasDelivered: each success is recorded as it
// happens, so when a batch's execution dies midway (a killed worker) its
// retry sends only what had not gone through.
func TestRetriedBatchSkipsWhatWasDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	crashed := false
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(3) && !crashed {
			crashed = true
			// The outcomes of 1 and 2 are written beside the POSTs; wait for
			// them as a real crash would come later than this.
			deadline := time.Now().Add(5 * time.Second)
			for h.store.outcome(eventID(2)) != store.EventDelivered && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			panic("worker killed")
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2, 3, 4)
	h.eventsAt(time.Minute, 1, 2) // and a relay re-send of two of them
	st := h.queryAt(5 * time.Minute)
	h.run()
	if !crashed {
		t.Fatal("the crash did not happen")
	}
	// Each counted once: the two the dead execution delivered, and not the re-sends.
	if st.Counters.Delivered != 4 {
		t.Fatalf("delivered counter %d, want 4", st.Counters.Delivered)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3, 4)) {
		t.Fatalf("delivered %v, want each event once, in order", got)
	}
}

// TestForgedSeqDoesNotShadowTheGenuineEvent: a forged copy of a real event
// with a wrong seq is rejected when its turn comes, and the relay's genuine
// copy is still delivered.
func TestForgedSeqDoesNotShadowTheGenuineEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{})
	h.signalAt(2*time.Second, workflows.SignalEvent, workflows.EventSignal{Events: []activities.Event{{ID: eventID(5), Seq: 999}}})
	h.eventsAt(3*time.Second, 2, 5)
	h.signalAt(time.Minute, workflows.SignalResume, workflows.ControlSignal{})
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2, 5)) {
		t.Fatalf("delivered %v, want the genuine 2 and 5", got)
	}
	reason := "seq_mismatch"
	if !*regularFirstAttempt {
		reason = "event_not_owed" // refused when signalled (QueueFromLogVersion)
	}
	if rows := h.store.auditsOf(workflows.AuditSignalRejected); len(rows) != 1 || rows[0].Metadata["reason"] != reason {
		t.Fatalf("rejections %+v", rows)
	}
}

// TestForgedCarryCannotRedeliver: a workflow started with a hand-made carried
// queue marking settled events as redeliveries sends none of them: only an
// operator's redeliver (which sets the outcome back to queued) does.
func TestForgedCarryCannotRedeliver(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.store.outcomes[eventID(1)] = store.EventDelivered
	h.store.outcomes[eventID(2)] = store.EventCancelled
	h.params.Carry = &workflows.Carry{Queue: []workflows.QueueItem{
		{Event: activities.Event{ID: eventID(1), Seq: 1, Again: true}},
		{Event: activities.Event{ID: eventID(2), Seq: 2, Again: true}},
	}}
	h.run()
	if calls := h.sub.all(); len(calls) != 0 {
		t.Fatalf("a forged carry made %d POSTs: %+v", len(calls), calls)
	}
}

// TestLongQueueSpillsToTheBacklog: past MaxQueue a key keeps its events in
// PostgreSQL, not in memory or in what it carries across continue-as-new,
// and reads them back in order as the queue drains; cancel --all drops the
// backlog too.
func TestLongQueueSpillsToTheBacklog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.MaxQueue = 100
	h.params.SignalsPerRun = 3
	// The relay writes the rows as it signals (the fake store's KeyQueue).
	h.signalAt(time.Second, workflows.SignalPause, workflows.ControlSignal{})
	h.eventsAt(2*time.Second, seqRange(1, 500)...)
	h.eventsAt(3*time.Second, seqRange(501, 1000)...)
	h.execute()
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	var next workflows.Params
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if len(next.Carry.Queue) != 100 || !next.Carry.Backlog || next.Carry.BacklogAfter != 100 {
		t.Fatalf("carried %d events, backlog %v after %d; want 100 in memory, the rest in the backlog",
			len(next.Carry.Queue), next.Carry.Backlog, next.Carry.BacklogAfter)
	}
	h2 := newHarness(t)
	h2.params = next
	h2.store.dispatched = seqRange(1, 1000)
	h2.signalAt(time.Second, workflows.SignalResume, workflows.ControlSignal{})
	h2.eventsAt(2*time.Second, 1001) // arrives while the backlog is read back
	h2.store.dispatched = append(h2.store.dispatched, 1001)
	h2.run()
	if got := h2.sub.delivered(); !reflect.DeepEqual(got, ids(seqRange(1, 1001)...)) {
		t.Fatalf("delivered %d events, want all 1001 in order", len(got))
	}

	h3 := newHarness(t)
	h3.params = next
	h3.store.dispatched = seqRange(1, 1000)
	// A carry is trusted from a real continue-as-new only, which the test
	// environment cannot start: the subscription's pause holds the key.
	h3.store.setState(store.StatePaused, "")
	h3.signalAt(time.Second, workflows.SignalCancel, workflows.CancelSignal{All: true})
	h3.signalAt(2*time.Second, workflows.SignalResume, workflows.ControlSignal{})
	h3.run()
	if n := len(h3.sub.all()); n != 0 {
		t.Fatalf("%d POSTs after cancel --all", n)
	}
	if rows := h3.store.auditsOf(workflows.AuditDeliveryCancelled); len(rows) != 1 || rows[0].Metadata["count"] != 1000.0 {
		t.Fatalf("cancel rows %+v, want one with all 1000", rows)
	}
}

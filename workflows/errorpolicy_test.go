package workflows_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// statusUpserts records every HeraldStatus the run upserts.
func (h *harness) statusUpserts() *[]string {
	var statuses []string
	h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		if s, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(workflows.SAStatus); ok {
			statuses = append(statuses, s)
		}
	}).Return(nil)
	return &statuses
}

// TestSkipPolicySettlesAndMovesOn: under onFailure skip (read from the
// subscription's row) an event that fails for good is settled as
// skipped_after_failure (outcome cancelled), audited delivery.skipped with
// its failure, counted, and the key delivers what is behind it instead of
// holding; redeliver by id takes the skipped event again.
func TestSkipPolicySettlesAndMovesOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion) // the rows are read at the start
	h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureSkip, MaxAttempts: 3})
	fixed := false
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) && !fixed {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2, 3)
	after := h.queryAt(time.Minute)
	h.at(2*time.Minute, func() { fixed = true })
	h.signalAt(2*time.Minute, workflows.SignalRedeliver, workflows.RedeliverSignal{EventID: eventID(1), Actor: "ann"})
	h.run()

	if n := len(h.sub.callsFor(eventID(1))); n != 3+1 {
		t.Fatalf("event 1 got %d POSTs, want maxAttempts 3 and 1 redelivery", n)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2, 3, 1)) {
		t.Fatalf("delivered %v, want 2 and 3 behind the skipped event, then its redelivery", got)
	}
	if after.Status == workflows.StatusFailed || after.Status == workflows.StatusExhausted || after.Head != nil ||
		after.Counters.Skipped != 1 || after.Counters.Failed != 0 {
		t.Fatalf("state after the skip %+v head %+v: want nothing held, one skipped", after, after.Head)
	}
	var skippedRow *store.OutcomeUpdate
	for i, u := range h.store.updates {
		if u.EventID == eventID(1) && u.Code == activities.CodeSkippedAfterFailure {
			skippedRow = &h.store.updates[i]
		}
	}
	if skippedRow == nil || skippedRow.Status != store.EventCancelled || skippedRow.Attempts != 3 ||
		skippedRow.LastCode != activities.CodeHandlerFailed {
		t.Fatalf("the skipped event's row %+v; want cancelled, skipped_after_failure, 3 attempts, last code handler_failed", skippedRow)
	}
	rows := h.store.auditsOf(workflows.AuditDeliverySkipped)
	if len(rows) != 1 || rows[0].ErrorCode != activities.CodeSkippedAfterFailure || rows[0].Metadata["eventId"] != eventID(1) ||
		rows[0].Metadata["failedCode"] != activities.CodeAttemptsExhausted || rows[0].Metadata["lastCode"] != activities.CodeHandlerFailed {
		t.Fatalf("delivery.skipped rows %+v", rows)
	}
	if n := len(h.store.auditsOf(workflows.AuditDeliveryFailed)); n != 0 {
		t.Fatalf("%d delivery.failed rows: a skipped key is not held", n)
	}
	if n := h.settled.count(activities.SettledSkipped); n != 1 {
		t.Fatalf("%d events counted skipped, want 1", n)
	}
	if got := h.store.outcome(eventID(1)); got != store.EventDelivered {
		t.Fatalf("event 1 ends %q after its redelivery, want delivered", got)
	}
}

// TestSkipPolicyIsReadWhenTheHeadFails: the row decides at the moment of
// the failure: a subscription switched to skip while its key runs skips,
// a terminal failure too; one switched back to hold holds.
func TestSkipPolicyIsReadWhenTheHeadFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion) // the rows are read at the start
	h.params.MaxRearms = workflows.NoRearms
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) || id == eventID(3) {
			return fail(activities.CodeSchemaMismatch, 422)
		}
		return activities.PostResult{Status: 200}
	})
	h.at(0, func() { h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureSkip}) })
	h.eventsAt(time.Second, 1, 2)
	h.at(time.Minute, func() { h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureHold}) })
	h.eventsAt(2*time.Minute, 3, 4)
	held := h.queryAt(time.Hour)
	h.signalAt(2*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
	h.run()
	if rows := h.store.auditsOf(workflows.AuditDeliverySkipped); len(rows) != 1 || rows[0].Metadata["eventId"] != eventID(1) ||
		rows[0].Metadata["failedCode"] != activities.CodeSchemaMismatch {
		t.Fatalf("delivery.skipped rows %+v; want event 1's terminal failure", rows)
	}
	if held.Head == nil || held.Head.EventID != eventID(3) || held.Status != workflows.StatusExhausted {
		t.Fatalf("after the switch to hold: %q head %+v; want the key held on event 3", held.Status, held.Head)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(2, 4)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestMaxAttemptsComesFromTheRow: the subscription's maxAttempts replaces
// the schedule's count (fewer, or more with the last delay repeated); an
// attempt count in the workflow's input is ignored.
func TestMaxAttemptsComesFromTheRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		row   int
		input int
		want  int
	}{
		{"fewer", 2, 0, 2},
		{"more", 10, 0, 10},
		{"input ignored", 0, 1, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.firstAttemptVersion(workflows.QueueFromLogVersion) // the rows are read at the start
			h.params.MaxRearms = workflows.NoRearms
			h.params.Attempts = tc.input
			h.store.setPolicy(store.Policy{MaxAttempts: tc.row})
			h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
			h.eventsAt(time.Second, 1)
			held := h.queryAt(20 * time.Hour)
			h.signalAt(21*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
			h.run()
			calls := h.sub.callsFor(eventID(1))
			if len(calls) != tc.want {
				t.Fatalf("%d attempts, want %d", len(calls), tc.want)
			}
			if tc.want > 8 {
				if gap := calls[9].At - calls[8].At; gap < time.Hour || gap > time.Hour+5*time.Second {
					t.Fatalf("delay before attempt 10 = %v, want the schedule's last (1h)", gap)
				}
			}
			if held.Head == nil || held.Head.MaxAttempts != tc.want || held.Head.Code != activities.CodeAttemptsExhausted {
				t.Fatalf("held head %+v", held.Head)
			}
		})
	}
}

// TestExhaustedIsNotFailed: a failed key waiting to re-arm shows failed
// (status, query, search attribute) with its next attempt; once its
// automatic re-arms are used up it shows exhausted, with none.
func TestExhaustedIsNotFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion) // the rows are read at the start
	h.params.RetrySchedule = []time.Duration{time.Second}
	h.params.MaxRearms = 1
	statuses := h.statusUpserts()
	h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
	h.eventsAt(time.Second, 1)
	waiting := h.queryAt(30 * time.Minute)
	spent := h.queryAt(3 * time.Hour)
	h.signalAt(4*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
	h.run()
	if waiting.Status != workflows.StatusFailed || waiting.Head == nil || waiting.Head.NextAttemptAt == nil {
		t.Fatalf("waiting to re-arm: %q head %+v; want failed with the re-arm time", waiting.Status, waiting.Head)
	}
	if spent.Status != workflows.StatusExhausted || spent.Head == nil || spent.Head.NextAttemptAt != nil {
		t.Fatalf("re-arms used up: %q head %+v; want exhausted with no next attempt", spent.Status, spent.Head)
	}
	saw := map[string]bool{}
	for _, s := range *statuses {
		saw[s] = true
	}
	if !saw[workflows.StatusFailed] || !saw[workflows.StatusExhausted] {
		t.Fatalf("status upserts %v; want failed, then exhausted", *statuses)
	}
}

// TestCountedFailureResetsUnreachableBackoff: an attempt the subscriber
// answered (a counted failure) ends the unreachable back-off, so the next
// unreachable wait is 30 s again, not the doubled wait of before.
func TestCountedFailureResetsUnreachableBackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion) // the rows are read at the start
	h.sub.setRespond(func(_ string, _, nth int) activities.PostResult {
		switch {
		case nth < 5, nth == 6:
			return activities.PostResult{Code: activities.CodeSubscriberUnreachable, Message: "connection refused"}
		case nth == 5:
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1)
	h.run()
	calls := h.sub.callsFor(eventID(1))
	if len(calls) != 8 {
		t.Fatalf("calls %+v", calls)
	}
	if calls[5].OK || calls[5].Attempt != 1 || calls[6].Attempt != 2 {
		t.Fatalf("call 6 should be the counted attempt 1, call 7 attempt 2: %+v", calls)
	}
	if gap := calls[7].At - calls[6].At; gap < 30*time.Second || gap > 32*time.Second {
		t.Fatalf("unreachable wait after a counted failure = %v, want 30 s", gap)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestRunsBeforeErrorPolicyKeepTheirBehaviour: a run recorded without the
// ErrorPolicyChange marker holds whatever the row says and shows failed.
func TestRunsBeforeErrorPolicyKeepTheirBehaviour(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// At OneMarkerVersion the policy is implied: a run before it.
	if *regularFirstAttempt {
		h.firstAttemptVersion(workflow.DefaultVersion)
	} else {
		h.firstAttemptVersion(workflows.QueueFromLogVersion)
	}
	h.env.OnGetVersion(workflows.ErrorPolicyChange, workflow.DefaultVersion, workflows.ErrorPolicyVersion).Return(workflow.DefaultVersion)
	h.params.MaxRearms = workflows.NoRearms
	h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureSkip, MaxAttempts: 2})
	h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
	h.eventsAt(time.Second, 1)
	held := h.queryAt(20 * time.Hour)
	h.signalAt(21*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
	h.run()
	if held.Status != workflows.StatusFailed || held.Head == nil || held.Head.MaxAttempts != 8 {
		t.Fatalf("old run: %q head %+v; want failed after the schedule's 8 attempts", held.Status, held.Head)
	}
	if n := len(h.store.auditsOf(workflows.AuditDeliverySkipped)); n != 0 {
		t.Fatalf("an old run skipped %d events", n)
	}
}

// TestStartWithTheSubscriptionRowGone: a run whose start read finds no
// subscription row for the error policy (removed meanwhile) holds, as
// ErrorPolicy answers, and delivers what the rows say the key owes: the
// read is not a failure to try again every 5 s with the key blocked.
func TestStartWithTheSubscriptionRowGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.QueueFromLogVersion)
	h.store.mu.Lock()
	h.store.policyGone = true
	h.store.mu.Unlock()
	h.eventsAt(time.Second, 1, 2)
	state := h.queryAt(time.Minute)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Fatalf("delivered %v, want 1 and 2", got)
	}
	if state.Status == workflows.StatusBlocked {
		t.Fatalf("state %+v: the key shows blocked", state)
	}
}

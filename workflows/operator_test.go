package workflows_test

import (
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/testsuite"

	"herald/activities"
	"herald/workflows"
)

// update sends an Update at a point of workflow time and captures its answer.
type updateAnswer struct {
	rejected error
	result   workflows.OpResult
	err      error
	done     bool
}

func (h *harness) updateAt(d time.Duration, name string, payload any) *updateAnswer {
	a := &updateAnswer{}
	h.at(d, func() {
		h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { a.rejected, a.done = err, true },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				a.done, a.err = true, err
				if r, ok := v.(workflows.OpResult); ok {
					a.result = r
				}
			},
		}, payload)
	})
	return a
}

// TestUpdatesAnswerWhatChanged: an operator Update says what it did, or
// that there was nothing to do and why; a malformed one is rejected; the
// audit rows are the signals'.
func TestUpdatesAnswerWhatChanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.MaxRearms = workflows.NoRearms
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id == eventID(1) && nth == 0 {
			return fail(activities.CodeSchemaMismatch, 422)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2, 3)
	bad := h.updateAt(time.Minute, workflows.UpdateCancel, workflows.CancelSignal{EventID: eventID(2), All: true})
	cancel3 := h.updateAt(2*time.Minute, workflows.UpdateCancel, workflows.CancelSignal{EventID: eventID(3), Actor: "ann"})
	redeliver := h.updateAt(3*time.Minute, workflows.UpdateRedeliver, workflows.RedeliverSignal{Actor: "ann", Reason: "fixed"})
	again := h.updateAt(4*time.Minute, workflows.UpdateRedeliver, workflows.RedeliverSignal{Actor: "ann"})
	pause := h.updateAt(5*time.Minute, workflows.UpdatePause, workflows.ControlSignal{Actor: "ann"})
	pause2 := h.updateAt(6*time.Minute, workflows.UpdatePause, workflows.ControlSignal{Actor: "ann"})
	resume := h.updateAt(7*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
	resume2 := h.updateAt(8*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
	h.run()

	if bad.rejected == nil {
		t.Errorf("cancel with eventId and all was not rejected: %+v", bad)
	}
	if r := cancel3.result; !r.Changed || !reflect.DeepEqual(r.Cancelled, ids(3)) || r.Status != workflows.StatusExhausted || r.Queued != 2 {
		t.Errorf("cancel of a queued event behind a failed head: %+v", r)
	}
	if r := redeliver.result; !r.Changed || !reflect.DeepEqual(r.Requeued, ids(1)) || r.Status != workflows.StatusDelivering {
		t.Errorf("redeliver of the failed head: %+v", r)
	}
	if r := again.result; r.Changed || r.Reason != "nothing_to_redeliver" || r.Status != workflows.StatusIdle {
		t.Errorf("redeliver with nothing held: %+v", r)
	}
	if !pause.result.Changed || pause2.result.Changed || pause2.result.Reason != "already_paused" ||
		!resume.result.Changed || resume2.result.Changed || resume2.result.Reason != "not_paused" {
		t.Errorf("pause %+v, again %+v, resume %+v, again %+v", pause.result, pause2.result, resume.result, resume2.result)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Errorf("delivered %v", got)
	}
	var codes []string
	for _, a := range h.store.auditsOf(workflows.AuditDeliveryRedelivered) {
		codes = append(codes, a.Outcome+":"+a.ErrorCode)
	}
	if want := []string{"allowed:", "failed:nothing_to_redeliver"}; !reflect.DeepEqual(codes, want) {
		t.Errorf("redeliver audit rows %v, want %v (as the signals write them)", codes, want)
	}
}

// TestCancelBehindARetryingHeadAppliesAtOnce: cancelling a queued event
// that is not the head takes effect at once, not after the head's retry
// schedule, and leaves the head's schedule alone.
func TestCancelBehindARetryingHeadAppliesAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.MaxRearms = workflows.NoRearms
	h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
		if id == eventID(1) {
			return fail(activities.CodeHandlerFailed, 500)
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1, 2, 3)
	cancel := h.updateAt(3*time.Minute, workflows.UpdateCancel, workflows.CancelSignal{EventID: eventID(2)})
	st := h.queryAt(3*time.Minute + time.Second)
	h.signalAt(3*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
	h.run()
	if !cancel.done || !cancel.result.Changed || cancel.result.Status != workflows.StatusRetrying {
		t.Fatalf("cancel answered %+v", cancel)
	}
	if len(st.Queued) != 1 || st.Queued[0].EventID != eventID(3) || st.Head.Attempt >= 8 || st.Status != workflows.StatusRetrying {
		t.Fatalf("a second after the cancel: head %+v queued %+v", st.Head, st.Queued)
	}
	if n := len(h.sub.callsFor(eventID(1))); n != 8 {
		t.Fatalf("the head got %d attempts, want its whole schedule of 8", n)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(3)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestRearmBudget: a manual redeliver restores the automatic re-arms, a
// success resets them, and NoRearms turns them off.
func TestRearmBudget(t *testing.T) {
	t.Parallel()
	t.Run("redeliver restores", func(t *testing.T) {
		h := newHarness(t)
		h.params.RetrySchedule = []time.Duration{time.Second}
		h.params.MaxRearms = 1
		h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
		h.eventsAt(time.Second, 1)
		// Fails at ~2s, re-arms at 1h, fails; spent. Redeliver at 3h, fails;
		// re-arms again at 4h, fails; spent.
		h.signalAt(3*time.Hour, workflows.SignalRedeliver, workflows.RedeliverSignal{})
		spent := h.queryAt(10 * time.Hour)
		h.signalAt(11*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
		h.run()
		if n := len(h.store.auditsOf(workflows.AuditDeliveryRearmed)); n != 2 {
			t.Fatalf("%d re-arms, want 1 before and 1 after the redeliver", n)
		}
		if n := len(h.sub.callsFor(eventID(1))); n != 8 {
			t.Fatalf("%d attempts, want 2 per arming × 4 armings", n)
		}
		if spent.Head == nil || spent.Head.NextAttemptAt != nil {
			t.Fatalf("state once spent %+v", spent.Head)
		}
	})
	t.Run("success resets", func(t *testing.T) {
		h := newHarness(t)
		h.params.RetrySchedule = []time.Duration{time.Second}
		h.params.MaxRearms = 1
		h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
			// Event 1 fails its first arming; event 2 always fails.
			if (id == eventID(1) && nth < 2) || id == eventID(2) {
				return fail(activities.CodeHandlerFailed, 500)
			}
			return activities.PostResult{Status: 200}
		})
		h.eventsAt(time.Second, 1, 2)
		h.signalAt(10*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
		h.run()
		rearms := h.store.auditsOf(workflows.AuditDeliveryRearmed)
		if len(rearms) != 2 || rearms[0].Metadata["eventId"] != eventID(1) || rearms[1].Metadata["eventId"] != eventID(2) {
			t.Fatalf("re-arms %+v: event 2 must re-arm too, the success of event 1 reset the count", rearms)
		}
	})
	t.Run("off", func(t *testing.T) {
		h := newHarness(t)
		h.params.MaxRearms = workflows.NoRearms
		h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeSchemaMismatch, 422) })
		h.eventsAt(time.Second, 1)
		held := h.queryAt(20 * time.Hour)
		h.signalAt(21*time.Hour, workflows.SignalCancel, workflows.CancelSignal{})
		h.run()
		if n := len(h.sub.all()); n != 1 || len(h.store.auditsOf(workflows.AuditDeliveryRearmed)) != 0 {
			t.Fatalf("%d attempts, re-arms %v: re-arming is off", n, h.store.auditsOf(workflows.AuditDeliveryRearmed))
		}
		if held.Status != workflows.StatusExhausted || held.Head.NextAttemptAt != nil {
			t.Fatalf("held state %+v head %+v", held, held.Head)
		}
	})
}

// TestReachableEndsTheUnreachableWait: the word that the app answered again
// ends a key's unreachable back-off at once.
func TestReachableEndsTheUnreachableWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	reachable := false
	h.sub.setRespond(func(string, int, int) activities.PostResult {
		if !reachable {
			return activities.PostResult{Code: activities.CodeSubscriberUnreachable, Message: "refused"}
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1)
	h.at(10*time.Second, func() { reachable = true })
	h.signalAt(10*time.Second, workflows.SignalReachable, nil)
	h.run()
	calls := h.sub.all()
	if len(calls) != 2 || !calls[1].OK || calls[1].At > 10*time.Second {
		t.Fatalf("calls %+v: the retry must follow the signal at 10s, not the 30s back-off", calls)
	}
}

// TestDetailsFollowEveryAttempt: the current details shown in the UI name
// the attempt under way, not the one when the status last changed.
func TestDetailsFollowEveryAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.MaxRearms = workflows.NoRearms
	h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeHandlerFailed, 500) })
	h.eventsAt(time.Second, 1, 2)
	var seen []string
	for _, at := range []time.Duration{4 * time.Second, 40 * time.Second, 3 * time.Minute} {
		h.at(at, func() {
			v, err := h.env.QueryWorkflow("__temporal_workflow_metadata")
			var md sdkpb.WorkflowMetadata
			if err != nil || v.Get(&md) != nil {
				t.Errorf("metadata query: %v", err)
				return
			}
			seen = append(seen, md.CurrentDetails)
		})
	}
	h.signalAt(time.Hour, workflows.SignalCancel, workflows.CancelSignal{All: true})
	h.run()
	for i, want := range []string{"attempt 2 of 8", "attempt 4 of 8", "attempt 5 of 8"} {
		if i >= len(seen) || !strings.Contains(seen[i], want) || !strings.Contains(seen[i], "**retrying**") ||
			!strings.Contains(seen[i], "handler_failed") || !strings.Contains(seen[i], "2 queued") {
			t.Fatalf("details %d: want %q, got %q", i, want, seen)
		}
	}
}

// TestUpdateWithStartWithoutSettings: an Update that starts the workflow
// (update-with-start, no settings) is accepted while the workflow asks the
// worker for its settings, and answered.
func TestUpdateWithStartWithoutSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.RetrySchedule = nil
	answer := h.updateAt(0, workflows.UpdateRedeliver, workflows.RedeliverSignal{EventID: eventID(3), Actor: "ops"})
	h.run()
	if answer.rejected != nil || !answer.result.Changed || !reflect.DeepEqual(answer.result.Requeued, ids(3)) {
		t.Fatalf("answer %+v", answer)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(3)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestBatchesEndInTime: an execution stops taking events of its batch after
// BatchTime, so an operator's action that waits for the delivery in flight
// waits seconds, not a whole batch of slow answers.
func TestBatchesEndInTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.params.BatchTime = 120 * time.Millisecond
	h.sub.setRespond(func(string, int, int) activities.PostResult {
		time.Sleep(50 * time.Millisecond) // a slow subscriber, in real time
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, seqRange(1, 10)...)
	h.run()
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(seqRange(1, 10)...)) {
		t.Fatalf("delivered %v", got)
	}
	if n := h.store.batches(); n < 3 {
		t.Fatalf("10 answers of 50 ms went in %d executions; with a 120 ms batch time, want at least 3", n)
	}
}

// TestPauseOutlivesTheRun: a run that starts while the rows say an
// operator paused the key (a terminate ended the run that took the pause,
// and the relay's re-drive or a signal started this one) holds the key:
// it delivers nothing, shows paused, and a resume delivers what waited, in
// order, and deletes the pause.
func TestPauseOutlivesTheRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// Runs that read the key's rows (QueueFromLogVersion on) read its pause.
	h.firstAttemptVersion(workflows.OneMarkerVersion)
	h.store.paused = true
	h.eventsAt(time.Second, 1, 2)
	held := h.queryAt(time.Minute)
	again := h.updateAt(2*time.Minute, workflows.UpdatePause, workflows.ControlSignal{Actor: "ann"})
	resume := h.updateAt(3*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann", Reason: "done"})
	h.run()

	if held.Status != workflows.StatusPaused || !held.KeyPaused || held.Head == nil || held.Head.EventID != eventID(1) ||
		held.Head.Attempt != 0 || len(held.Queued) != 1 || held.Counters.Delivered != 0 {
		t.Errorf("a minute in: status %q, paused %v, head %+v, %d queued behind it, %d delivered; "+
			"want paused on event 1, untried, with event 2 behind it", held.Status, held.KeyPaused, held.Head,
			len(held.Queued), held.Counters.Delivered)
	}
	if again.result.Changed || again.result.Reason != "already_paused" {
		t.Errorf("a pause of the key paused by the rows answered %+v, want already_paused", again.result)
	}
	if !resume.result.Changed {
		t.Errorf("resume answered %+v", resume.result)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Errorf("delivered %v, want both after the resume", got)
	}
	h.wantResumed("ann")
}

// TestPauseThenResumeKeepOrder: a pause sent while the head waits between
// retries waits for the attempt under way; a resume sent right after it
// waits behind it, so the key ends resumed, as the operator left it.
func TestPauseThenResumeKeepOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if id != eventID(1) {
			return activities.PostResult{Status: 204}
		}
		if nth == 0 {
			return fail(activities.CodeHandlerFailed, 500)
		}
		if nth == 1 {
			// During the retry's POST: both wait for it.
			h.env.SignalWorkflow(workflows.SignalPause, workflows.ControlSignal{Actor: "ann"})
			h.env.SignalWorkflow(workflows.SignalResume, workflows.ControlSignal{Actor: "ann"})
		}
		return activities.PostResult{Status: 204}
	})
	h.eventsAt(time.Second, 1)
	h.eventsAt(5*time.Minute, 2)
	st := h.queryAt(10 * time.Minute)
	h.run()
	if st.KeyPaused || st.Status == workflows.StatusPaused {
		t.Errorf("after a pause then a resume the key is %q (paused %v)", st.Status, st.KeyPaused)
	}
	if h.store.paused {
		t.Error("the key's paused_keys row is left after a pause then a resume")
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Errorf("delivered %v", got)
	}
	if p, r := len(h.store.auditsOf(workflows.AuditDeliveryPaused)), len(h.store.auditsOf(workflows.AuditDeliveryResumed)); p != 1 || r != 1 {
		t.Errorf("%d paused and %d resumed rows, want one each", p, r)
	}
}

// TestResumeForgetsAPauseOnlyTheRowsHold: a resume of a key its run does
// not hold paused still deletes the key's paused_keys row (a pause the run
// never learnt of: a reset past it, a terminated run's late write), so the
// key's next run does not start paused; it answers changed and writes one
// delivery.resumed row. With no row it answers not_paused and writes none.
func TestResumeForgetsAPauseOnlyTheRowsHold(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// Runs that read the key's rows (QueueFromLogVersion on) read its pause.
	h.firstAttemptVersion(workflows.OneMarkerVersion)
	h.eventsAt(time.Second, 1)
	h.at(30*time.Second, func() { h.store.mu.Lock(); h.store.paused = true; h.store.mu.Unlock() })
	resume := h.updateAt(time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann", Reason: "clear it"})
	again := h.updateAt(2*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
	h.run()
	if !resume.result.Changed {
		t.Errorf("resume of a key paused in its rows alone answered %+v", resume.result)
	}
	if again.result.Changed || again.result.Reason != "not_paused" {
		t.Errorf("a second resume answered %+v, want not_paused", again.result)
	}
	h.wantResumed("ann")
}

// TestResumeOfAWaitingKeyForgetsTheRowsPause: a resume of a key that waits
// for its paused subscription re-checks the subscription and, its run not
// paused, still deletes a pause only the key's rows hold.
func TestResumeOfAWaitingKeyForgetsTheRowsPause(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// Runs that read the key's rows (QueueFromLogVersion on) read its pause.
	h.firstAttemptVersion(workflows.OneMarkerVersion)
	h.params.RecheckInterval = time.Hour
	h.store.setState(activities.SubscriptionPaused, "paused_by_operator")
	h.eventsAt(time.Second, 1)
	h.at(30*time.Second, func() {
		h.store.setState("active", "")
		h.store.mu.Lock()
		h.store.paused = true
		h.store.mu.Unlock()
	})
	resume := h.updateAt(time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
	h.run()
	if !resume.result.Changed {
		t.Errorf("resume answered %+v", resume.result)
	}
	if h.store.paused {
		t.Error("the resume left the key's paused_keys row: its next run would start paused")
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
		t.Errorf("delivered %v", got)
	}
}

// wantResumed fails the test unless a resume deleted the key's paused_keys
// row and wrote one delivery.resumed row, by actor.
func (h *harness) wantResumed(actor string) {
	h.t.Helper()
	if h.store.paused {
		h.t.Error("the resume left the key's paused_keys row: its next run would start paused")
	}
	if rows := h.store.auditsOf(workflows.AuditDeliveryResumed); len(rows) != 1 || rows[0].Actor != actor {
		h.t.Errorf("delivery.resumed rows %+v, want one by %s", rows, actor)
	}
}

// TestPausedRunWithNothingQueuedLooksAgain: a paused run that owes
// nothing keeps holding the key, whatever its idle periods, and still
// shows as paused; after a resume it idles out and ends as any run.
func TestPausedRunWithNothingQueuedLooksAgain(t *testing.T) {
	t.Parallel()
	h := pausedAfterOneEvent(t) // with the default idle timeout, 10 minutes
	held := h.queryAt(45 * time.Minute)
	h.updateAt(50*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
	h.run()
	if held.Status != workflows.StatusPaused || !held.KeyPaused {
		t.Errorf("45 minutes in: status %q, paused %v; want the run to hold the key paused", held.Status, held.KeyPaused)
	}
	// Idle since its last look (40 minutes in), it ends an idle period
	// after that look, once resumed.
	if ended := h.env.Now().Sub(h.start); ended < 50*time.Minute || ended > 61*time.Minute {
		t.Errorf("the run ended %v after its start, want after the resume at 50 minutes, within an idle period", ended)
	}
	if rows := h.store.auditsOf(workflows.AuditDeliveryCancelled); len(rows) != 0 {
		t.Errorf("a paused run wrote delivery.cancelled rows: %+v", rows)
	}
}

// TestPausedRunOfARemovedSubscriptionEnds: the removal of a subscription
// deletes its keys' pauses, and its sweep tells only keys that hold
// events. A paused run with nothing queued finds, after an idle period,
// its subscription removed: it ends as a removed subscription's key does,
// audited. Before PausedIdleChange it waited for an operator for ever.
func TestPausedRunOfARemovedSubscriptionEnds(t *testing.T) {
	t.Parallel()
	h := pausedAfterOneEvent(t)
	h.at(25*time.Minute, func() {
		h.store.setState(activities.SubscriptionCancelled, "subscription_removed")
		h.store.mu.Lock()
		h.store.paused = false
		h.store.mu.Unlock()
	})
	h.run()
	rows := h.store.auditsOf(workflows.AuditDeliveryCancelled)
	if len(rows) != 1 || rows[0].ErrorCode != activities.CodeSubscriptionRemoved {
		t.Errorf("delivery.cancelled rows %+v, want one for the removed subscription", rows)
	}
	if ended := h.env.Now().Sub(h.start); ended < 25*time.Minute || ended > 36*time.Minute {
		t.Errorf("the run ended %v after its start, want within an idle period of the removal at 25 minutes", ended)
	}
}

// TestPausedRunTakesRowsFoundWhenItLooks: rows a paused run finds when it
// looks after an idle period are queued behind the pause, not delivered,
// and go once the key is resumed.
func TestPausedRunTakesRowsFoundWhenItLooks(t *testing.T) {
	t.Parallel()
	h := pausedAfterOneEvent(t)
	// Event 2's row, written by the relay with no signal to the run.
	h.at(5*time.Minute, func() { h.store.mu.Lock(); h.store.dispatched = append(h.store.dispatched, 2); h.store.mu.Unlock() })
	held := h.queryAt(15 * time.Minute)
	h.updateAt(20*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
	h.run()
	if held.Status != workflows.StatusPaused || held.Head == nil || held.Head.EventID != eventID(2) {
		t.Errorf("15 minutes in: status %q, head %+v; want paused on event 2, found by the look", held.Status, held.Head)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Errorf("delivered %v, want 1 then 2 after the resume", got)
	}
}

// pausedAfterOneEvent is a harness whose key delivers event 1 a second in
// and is paused by ann a minute in, with nothing queued; its run reads the
// key's rows (QueueFromLogVersion on).
func pausedAfterOneEvent(t *testing.T) *harness {
	h := newHarness(t)
	h.firstAttemptVersion(workflows.OneMarkerVersion)
	h.eventsAt(time.Second, 1)
	h.updateAt(time.Minute, workflows.UpdatePause, workflows.ControlSignal{Actor: "ann"})
	return h
}

// TestRowsPauseHoldsARunThatMissedIt: a pause the key's rows hold and its
// run does not (a reset to before the pause, a run started beside the
// one that took it) stops the run's next delivery: Deliver reads the
// paused_keys row and POSTs nothing, and the run holds the key paused as
// if it had taken the pause, until a resume.
func TestRowsPauseHoldsARunThatMissedIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.OneMarkerVersion)
	h.eventsAt(time.Second, 1)
	h.at(30*time.Second, func() { h.store.mu.Lock(); h.store.paused = true; h.store.mu.Unlock() })
	h.eventsAt(time.Minute, 2, 3)
	held := h.queryAt(2 * time.Minute)
	resume := h.updateAt(3*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann", Reason: "done"})
	h.run()

	if held.Status != workflows.StatusPaused || !held.KeyPaused || held.Head == nil || held.Head.EventID != eventID(2) ||
		held.Head.Attempt != 0 || held.Counters.Delivered != 1 {
		t.Errorf("two minutes in: status %q, paused %v, head %+v, %d delivered; want paused on event 2, untried, after event 1",
			held.Status, held.KeyPaused, held.Head, held.Counters.Delivered)
	}
	if !resume.result.Changed {
		t.Errorf("resume answered %+v", resume.result)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2, 3)) {
		t.Errorf("delivered %v, want 1, then 2 and 3 after the resume", got)
	}
	h.wantResumed("ann")
}

// TestPausedRunLetsGoWhenItsRowIsGone: a run that holds its key paused
// while the key's paused_keys row is gone (the resume that deleted it
// reached a run this one was reset from) reads the row after an idle
// period and lets the key go: what waited behind the pause is delivered,
// and no resume is audited (the resume that deleted the row was).
func TestPausedRunLetsGoWhenItsRowIsGone(t *testing.T) {
	t.Parallel()
	h := pausedAfterOneEvent(t) // with the default idle timeout, 10 minutes
	h.eventsAt(2*time.Minute, 2)
	h.at(5*time.Minute, func() { h.store.mu.Lock(); h.store.paused = false; h.store.mu.Unlock() })
	held := h.queryAt(11 * time.Minute)
	gone := h.queryAt(13 * time.Minute)
	h.run()

	if held.Status != workflows.StatusPaused || !held.KeyPaused || held.Head == nil || held.Head.EventID != eventID(2) {
		t.Errorf("11 minutes in: status %q, paused %v, head %+v; want still paused on event 2 before its look",
			held.Status, held.KeyPaused, held.Head)
	}
	if gone.KeyPaused || gone.Status == workflows.StatusPaused {
		t.Errorf("13 minutes in: status %q, paused %v; want the key let go at its look, 12 minutes in", gone.Status, gone.KeyPaused)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Errorf("delivered %v, want 1, then 2 once the run let the key go", got)
	}
	if rows := h.store.auditsOf(workflows.AuditDeliveryResumed); len(rows) != 0 {
		t.Errorf("delivery.resumed rows %+v, want none: no operator resumed here", rows)
	}
}

// TestPausedIdleRunLetsGoWhenItsRowIsGone: the same with nothing queued:
// the run's look after an idle period finds no row, lets the key go, and
// ends as an idle key does.
func TestPausedIdleRunLetsGoWhenItsRowIsGone(t *testing.T) {
	t.Parallel()
	h := pausedAfterOneEvent(t)
	h.at(5*time.Minute, func() { h.store.mu.Lock(); h.store.paused = false; h.store.mu.Unlock() })
	h.run()
	if ended := h.env.Now().Sub(h.start); ended < 10*time.Minute || ended > 22*time.Minute {
		t.Errorf("the run ended %v after its start, want at its first look after the row went, 11 minutes in", ended)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
		t.Errorf("delivered %v", got)
	}
}

// TestPauseOfARunWhoseRowIsGoneTakesItAgain: a run that holds its key
// paused while the key's row is gone (the resume that deleted it reached a
// run this one was reset from) does not answer an operator's pause
// already_paused: that would leave the pause to the run's memory, which
// its next look lets go. The pause is taken again, row and audit row, and
// holds until a resume.
func TestPauseOfARunWhoseRowIsGoneTakesItAgain(t *testing.T) {
	t.Parallel()
	h := pausedAfterOneEvent(t)
	h.eventsAt(2*time.Minute, 2)
	h.at(5*time.Minute, func() { h.store.mu.Lock(); h.store.paused = false; h.store.mu.Unlock() })
	again := h.updateAt(6*time.Minute, workflows.UpdatePause, workflows.ControlSignal{Actor: "bob", Reason: "keep it held"})
	held := h.queryAt(30 * time.Minute)
	h.updateAt(40*time.Minute, workflows.UpdateResume, workflows.ControlSignal{Actor: "ann"})
	h.run()
	if !again.result.Changed {
		t.Errorf("bob's pause of a key paused only in its run's memory answered %+v, want changed", again.result)
	}
	if held.Status != workflows.StatusPaused || !held.KeyPaused {
		t.Errorf("30 minutes in: status %q, paused %v; want the key held by bob's pause", held.Status, held.KeyPaused)
	}
	for _, c := range h.sub.all() {
		if c.EventID == eventID(2) && c.OK && c.At < 39*time.Minute {
			t.Errorf("event 2 delivered %v after the first POST, before ann's resume at 40 minutes", c.At)
		}
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1, 2)) {
		t.Errorf("delivered %v, want 1, then 2 after the resume", got)
	}
	if rows := h.store.auditsOf(workflows.AuditDeliveryPaused); len(rows) != 2 || rows[1].Actor != "bob" {
		t.Errorf("delivery.paused rows %+v, want ann's and bob's", rows)
	}
}

// TestResumeDuringADeliveryThatReadThePause: a Deliver execution reads the
// key's row (paused beside the run, which did not know), and an operator's
// resume reaches the run before its result: the resume, the later word,
// stands. The result does not pause the key again; the next execution
// delivers.
func TestResumeDuringADeliveryThatReadThePause(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.firstAttemptVersion(workflows.OneMarkerVersion)
	h.sub.setRespond(func(id string, _, nth int) activities.PostResult {
		if nth == 0 {
			return fail(activities.CodeHandlerFailed, 500) // the retry is a regular execution
		}
		return activities.PostResult{Status: 200}
	})
	h.eventsAt(time.Second, 1)
	h.at(2*time.Second, func() { h.store.mu.Lock(); h.store.paused = true; h.store.mu.Unlock() })
	var mu sync.Mutex
	var resumed *workflows.OpResult
	sent := false
	h.store.onBatch = func(paused bool) {
		if !paused || sent {
			return
		}
		sent = true
		h.env.UpdateWorkflow(workflows.UpdateResume, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("the resume was rejected: %v", err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				mu.Lock()
				defer mu.Unlock()
				if r, ok := v.(workflows.OpResult); ok && err == nil {
					resumed = &r
				}
			},
		}, workflows.ControlSignal{Actor: "ann", Reason: "go"})
		time.Sleep(200 * time.Millisecond) // the run applies it before this result lands
	}
	mid := h.queryAt(5 * time.Minute)
	h.run()
	mu.Lock()
	defer mu.Unlock()
	if !sent || resumed == nil || !resumed.Changed {
		t.Fatalf("the resume: sent %v, answered %+v; want it changed", sent, resumed)
	}
	if mid.KeyPaused || mid.Status == workflows.StatusPaused {
		t.Errorf("5 minutes in: status %q, paused %v; want the resume to stand", mid.Status, mid.KeyPaused)
	}
	if got := h.sub.delivered(); !reflect.DeepEqual(got, ids(1)) {
		t.Errorf("delivered %v", got)
	}
	for _, c := range h.sub.all() {
		if c.OK && c.At > 4*time.Minute {
			t.Errorf("event 1 delivered %v after the first POST, want before 5 minutes", c.At)
		}
	}
}

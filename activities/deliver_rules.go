package activities

// The rules Deliver's steps apply: which events a key may deliver, what a
// failed attempt records and returns, and the app's unreachable mark.

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"herald/store"
)

// minLocalPost is the least time left before a local execution's deadline
// for it to start a POST.
const minLocalPost = 500 * time.Millisecond

// deliveredEarlier reports whether an event settled as delivered was
// delivered by an earlier attempt at this very execution, whose result the
// workflow never got: a retry of a regular activity (past the attempt that
// only waited for NotBefore, which POSTed nothing); a local execution run
// again because its workflow task failed (its worker died after the POST);
// or the regular activity after a local execution that ended without a
// result. The last two are told apart from a re-sent event delivered before
// (already counted) by the local execution recorded with the delivery.
func deliveredEarlier(info activity.Info, in DeliverInput, stored store.BatchEvent) bool {
	first := int32(1)
	if !in.NotBefore.IsZero() {
		first = 2 // the execution's first attempt only waited (begin)
	}
	switch {
	case info.Attempt > first:
		return true
	case stored.DeliveredBy == "":
		return false
	}
	head := in.LocalHead
	if in.Local {
		head = in.Events[0].ID
	}
	return head != "" && (stored.DeliveredBy == localExecution(info.WorkflowExecution.RunID, head) ||
		in.PrevRun != "" && stored.DeliveredBy == localExecution(in.PrevRun, head))
}

// localExecution names a local execution: the workflow run and its head (a
// run makes one local attempt per head; run again, it has the same name).
func localExecution(runID, headID string) string {
	return runID + "/" + headID
}

// limitWaitEnded logs a later event's wait for the app's limits that ended
// the execution for a reason other than its length.
func (a *Activities) limitWaitEnded(subscriptionID string, turn turnResult, err error) {
	if turn == turnFailed {
		a.warn("wait for the app's limits", subscriptionID, err)
	}
}

// workerStopping reports whether the worker is shutting down gracefully.
func workerStopping(ctx context.Context) bool {
	select {
	case <-activity.GetWorkerStopChannel(ctx):
		return true
	default:
		return false
	}
}

// reachability keeps the app's unreachable mark: set when nothing answered,
// cleared by a delivery that went through, which wakes the app's other keys
// waiting out an unreachable back-off.
func (a *Activities) reachability(ctx context.Context, b store.Batch, r DeliverResult) {
	app := b.Target.App
	switch {
	case ctx.Err() != nil:
		// Herald abandoned the attempt itself; the app said nothing.
	case r.Outcome == OutcomeUnreachable && !b.AppUnreachable:
		if err := a.Store.MarkUnreachable(ctx, app); err != nil {
			a.warn("mark app unreachable", b.Target.SubscriptionID, err)
		}
	case b.AppUnreachable && delivered(r.Done):
		won, err := a.Store.ClearUnreachable(ctx, app)
		if err != nil {
			a.warn("clear app unreachable", b.Target.SubscriptionID, err)
			return
		}
		if won && a.Waker != nil {
			a.Waker.WakeUnreachable(app)
		}
	}
}

func delivered(done []Settled) bool {
	for _, s := range done {
		if s.Result == ResultDelivered {
			return true
		}
	}
	return false
}

// check compares a queued event with the event log and returns it, or the
// reason it must not be delivered for this key.
func check(b store.Batch, in DeliverInput, ev Event, ownWorkflow bool) (store.BatchEvent, string) {
	stored, ok := b.Events[ev.ID]
	switch {
	case !ownWorkflow:
		return stored, "not_the_key_workflow"
	case !ok:
		return stored, "event_not_found"
	case stored.Type != b.Target.Type || stored.Version != b.Target.Version:
		return stored, "event_not_for_subscription"
	case stored.Subject != in.SubjectKey:
		return stored, "event_not_for_subject"
	case stored.Seq != ev.Seq:
		return stored, "seq_mismatch"
	case stored.Outcome == "":
		return stored, "not_dispatched_to_subscription"
	}
	return stored, ""
}

// failureUpdate is the outcome row of a failed attempt: still queued while
// attempts remain, failed when it was terminal or the last one.
func failureUpdate(in DeliverInput, ev Event, attempt int, r PostResult) OutcomeUpdate {
	u := OutcomeUpdate{EventID: ev.ID, Seq: ev.Seq, Status: store.EventQueued, Attempts: attempt,
		LastCode: r.Code, LastError: r.Message}
	switch {
	case IsTerminal(r.Code):
		u.Status, u.Code = store.EventFailed, r.Code
	case attempt >= in.maxAttempts():
		u.Status, u.Code = store.EventFailed, CodeAttemptsExhausted
	}
	return u
}

// headFailure turns a failed attempt of the first event into the error that
// drives Temporal's retry: terminal, exhausted, or retry after the schedule's
// delay (or the subscriber's Retry-After, if longer, capped at an hour).
func (a *Activities) headFailure(ctx context.Context, in DeliverInput, ev Event, attempt int, r PostResult) error {
	details := FailureDetails{EventID: ev.ID, Attempt: attempt, Code: r.Code, LastCode: r.Code, Error: r.Message}
	msg := fmt.Sprintf("attempt %d: %s: %s", attempt, r.Code, r.Message)
	if IsTerminal(r.Code) || attempt >= in.maxAttempts() {
		if !IsTerminal(r.Code) {
			details.Exhausted = true
			details.Code = CodeAttemptsExhausted
		}
		return temporal.NewApplicationErrorWithOptions(msg, details.Code,
			temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{details}})
	}
	delay := in.RetrySchedule[attempt-1]
	if r.RetryAfter > delay {
		delay = min(r.RetryAfter, time.Hour)
	}
	a.report(ctx, AttemptReport{EventID: ev.ID, Attempt: attempt, Code: r.Code, Error: r.Message,
		NextAttemptAt: a.now().Add(delay)})
	return temporal.NewApplicationErrorWithOptions(msg, r.Code,
		temporal.ApplicationErrorOptions{NextRetryDelay: delay, Details: []any{details}})
}

// report tells the workflow about a failed attempt; best effort, since the
// retry itself does not depend on it.
func (a *Activities) report(ctx context.Context, r AttemptReport) {
	if a.Signaler == nil {
		return
	}
	info := activity.GetInfo(ctx)
	if err := a.Signaler.SignalWorkflow(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID,
		SignalAttempt, r); err != nil && a.Logger != nil {
		a.Logger.Warn("report attempt to workflow", zap.String("workflow", info.WorkflowExecution.ID), zap.Error(err))
	}
}

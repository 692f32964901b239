package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/workflows/payload"
)

// ErrorPolicyChange is the workflow.GetVersion change id of the error
// policy (docs/design.md#error-policy). Version 1 (ErrorPolicyVersion):
//
//   - a run takes its subscription's onFailure and maxAttempts from
//     StartActivity's result (the subscription's row), and reads onFailure
//     again when a head fails for good: under skip the head is settled as
//     skipped_after_failure and the key moves on;
//   - a failed key whose automatic re-arms are used up shows StatusExhausted
//     rather than StatusFailed;
//   - a counted failed attempt ends the unreachable back-off, so the next
//     unreachable wait starts again at 30 s.
//
// Runs recorded without the marker keep their behaviour on replay. A run at
// OneMarkerVersion (FirstAttemptChange) is at ErrorPolicyVersion without it.
const ErrorPolicyChange = "error-policy"

// ErrorPolicyVersion is the ErrorPolicyChange version of this code.
const ErrorPolicyVersion = 1

// errorPolicyActivity is the registered name of
// (*activities.Activities).ErrorPolicy, run as a local activity.
const errorPolicyActivity = "ErrorPolicy"

// ErrorPolicy is a subscription's error policy as StartActivity reads it.
type ErrorPolicy = activities.ErrorPolicy

// AuditDeliverySkipped is the audit action of an event settled as
// skipped_after_failure; the same transaction writes a herald.key.skipped
// event.
const AuditDeliverySkipped = payload.AuditDeliverySkipped

// applyPolicy makes the run's settings follow the subscription's policy
// (withPolicy).
func (d *delivery) applyPolicy(p ErrorPolicy) {
	d.policy = p
	d.p = withPolicy(d.p, p)
}

// withPolicy is the settings p under the subscription's policy pol:
// maxAttempts replaces the schedule's count of attempts (a longer count
// repeats the schedule's last delay). The run's settings (applyPolicy) and
// the delivery its start's read makes for it (firstDelivery) both go
// through it.
func withPolicy(p Params, pol ErrorPolicy) Params {
	n := pol.MaxAttempts
	p.Attempts = max(n, 0) // the row's, whatever the settings held
	if s := p.RetrySchedule; n > len(s)+1 && len(s) > 0 {
		longer := append([]time.Duration(nil), s...)
		for len(longer) < n-1 {
			longer = append(longer, s[len(s)-1])
		}
		p.RetrySchedule = longer
	}
	return p
}

// skips reports whether the head that just failed for good is to be
// skipped: the subscription's row says so now. When the row cannot be read,
// the policy this run started with decides.
func (d *delivery) skips(ctx workflow.Context) bool {
	var p ErrorPolicy
	if err := workflow.ExecuteLocalActivity(queueReadOptions(ctx), errorPolicyActivity, d.p.SubscriptionID).Get(ctx, &p); err != nil {
		d.logger.Warn("read the subscription's error policy; using the one the run started with", "error", err)
		return d.policy.OnFailure == activities.OnFailureSkip
	}
	d.policy.OnFailure = p.OnFailure
	return p.OnFailure == activities.OnFailureSkip
}

// skip settles the head that failed for good as skipped_after_failure
// (outcome cancelled, so redeliver takes it again), audited with the
// failure, and moves on to the next event.
func (d *delivery) skip(ctx workflow.Context, head *QueueItem) {
	it := *head
	d.noteFailedAttempts(it.Attempts) // the relay may have stopped signalling behind it
	d.Queue = d.Queue[1:]
	d.expiryKnown = false
	d.WaitUntil, d.WaitStatus, d.Unreachable, d.Rearms = time.Time{}, "", 0, 0
	d.Counters.Skipped++
	d.outcome(ctx, it, "skipped", activities.CodeSkippedAfterFailure)
	d.logger.Warn("an event failed for good and was skipped (onFailure skip)", "eventId", it.Event.ID,
		"seq", it.Event.Seq, "code", it.Code, "lastCode", it.LastCode, "attempts", it.Attempts)
	d.record(ctx, []activities.OutcomeUpdate{{
		EventID: it.Event.ID, Seq: it.Event.Seq, Status: activities.RowCancelled, Attempts: it.Attempts,
		Code: activities.CodeSkippedAfterFailure, LastCode: it.LastCode, LastError: it.LastError,
	}}, d.auditEntry(ctx, AuditDeliverySkipped, "", "failed", activities.CodeSkippedAfterFailure, it.Event.ID, map[string]any{
		payload.MetaSeq: it.Event.Seq, payload.MetaAttempts: it.Attempts, payload.MetaFailedCode: it.Code, payload.MetaLastCode: it.LastCode, payload.MetaError: it.LastError,
	}))
}

// countedFailure reports whether a Deliver execution that began with
// `before` attempts spent on its head spent a counted attempt that failed:
// the subscriber answered, so an unreachable back-off starts over.
func countedFailure(before int, res activities.DeliverResult, err error) bool {
	if err != nil {
		if temporal.IsCanceledError(err) {
			return false
		}
		details, ok := failureDetails(err)
		return ok && details.Attempt > before
	}
	switch res.Outcome {
	case activities.OutcomePartial:
		return true
	case activities.OutcomeUnreachable:
		return res.Attempt-1 > before
	}
	return false
}

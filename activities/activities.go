package activities

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"herald/reason"
	"herald/store"
)

// ErrTypeNotFound is the error type of a look-up that found nothing; it is
// not retried.
const ErrTypeNotFound = "not_found"

// Store is what the activities need from the database; *store.Store is one.
type Store interface {
	// DeliveryBatch reads a subscription's target and the events with the
	// given ids with their outcome for it, in one query.
	DeliveryBatch(ctx context.Context, subscriptionID string, ids []string) (store.Batch, error)
	// RecordOutcomes writes the outcome rows of one key in one statement.
	RecordOutcomes(ctx context.Context, subscriptionID, subject string, us []store.OutcomeUpdate) error
	// RecordWithAudit writes outcome rows and audit rows in one transaction.
	RecordWithAudit(ctx context.Context, subscriptionID, subject string, us []store.OutcomeUpdate, audit []store.AuditEntry) error
	// Requeue checks events against a key and sets their outcome back to queued.
	Requeue(ctx context.Context, subscriptionID, subject string, ids []string) ([]store.RequeuedEvent, map[string]string, error)
	// Audit appends one audit row.
	Audit(ctx context.Context, e store.AuditEntry) error
	// PurgeEvents deletes up to limit events and limit outcome rows past
	// retention.
	PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (store.PurgeCounts, error)
	// AuditByOnceKey reads the audit row written under a once key
	// (store.ErrNotFound when there is none).
	AuditByOnceKey(ctx context.Context, key string) (store.AuditRow, error)
	// MarkUnreachable and ClearUnreachable keep the mark of an app that a
	// delivery found unreachable.
	MarkUnreachable(ctx context.Context, app string) error
	ClearUnreachable(ctx context.Context, app string) (bool, error)
	// AcquireDelivery and ReleaseDelivery keep a subscriber app's limits
	// across every worker process: a token of its rate and an in-flight lease.
	AcquireDelivery(ctx context.Context, app string, ttl, maxWait time.Duration) (store.Grant, error)
	ReleaseDelivery(ctx context.Context, app, lease string) error
	// QueuedAfter and CancelQueuedAfter read and drop a key's backlog: the
	// queued events its workflow does not hold in memory.
	QueuedAfter(ctx context.Context, subscriptionID, subject string, after int64, limit int) ([]store.QueuedEvent, error)
	// KeyQueue reads what a key owes (its held rows above after) and checks
	// claimed events against its outcome rows.
	KeyQueue(ctx context.Context, subscriptionID, subject string, after int64, limit int, claims []store.ClaimedEvent) (store.KeyQueue, error)
	// TakeKeyLease and ReleaseKeyLease keep which run may deliver a key's
	// events now.
	TakeKeyLease(ctx context.Context, subscriptionID, subject, holder string, ttl time.Duration) (bool, time.Time, error)
	ReleaseKeyLease(ctx context.Context, subscriptionID, subject, holder string) error
	CancelQueuedAfter(ctx context.Context, subscriptionID, subject string, after int64, status, code string) (int, error)
	// SubscriptionPolicy reads a subscription's error policy.
	SubscriptionPolicy(ctx context.Context, subscriptionID string) (store.Policy, error)
}

// Waker wakes the keys of an app that wait because it was unreachable; the
// worker's is bounded (see service). It must not block.
type Waker interface {
	WakeUnreachable(app string)
}

// Signaler sends a signal to a workflow; a Temporal client is one.
type Signaler interface {
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// Observer is told of every delivery attempt and of the events settled
// here (metrics). app is the subscriber app.
type Observer interface {
	Attempted(subscriptionID, app string, envelope []byte, attempt int, r PostResult)
	// Settled counts n events of the subscription settled with outcome
	// (delivered, failed, cancelled, expired, skipped).
	Settled(subscriptionID, outcome string, n int)
}

// Sender makes one delivery attempt; *Poster is the real one.
type Sender interface {
	Post(ctx context.Context, r PostRequest) PostResult
}

// Activities holds the dependencies of Herald's activities. Workflows call its
// methods through a nil *Activities.
type Activities struct {
	Poster   Sender
	Store    Store
	Signaler Signaler
	Observer Observer
	Waker    Waker
	Logger   *zap.Logger
	// HeadWait bounds how long one execution waits for its first event's
	// turn under the app's limits; LimitHeadWait when zero (tests shorten it).
	HeadWait time.Duration
	// Retention is the worker's HERALD_RETENTION: PurgeEvents never deletes
	// anything newer, whatever its input says; DefaultRetention when zero.
	Retention time.Duration
}

// Deliver POSTs the events in order, each its own request, stopping at the
// first that does not succeed. Temporal carries only ids: the bodies, the
// endpoint and the audience come from the event log and the subscription, in
// one query, and an event that is not an accepted event of this subscription
// and subject key (or whose sequence number disagrees) is rejected unsent. An
// event whose outcome is already settled is skipped unless redelivered.
//
// The first event's failures are returned as errors so that Temporal retries
// the execution on the schedule (NextRetryDelay); a later event's failure
// ends the execution with a partial result, so order and attempt accounting
// stay exact. A Local execution has no retries behind it: it returns the
// head's failure as a partial result too. The outcome rows are written in
// one statement per execution.
func (a *Activities) Deliver(ctx context.Context, in DeliverInput) (DeliverResult, error) {
	info := activity.GetInfo(ctx)
	// A local execution ends by its deadline (see DeliverInput.Local).
	left := func() time.Duration {
		if !in.Local || in.Deadline.IsZero() {
			return math.MaxInt64
		}
		return time.Until(in.Deadline)
	}
	if left() < minLocalPost {
		return DeliverResult{Outcome: OutcomeHandOver}, nil
	}
	base := in.PriorAttempts
	if !in.NotBefore.IsZero() {
		if info.Attempt == 1 {
			wait := max(time.Until(in.NotBefore), time.Millisecond)
			return DeliverResult{}, temporal.NewApplicationErrorWithOptions(
				"waiting for the retry delay", CodeNotBefore,
				temporal.ApplicationErrorOptions{NextRetryDelay: wait})
		}
		base-- // the execution's first attempt only waited
	}
	batch, err := a.Store.DeliveryBatch(ctx, in.SubscriptionID, uuids(in.Events))
	switch {
	case errors.Is(err, store.ErrNotFound):
		// A subscription that no longer exists receives nothing more.
		return DeliverResult{Outcome: OutcomeInactive, SubscriptionState: store.StateCancelled,
			SubscriptionReason: "subscription_not_found"}, nil
	case err != nil:
		// A database outage must not burn delivery attempts: re-check later.
		return DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
			SubscriptionReason: truncate(err.Error(), maxErrorText)}, nil
	case batch.Target.State != store.StateActive:
		return DeliverResult{Outcome: OutcomeInactive, SubscriptionState: batch.Target.State,
			SubscriptionReason: batch.Target.Reason}, nil
	case in.Local && !batch.Limits.IsZero():
		// A wait for the app's limits would hold the workflow task (a local
		// activity cannot heartbeat): a regular activity waits instead.
		return DeliverResult{Outcome: OutcomeLimited, Attempt: base + int(info.Attempt)}, nil
	}
	own := ownKey(ctx, in.SubscriptionID, in.SubjectKey)
	postTimeout := in.Timeout
	if postTimeout <= 0 {
		postTimeout = DefaultPostTimeout
	}
	// The key's lease for this run: no other run's execution posts its
	// events meanwhile (one left behind by a terminate or a reset).
	var keyL *keyLease
	if own {
		var res DeliverResult
		if keyL, res = a.takeKeyLease(ctx, in, postTimeout, base+int(info.Attempt)); keyL == nil {
			if ctx.Err() != nil {
				return DeliverResult{}, ctx.Err()
			}
			return res, nil
		}
		defer keyL.release()
	}
	var res DeliverResult
	// Each outcome is written as soon as it is known, beside the next POST,
	// so that a retried execution (a worker killed mid-batch) skips what was
	// already delivered.
	w := a.startOutcomeWriter(ctx, in.SubscriptionID, in.SubjectKey)
	finish := func(r DeliverResult) DeliverResult {
		r.Done = res.Done
		a.reachability(ctx, batch, r)
		if unrecorded, err := w.close(); err != nil {
			a.warn("record outcomes", in.SubscriptionID, err)
			r.Unrecorded = unrecorded
		}
		return r
	}
	started := time.Now()
	batchTime := in.BatchTime
	if batchTime <= 0 {
		batchTime = DefaultBatchTime
	}
	batchTime = min(batchTime, left()/2)
	for i, ev := range in.Events {
		if ctx.Err() != nil {
			// The workflow interrupted this execution (an operator's action):
			// report what went through rather than POST into a cancelled context.
			if len(res.Done) > 0 {
				break
			}
			_, _ = w.close()
			return DeliverResult{}, ctx.Err()
		}
		stored, reason := check(batch, in, ev, own)
		switch {
		case reason != "":
			res.Done = append(res.Done, Settled{ID: ev.ID, Seq: ev.Seq, Result: ResultRejected, Reason: reason})
			continue
		case store.Settled(stored.Outcome):
			// Already settled (an operator's redelivery set the row back to
			// queued, so it is not): a re-sent event, or, on a retry of this
			// execution, one that an earlier attempt delivered before dying.
			why := stored.Outcome
			if why == store.EventDelivered && deliveredEarlier(info, in, stored) {
				why = SkippedDeliveredEarlier
			}
			res.Done = append(res.Done, Settled{ID: ev.ID, Seq: ev.Seq, Result: ResultSkipped, Reason: why})
			continue
		}
		if i > 0 && len(res.Done) > 0 && (time.Since(started) > batchTime || workerStopping(ctx)) {
			// The rest goes in the next execution: after any operator action,
			// or on another worker when this one is stopping.
			break
		}
		var lease string
		if !batch.Limits.IsZero() {
			// The app's limits: wait for this POST's turn. A wait is no
			// attempt; the key keeps its order.
			budget := LimitHeadWait
			if a.HeadWait > 0 {
				budget = a.HeadWait
			}
			if i > 0 {
				budget = min(batchTime, maxLimitBatchWait) - time.Since(started)
			}
			var turn turnResult
			lease, turn, err = a.waitTurn(ctx, batch.Target.App, in.Timeout, budget, i)
			switch {
			case turn == turnGranted:
			case i > 0:
				// Later events go in the next execution.
				a.limitWaitEnded(in.SubscriptionID, turn, err)
				return finish(DeliverResult{Outcome: OutcomeDelivered}), nil
			case turn == turnCancelled:
				_, _ = w.close()
				return DeliverResult{}, ctx.Err()
			case turn == turnFailed:
				// As when the batch cannot be read: re-check soon, no attempt spent.
				return finish(DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
					SubscriptionReason: truncate(err.Error(), maxErrorText)}), nil
			default:
				// The head's turn is further off: the workflow starts the next
				// execution at once, with no attempt spent. Attempt is the one
				// the head would have made (earlier ones of this execution
				// failed), as for an unreachable subscriber.
				return finish(DeliverResult{Outcome: OutcomeLimited, Attempt: base + int(info.Attempt)}), nil
			}
		}
		timeout, capped := postTimeout, false
		if l := left(); l < timeout {
			if l < minLocalPost {
				a.release(ctx, batch.Target.App, lease)
				return finish(DeliverResult{Outcome: OutcomeHandOver}), nil
			}
			timeout, capped = l, true
		}
		if keyL != nil && !keyL.renew(ctx, timeout) {
			// The key's lease ran out and another run took it: not a POST more.
			a.release(ctx, batch.Target.App, lease)
			return finish(DeliverResult{Outcome: OutcomeLimited, Attempt: base + int(info.Attempt)}), nil
		}
		attempt := 1
		if i == 0 {
			attempt = base + int(info.Attempt)
		} else if time.Since(started) > 2*time.Second {
			// Only slow batches heartbeat: a quick one costs no extra round trip.
			activity.RecordHeartbeat(ctx, i)
		}
		postStart := time.Now()
		r := a.Poster.Post(ctx, PostRequest{
			URL: batch.Target.URL(), Body: stored.Envelope, SubscriptionID: in.SubscriptionID,
			SubscriberApp: batch.Target.App, SourceApp: stored.SourceApp, EventID: ev.ID, Attempt: attempt, Timeout: timeout,
			TraceContext: stored.TraceContext,
		})
		a.release(ctx, batch.Target.App, lease)
		if a.Observer != nil {
			a.Observer.Attempted(in.SubscriptionID, batch.Target.App, stored.Envelope, attempt, r)
		}
		if r.Delivered() {
			a.settled(in.SubscriptionID, store.EventDelivered, 1)
			res.Done = append(res.Done, Settled{ID: ev.ID, Seq: ev.Seq, Result: ResultDelivered, Attempts: attempt})
			u := OutcomeUpdate{EventID: ev.ID, Seq: ev.Seq, Status: store.EventDelivered, Attempts: attempt}
			if in.Local {
				u.DeliveredBy = localExecution(info.WorkflowExecution.RunID, in.Events[0].ID)
			}
			w.add(u)
			continue
		}
		if capped && (r.Code == CodeHandlerTimeout || r.Code == CodeSubscriberUnreachable && left() <= 0) {
			// Cut short by the local deadline (while waiting for the answer,
			// or still connecting), not by the subscriber's timeout: not
			// counted; a regular activity sends it again, no sooner than
			// this POST would have timed out (FailedAt is its start).
			return finish(DeliverResult{Outcome: OutcomeHandOver, Code: CodeHandlerTimeout, Error: r.Message,
				FailedAt: postStart}), nil
		}
		if r.Code == CodeSubscriberUnreachable {
			return finish(DeliverResult{Outcome: OutcomeUnreachable, Attempt: attempt,
				Code: r.Code, Error: r.Message}), nil
		}
		fu := failureUpdate(in, ev, attempt, r)
		if fu.Status == store.EventFailed {
			a.settled(in.SubscriptionID, store.EventFailed, 1)
		}
		w.add(fu)
		if len(res.Done) > 0 || in.Local {
			// A later event's failure, or the head's in a local activity,
			// which has no Temporal retry behind it: the workflow schedules
			// the retry from this result.
			return finish(DeliverResult{Outcome: OutcomePartial, Attempt: attempt,
				Code: r.Code, Error: r.Message, RetryAfter: r.RetryAfter, FailedAt: time.Now()}), nil
		}
		// The head's own failure drives Temporal's retry: its outcome row is
		// written best effort, since the workflow keeps the count too.
		if _, err := w.close(); err != nil {
			a.warn("record outcome", in.SubscriptionID, err)
		}
		return DeliverResult{}, a.headFailure(ctx, in, ev, attempt, r)
	}
	return finish(DeliverResult{Outcome: OutcomeDelivered}), nil
}

// minLocalPost is the least time left before a local execution's deadline
// for it to start a POST.
const minLocalPost = 500 * time.Millisecond

// deliveredEarlier reports whether an event settled as delivered was
// delivered by an earlier attempt at this very execution, whose result the
// workflow never got: a retry of a regular activity; a local execution run
// again because its workflow task failed (its worker died after the POST);
// or the regular activity after a local execution that ended without a
// result. The last two are told apart from a re-sent event delivered before
// (already counted) by the local execution recorded with the delivery.
func deliveredEarlier(info activity.Info, in DeliverInput, stored store.BatchEvent) bool {
	switch {
	case info.Attempt > 1:
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

// outcomeWriter writes a Deliver execution's outcome rows in the
// background, in order: each write takes every update that arrived since
// the last, in one statement, so quick POSTs share statements and slow ones
// are recorded one by one as they happen.
type outcomeWriter struct {
	in   chan OutcomeUpdate
	done chan struct{}
	// Set by the writer goroutine, read after done is closed.
	unrecorded []OutcomeUpdate
	err        error
}

// outcomeWriteTimeout bounds one write; a cancelled activity still records
// what it delivered.
const outcomeWriteTimeout = 10 * time.Second

func (a *Activities) startOutcomeWriter(ctx context.Context, subscriptionID, subject string) *outcomeWriter {
	w := &outcomeWriter{in: make(chan OutcomeUpdate, 64), done: make(chan struct{})}
	base := context.WithoutCancel(ctx)
	go func() {
		defer close(w.done)
		for u := range w.in {
			batch := []OutcomeUpdate{u}
		more:
			for {
				select {
				case u, ok := <-w.in:
					if !ok {
						break more
					}
					batch = append(batch, u)
				default:
					break more
				}
			}
			wctx, cancel := context.WithTimeout(base, outcomeWriteTimeout)
			if err := a.Store.RecordOutcomes(wctx, subscriptionID, subject, storeOutcomes(batch)); err != nil {
				w.unrecorded = append(w.unrecorded, batch...)
				w.err = err
			}
			cancel()
		}
	}()
	return w
}

func (w *outcomeWriter) add(u OutcomeUpdate) { w.in <- u }

// close waits for every update to be written and returns those that could
// not be, with the last error.
func (w *outcomeWriter) close() ([]OutcomeUpdate, error) {
	close(w.in)
	<-w.done
	return w.unrecorded, w.err
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

// ownKey reports whether the calling workflow is the delivery workflow of
// this subscription and subject key. A workflow started under another id
// (anyone who can reach Temporal can start one) may not act for the key.
func ownKey(ctx context.Context, subscriptionID, subjectKey string) bool {
	return activity.GetInfo(ctx).WorkflowExecution.ID == DeliveryWorkflowID(subscriptionID, subjectKey)
}

// errNotTheKey refuses, without retries, a write for a key by a workflow
// that is not that key's.
func errNotTheKey(subscriptionID, subjectKey string) error {
	return temporal.NewApplicationErrorWithOptions(
		fmt.Sprintf("only workflow %s acts for this key", DeliveryWorkflowID(subscriptionID, subjectKey)),
		CodeSignalRejected, temporal.ApplicationErrorOptions{NonRetryable: true})
}

// uuids returns the ids of evs that are UUIDs in canonical form; a forged
// signal may carry anything, and the query takes only UUIDs.
func uuids(evs []Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		if store.IsUUID(ev.ID) {
			out = append(out, ev.ID)
		}
	}
	return out
}

func (a *Activities) warn(what, subscriptionID string, err error) {
	if a.Logger != nil {
		a.Logger.Warn(what, zap.String("subscription", subscriptionID), zap.Error(err))
	}
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
		NextAttemptAt: time.Now().Add(delay)})
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

// Requeue puts events back in a key's queue for an operator's redelivery:
// it checks each against the event log and the key, and sets its outcome
// back to queued.
func (a *Activities) Requeue(ctx context.Context, in RequeueInput) (RequeueResult, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return RequeueResult{}, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	evs, refused, err := a.Store.Requeue(ctx, in.SubscriptionID, in.SubjectKey, in.EventIDs)
	if err != nil {
		return RequeueResult{}, err
	}
	res := RequeueResult{}
	if len(refused) > 0 {
		res.Refused = make(map[string]reason.Code, len(refused))
		for id, why := range refused {
			res.Refused[id] = reason.Code(why)
		}
	}
	for _, ev := range evs {
		res.Events = append(res.Events, Event{ID: ev.ID, Seq: ev.Seq, Again: true})
	}
	return res, nil
}

// BacklogInput names a key's backlog: its queued events above After.
type BacklogInput struct {
	SubscriptionID string `json:"subscriptionId"`
	SubjectKey     string `json:"subjectKey"`
	After          int64  `json:"after"`
	Limit          int    `json:"limit,omitempty"`
	// For DropBacklog: the status (cancelled, expired) and code to settle with.
	Status string `json:"status,omitempty"`
	Code   string `json:"code,omitempty"`
}

// BacklogEvent is one event of a key's backlog.
type BacklogEvent struct {
	Event    Event     `json:"event"`
	QueuedAt time.Time `json:"queuedAt"`
}

// Backlog reads the next part of a key's queue that its workflow does not
// hold in memory, in sequence order.
func (a *Activities) Backlog(ctx context.Context, in BacklogInput) ([]BacklogEvent, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return nil, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	evs, err := a.Store.QueuedAfter(ctx, in.SubscriptionID, in.SubjectKey, in.After, in.Limit)
	if err != nil {
		return nil, err
	}
	out := make([]BacklogEvent, len(evs))
	for i, e := range evs {
		out[i] = BacklogEvent{Event: Event{ID: e.ID, Seq: e.Seq}, QueuedAt: e.QueuedAt}
	}
	return out, nil
}

// DropBacklog settles a key's whole backlog (cancel --all, removal) and
// returns how many events it held.
func (a *Activities) DropBacklog(ctx context.Context, in BacklogInput) (int, error) {
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		return 0, errNotTheKey(in.SubscriptionID, in.SubjectKey)
	}
	n, err := a.Store.CancelQueuedAfter(ctx, in.SubscriptionID, in.SubjectKey, in.After, in.Status, in.Code)
	if err == nil {
		a.settled(in.SubscriptionID, in.Status, n)
	}
	return n, err
}

// settled tells the Observer of n events settled with outcome.
func (a *Activities) settled(subscriptionID, outcome string, n int) {
	if a.Observer != nil && n > 0 {
		a.Observer.Settled(subscriptionID, outcome, n)
	}
}

// Record writes outcome rows of one key, then its audit rows. Outcomes are
// written only for the key's own workflow; audit rows name the workflow
// that asked, whichever it is.
func (a *Activities) Record(ctx context.Context, in RecordInput) error {
	outcomes := in.Outcomes
	if !ownKey(ctx, in.SubscriptionID, in.SubjectKey) {
		outcomes = nil
	}
	// Each row is keyed by the scheduled activity (its run and activity id,
	// which its retries share) and its position: a retry after a commit
	// whose answer was lost writes neither the row nor its key event again.
	info := activity.GetInfo(ctx)
	audit := make([]store.AuditEntry, len(in.Audit))
	for i, e := range in.Audit {
		audit[i] = storeAudit(e)
		audit[i].OnceKey = fmt.Sprintf("record:%s/%s/%d", info.WorkflowExecution.RunID, info.ActivityID, i)
	}
	if err := a.Store.RecordWithAudit(ctx, in.SubscriptionID, in.SubjectKey, storeOutcomes(outcomes), audit); err != nil {
		return err
	}
	// The workflow decides cancellations and expiries and records them
	// here; failures and deliveries were counted by Deliver.
	for _, u := range outcomes {
		switch {
		case u.Status == store.EventCancelled && u.Code == CodeSkippedAfterFailure:
			a.settled(in.SubscriptionID, SettledSkipped, 1)
		case u.Status == store.EventCancelled || u.Status == store.EventExpired:
			a.settled(in.SubscriptionID, u.Status, 1)
		}
	}
	return nil
}

func storeAudit(e AuditEntry) store.AuditEntry {
	return store.AuditEntry{
		Action: e.Action, Outcome: e.Outcome, Actor: e.Actor, TargetType: e.TargetType,
		TargetID: e.TargetID, ErrorCode: e.ErrorCode, Metadata: e.Metadata,
	}
}

// SubscriptionState reads a subscription's state ("cancelled" when it no
// longer exists), so a key can check what a signal told it.
func (a *Activities) SubscriptionState(ctx context.Context, subscriptionID string) (string, error) {
	b, err := a.Store.DeliveryBatch(ctx, subscriptionID, nil)
	if errors.Is(err, store.ErrNotFound) {
		return store.StateCancelled, nil
	}
	return b.Target.State, err
}

// Audit appends one audit row.
func (a *Activities) Audit(ctx context.Context, e AuditEntry) error {
	return a.Store.Audit(ctx, storeAudit(e))
}

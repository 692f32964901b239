package activities

import (
	"context"
	"errors"
	"math"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"herald/store"
)

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
// head's failure as a partial result too. The outcome rows are written as
// each outcome is known, in the background.
//
// An execution runs these steps, in this order, and any of them may end it:
//
//  1. begin: a local execution with too little time before its deadline
//     hands over before anything else, and the first attempt of an
//     execution with NotBefore only waits out the retry delay. Both come
//     first because they cost no query and spend no attempt.
//  2. load: the subscription's target, the key's pause and the events'
//     stored rows, in one query. A subscription that is gone, not active or
//     unreadable ends the execution before any lease is taken, and so do a
//     key an operator paused (paused_keys) and a local execution whose app
//     has limits (a wait would hold the workflow task).
//  3. lease the key: no other run of the key may POST meanwhile (one left
//     behind by a terminate or a reset). Taken after load, so an inactive
//     subscription takes no lease, and only by the key's own workflow; a
//     lease waited for loads the batch again, which that run may have
//     settled meanwhile.
//  4. for each event (deliverOne), in order:
//     a. stop if the workflow cancelled the execution (an operator's action);
//     b. admit: reject what the key must not deliver, skip what is settled
//     (both settle at once, even past the batch's time);
//     c. pace: after the batch time, or when the worker stops, leave the rest
//     to the next execution (never before one event is settled);
//     d. wait for the app's limits (a wait is no attempt);
//     e. bound the POST by the local deadline and renew the key's lease for
//     it: a POST is never made without both;
//     f. POST, then give back the app's in-flight lease;
//     g. classify the answer and record it: delivered goes on to the next
//     event; a POST cut short by the local deadline hands over uncounted;
//     nothing answering ends as unreachable; any other failure ends the
//     execution, as an error for the head of a regular execution (Temporal
//     retries it on the schedule), as a partial result otherwise.
//  5. finish: keep the app's unreachable mark and wait for the outcome rows
//     to be written, so the result carries those that could not be; then,
//     for a local execution asked to (ThenRead) that delivered its whole
//     batch with every row written, read what the key owes after it, for a
//     run that ends quiet. The key's lease is given back last; when that
//     fails the result says so (LeaseKept).
func (a *Activities) Deliver(ctx context.Context, in DeliverInput) (DeliverResult, error) {
	d := &delivery{a: a, ctx: ctx, in: in, info: activity.GetInfo(ctx)}
	if e := d.begin(); e != nil {
		return e.result()
	}
	if e := d.load(); e != nil {
		return e.result()
	}
	if e := d.leaseKey(); e != nil {
		return e.result()
	}
	defer func() {
		if d.keyL != nil { // an ending before finish
			_ = d.keyL.release()
		}
	}()
	d.w = a.startOutcomeWriter(ctx, in.SubscriptionID, in.SubjectKey)
	d.started = time.Now()
	d.batchTime = min(orDefault(in.BatchTime, DefaultBatchTime), d.left()/2)
	for i, ev := range in.Events {
		if e := d.deliverOne(i, ev); e != nil {
			return e.result()
		}
	}
	return d.finish(DeliverResult{Outcome: OutcomeDelivered}).result()
}

// delivery is the state of one Deliver execution, shared by its steps.
type delivery struct {
	a    *Activities
	ctx  context.Context
	in   DeliverInput
	info activity.Info

	// base is the attempts spent on the head before this execution's first.
	base  int
	batch store.Batch
	// own: the calling workflow is the key's (ownKey); only then is
	// anything delivered.
	own         bool
	postTimeout time.Duration
	keyL        *keyLease
	w           *outcomeWriter
	started     time.Time
	batchTime   time.Duration
	// done holds the events settled so far, in order.
	done []Settled
}

// ending is how a step ends the execution: with a result or an error.
type ending struct {
	res DeliverResult
	err error
}

func (e *ending) result() (DeliverResult, error) { return e.res, e.err }

func endWith(r DeliverResult) *ending { return &ending{res: r} }

// orDefault returns v, or def when v is not positive.
func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// left is the time before a local execution's deadline (see
// DeliverInput.Local); unbounded for a regular one.
func (d *delivery) left() time.Duration {
	if !d.in.Local || d.in.Deadline.IsZero() {
		return math.MaxInt64
	}
	return d.in.Deadline.Sub(d.a.now())
}

// headAttempt is the attempt the head makes (or would make) in this
// execution.
func (d *delivery) headAttempt() int { return d.base + int(d.info.Attempt) }

// begin is step 1: the local deadline and the retry delay.
func (d *delivery) begin() *ending {
	if d.left() < minLocalPost {
		return endWith(DeliverResult{Outcome: OutcomeHandOver})
	}
	d.base = d.in.PriorAttempts
	if !d.in.NotBefore.IsZero() {
		if d.info.Attempt == 1 {
			wait := max(d.in.NotBefore.Sub(d.a.now()), time.Millisecond)
			return &ending{err: temporal.NewApplicationErrorWithOptions(
				"waiting for the retry delay", CodeNotBefore,
				temporal.ApplicationErrorOptions{NextRetryDelay: wait})}
		}
		d.base-- // the execution's first attempt only waited
	}
	return nil
}

// load is step 2: the batch, and whether the subscription takes deliveries.
func (d *delivery) load() *ending {
	batch, err := d.a.Store.DeliveryBatch(d.ctx, d.in.SubscriptionID, d.in.SubjectKey, uuids(d.in.Events))
	switch {
	case errors.Is(err, store.ErrNotFound):
		// A subscription that no longer exists receives nothing more.
		return endWith(DeliverResult{Outcome: OutcomeInactive, SubscriptionState: store.StateCancelled,
			SubscriptionReason: "subscription_not_found"})
	case err != nil:
		// A database outage must not burn delivery attempts: re-check later.
		return endWith(DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
			SubscriptionReason: truncate(err.Error(), maxErrorText)})
	case batch.Target.State != store.StateActive:
		return endWith(DeliverResult{Outcome: OutcomeInactive, SubscriptionState: batch.Target.State,
			SubscriptionReason: batch.Target.Reason})
	case batch.KeyPaused:
		// The rows say an operator paused the key, whatever the run
		// remembers (a reset to before the pause, a hand-started run): the
		// run holds the key paused until a resume. A run whose code does not
		// know KeyPaused reads it as a database that did not answer, and
		// looks again soon; neither POSTs.
		return endWith(DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
			SubscriptionReason: ReasonKeyPaused, KeyPaused: true})
	case d.in.Local && !batch.Limits.IsZero():
		// A wait for the app's limits would hold the workflow task (a local
		// activity cannot heartbeat): a regular activity waits instead.
		return endWith(DeliverResult{Outcome: OutcomeLimited, Attempt: d.headAttempt()})
	}
	d.batch = batch
	d.own = ownKey(d.ctx, d.in.SubscriptionID, d.in.SubjectKey)
	d.postTimeout = orDefault(d.in.Timeout, DefaultPostTimeout)
	return nil
}

// leaseKey is step 3: the key's lease for this run, taken only by the key's
// own workflow (another delivers nothing: admit rejects every event).
func (d *delivery) leaseKey() *ending {
	if !d.own {
		return nil
	}
	keyL, res := d.a.takeKeyLease(d.ctx, d.in, d.postTimeout, d.headAttempt())
	if keyL == nil {
		if d.ctx.Err() != nil {
			return &ending{err: d.ctx.Err()}
		}
		return endWith(res)
	}
	if keyL.waited {
		// Another run of the key (one a terminate or a reset left posting)
		// held the lease while this one waited: what it settled meanwhile
		// is in the rows, not in the batch read before. Read it again, so
		// that an event it delivered is skipped, not POSTed twice.
		if e := d.load(); e != nil {
			e.res.LeaseKept = keyL.release() != nil // as finish reports it
			return e
		}
	}
	d.keyL = keyL
	return nil
}

// deliverOne is step 4 for the event at position i; nil goes on to the next.
func (d *delivery) deliverOne(i int, ev Event) *ending {
	if d.ctx.Err() != nil {
		// The workflow interrupted this execution (an operator's action):
		// report what went through rather than POST into a cancelled context.
		if len(d.done) > 0 {
			return d.finish(DeliverResult{Outcome: OutcomeDelivered})
		}
		return d.abandon()
	}
	stored, ok := d.admit(ev)
	if !ok {
		return nil
	}
	if d.paced(i) {
		// The rest goes in the next execution: after any operator action,
		// or on another worker when this one is stopping.
		return d.finish(DeliverResult{Outcome: OutcomeDelivered})
	}
	lease, e := d.waitTurn(i)
	if e != nil {
		return e
	}
	timeout, capped, e := d.boundPost(lease)
	if e != nil {
		return e
	}
	if e := d.takeSlowSlot(i, lease); e != nil {
		return e
	}
	attempt := d.attempt(i)
	postStart := d.a.now() // a cut-short POST's FailedAt
	r := d.post(ev, stored, attempt, timeout, capped, lease)
	return d.classify(ev, attempt, r, capped, postStart)
}

// takeSlowSlot is step 4e': the count of this worker's POSTs in flight to
// the app, which holds back an app whose POSTs time out (SlowAppPosts).
// Held back, the head's execution ends limited with SlowAppRetry for the
// workflow to wait out in a timer, holding no activity slot; a later event
// goes in the next execution. Ending here gives the in-flight lease back.
func (d *delivery) takeSlowSlot(i int, lease string) *ending {
	limit := math.MaxInt // a workflow that cannot wait is never held back
	if d.in.WaitsOutLimits {
		limit = orDefault(d.a.SlowPosts, SlowAppPosts)
	}
	if d.a.slow.take(d.batch.Target.App, limit, time.Now()) {
		return nil
	}
	d.a.release(d.ctx, d.batch.Target.App, lease)
	if i > 0 {
		return d.finish(DeliverResult{Outcome: OutcomeDelivered})
	}
	return d.finish(DeliverResult{Outcome: OutcomeLimited, Attempt: d.headAttempt(), RetryAfter: SlowAppRetry})
}

// timedOut reports whether a POST failed for want of an answer within its
// timeout: no response, or no connection, after at least half of it.
func timedOut(r PostResult, took, timeout time.Duration) bool {
	return r.Code == CodeHandlerTimeout || (r.Code == CodeSubscriberUnreachable && took >= timeout/2)
}

// admit is step 4b: it settles an event that must not be POSTed (rejected,
// or already settled) and reports whether the event is to be POSTed.
func (d *delivery) admit(ev Event) (store.BatchEvent, bool) {
	stored, reason := check(d.batch, d.in, ev, d.own)
	switch {
	case reason != "":
		d.done = append(d.done, Settled{ID: ev.ID, Seq: ev.Seq, Result: ResultRejected, Reason: reason})
		return stored, false
	case store.Settled(stored.Outcome):
		// Already settled (an operator's redelivery set the row back to
		// queued, so it is not): a re-sent event, or, on a retry of this
		// execution, one that an earlier attempt delivered before dying.
		why := stored.Outcome
		if why == store.EventDelivered && deliveredEarlier(d.info, d.in, stored) {
			why = SkippedDeliveredEarlier
		}
		d.done = append(d.done, Settled{ID: ev.ID, Seq: ev.Seq, Result: ResultSkipped, Reason: why})
		return stored, false
	}
	return stored, true
}

// paced is step 4c: whether the event at i is left to the next execution,
// because the batch ran its time or the worker is stopping; never the
// first event, nor before one is settled.
func (d *delivery) paced(i int) bool {
	return i > 0 && len(d.done) > 0 && (time.Since(d.started) > d.batchTime || workerStopping(d.ctx))
}

// waitTurn is step 4d: under the app's limits, the wait for this POST's
// turn, which returns its in-flight lease. A wait is no attempt; the key
// keeps its order.
func (d *delivery) waitTurn(i int) (string, *ending) {
	if d.batch.Limits.IsZero() {
		return "", nil
	}
	budget := orDefault(d.a.HeadWait, LimitHeadWait)
	if i > 0 {
		budget = min(d.batchTime, maxLimitBatchWait) - time.Since(d.started)
	}
	lease, turn, err := d.a.waitTurn(d.ctx, d.batch.Target.App, d.batch.Limits, d.in.Timeout, budget, i)
	switch {
	case turn == turnGranted:
		return lease, nil
	case i > 0:
		// Later events go in the next execution.
		d.a.limitWaitEnded(d.in.SubscriptionID, turn, err)
		return "", d.finish(DeliverResult{Outcome: OutcomeDelivered})
	case turn == turnCancelled:
		return "", d.abandon()
	case turn == turnFailed:
		// As when the batch cannot be read: re-check soon, no attempt spent.
		return "", d.finish(DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
			SubscriptionReason: truncate(err.Error(), maxErrorText)})
	default:
		// The head's turn is further off: the workflow starts the next
		// execution at once, with no attempt spent. Attempt is the one the
		// head would have made (earlier ones of this execution failed), as
		// for an unreachable subscriber.
		return "", d.finish(DeliverResult{Outcome: OutcomeLimited, Attempt: d.headAttempt()})
	}
}

// boundPost is step 4e: the POST's timeout, capped by a local execution's
// deadline (capped), and the key's lease renewed to outlast it. Ending here
// gives the app's in-flight lease back.
func (d *delivery) boundPost(lease string) (timeout time.Duration, capped bool, e *ending) {
	timeout = d.postTimeout
	if l := d.left(); l < timeout {
		if l < minLocalPost {
			d.a.release(d.ctx, d.batch.Target.App, lease)
			return 0, false, d.finish(DeliverResult{Outcome: OutcomeHandOver})
		}
		timeout, capped = l, true
	}
	if d.keyL != nil && !d.keyL.renew(d.ctx, timeout) {
		// The key's lease ran out and another run took it: not a POST more.
		d.a.release(d.ctx, d.batch.Target.App, lease)
		return 0, false, d.finish(DeliverResult{Outcome: OutcomeLimited, Attempt: d.headAttempt()})
	}
	return timeout, capped, nil
}

// attempt numbers the POST of the event at i: the head continues the
// schedule's count, a later event makes its first attempt. Only slow
// batches heartbeat: a quick one costs no extra round trip.
func (d *delivery) attempt(i int) int {
	if i == 0 {
		return d.headAttempt()
	}
	if time.Since(d.started) > 2*time.Second {
		activity.RecordHeartbeat(d.ctx, i)
	}
	return 1
}

// post is step 4f: one POST, then the app's in-flight lease given back,
// the worker's count of the app's POSTs too (takeSlowSlot), and the attempt
// observed. A POST that ran its whole timeout counts towards holding the
// app back; one cut short by a local deadline (capped) says nothing of it.
func (d *delivery) post(ev Event, stored store.BatchEvent, attempt int, timeout time.Duration, capped bool, lease string) (r PostResult) {
	t := d.batch.Target
	start := d.a.now()
	defer func() {
		d.a.slow.done(t.App, !capped && timedOut(r, d.a.now().Sub(start), timeout), timeout, time.Now())
	}()
	r = d.a.Poster.Post(d.ctx, PostRequest{
		URL: t.URL(), Body: stored.Envelope, SubscriptionID: d.in.SubscriptionID,
		SubscriberApp: t.App, SourceApp: stored.SourceApp, EventID: ev.ID, Attempt: attempt, Timeout: timeout,
		TraceContext: stored.TraceContext, SecretID: d.batch.SecretID,
	})
	d.a.release(d.ctx, t.App, lease)
	if d.a.Observer != nil {
		d.a.Observer.Attempted(d.in.SubscriptionID, t.App, stored.Envelope, attempt, r)
	}
	return r
}

// classify is step 4g: it records the POST's outcome and decides what
// follows. Each outcome row is written as soon as it is known, beside the
// next POST, so that a retried execution (a worker killed mid-batch) skips
// what was already delivered.
func (d *delivery) classify(ev Event, attempt int, r PostResult, capped bool, postStart time.Time) *ending {
	if r.Delivered() {
		d.a.settled(d.in.SubscriptionID, store.EventDelivered, 1)
		d.done = append(d.done, Settled{ID: ev.ID, Seq: ev.Seq, Result: ResultDelivered, Attempts: attempt})
		u := OutcomeUpdate{EventID: ev.ID, Seq: ev.Seq, Status: store.EventDelivered, Attempts: attempt}
		if d.in.Local {
			u.DeliveredBy = localExecution(d.info.WorkflowExecution.RunID, d.in.Events[0].ID)
		}
		d.w.add(u)
		return nil
	}
	if capped && (r.Code == CodeHandlerTimeout || r.Code == CodeSubscriberUnreachable && d.left() <= 0) {
		// Cut short by the local deadline (while waiting for the answer, or
		// still connecting), not by the subscriber's timeout: not counted;
		// a regular activity sends it again, no sooner than this POST would
		// have timed out (FailedAt is its start).
		return d.finish(DeliverResult{Outcome: OutcomeHandOver, Code: CodeHandlerTimeout, Error: r.Message,
			FailedAt: postStart})
	}
	if r.Code == CodeSubscriberUnreachable {
		return d.finish(DeliverResult{Outcome: OutcomeUnreachable, Attempt: attempt,
			Code: r.Code, Error: r.Message})
	}
	fu := failureUpdate(d.in, ev, attempt, r)
	if fu.Status == store.EventFailed {
		d.a.settled(d.in.SubscriptionID, store.EventFailed, 1)
	}
	d.w.add(fu)
	if len(d.done) > 0 || d.in.Local {
		// A later event's failure, or the head's in a local activity, which
		// has no Temporal retry behind it: the workflow schedules the retry
		// from this result.
		return d.finish(DeliverResult{Outcome: OutcomePartial, Attempt: attempt,
			Code: r.Code, Error: r.Message, RetryAfter: r.RetryAfter, FailedAt: d.a.now()})
	}
	// The head's own failure drives Temporal's retry: its outcome row is
	// written best effort, since the workflow keeps the count too.
	if _, err := d.w.close(); err != nil {
		d.a.warn("record outcome", d.in.SubscriptionID, err)
	}
	return &ending{err: d.a.headFailure(d.ctx, d.in, ev, attempt, r)}
}

// finish is step 5: r with the events settled so far, after the app's
// unreachable mark is kept and every outcome row written (those that could
// not be go back in r.Unrecorded).
func (d *delivery) finish(r DeliverResult) *ending {
	r.Done = d.done
	d.a.reachability(d.ctx, d.batch, r)
	if unrecorded, err := d.w.close(); err != nil {
		d.a.warn("record outcomes", d.in.SubscriptionID, err)
		r.Unrecorded = unrecorded
	}
	r.Owed = d.thenRead(r)
	if d.keyL != nil {
		r.LeaseKept = d.keyL.release() != nil
		d.keyL = nil
	}
	return endWith(r)
}

// thenRead is the last step of a local execution asked to read what the
// key owes after it (DeliverInput.ThenRead): only when it delivered the
// whole batch and wrote every row, so the read sees this execution's rows
// settled. A failed read returns nil: the workflow reads for itself.
func (d *delivery) thenRead(r DeliverResult) *QueueResult {
	if d.in.ThenRead <= 0 || !d.in.Local || r.Outcome != OutcomeDelivered ||
		len(r.Done) != len(d.in.Events) || len(r.Unrecorded) > 0 {
		return nil
	}
	q, err := d.a.KeyQueue(d.ctx, QueueInput{SubscriptionID: d.in.SubscriptionID,
		SubjectKey: d.in.SubjectKey, Limit: d.in.ThenRead})
	if err != nil {
		d.a.warn("read what the key owes after delivering", d.in.SubscriptionID, err)
		return nil
	}
	return &q
}

// abandon ends an execution cancelled before it settled anything: the
// outcome rows already queued are still written.
func (d *delivery) abandon() *ending {
	_, _ = d.w.close()
	return &ending{err: d.ctx.Err()}
}

package workflows

import (
	"errors"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/workflows/payload"
)

// deliverActivity is the registered name of (*activities.Activities).Deliver,
// which a local activity is called by.
const deliverActivity = "Deliver"

// maxUnreachableWait caps the back-off of an unreachable subscriber.
const maxUnreachableWait = time.Hour

// deliver runs one Deliver activity for the head and the consecutive events
// behind it, handling signals while it runs, then applies the result.
func (d *delivery) deliver(ctx workflow.Context) {
	d.deliverHead(ctx, nil)
}

// deliverHead is deliver; with first, the delivery the start's read made
// (DeliverInStartVersion) stands in for the local attempt at the head,
// which it was, and its result is applied as that attempt's would be.
func (d *delivery) deliverHead(ctx workflow.Context, first *FirstDelivery) {
	d.idleSince = time.Time{}
	head := d.head()
	if head == nil {
		// The read delivered, yet says the key owed nothing before: not a
		// result of this code's StartActivity. Nothing to apply it to.
		d.logger.Warn("the start's read reports a delivery of a key that owed nothing")
		return
	}
	batch := d.batch()
	in := deliverInput(d.p, head, batch)
	// A first attempt runs as a local activity (once per head), unless the
	// head waits for a retry delay or a local attempt of this run was slow.
	local := d.firstAttempt && !d.localSlow && head.Attempts == 0 && head.NotBefore.IsZero() &&
		d.localTried != head.Event.ID
	if first != nil {
		if !local || !slices.Equal(first.Events, batch) {
			d.logger.Warn("the start's read delivered another batch than the run's first attempt would",
				"head", head.Event.ID, "events", len(first.Events))
		}
		local = true // it was a local execution, whatever this run would have made
	}
	d.attemptStarts(ctx, head, local)
	d.inActivity = true
	d.inflight = len(batch)
	before := head.Attempts
	in.PrevRun = d.PrevRun
	if local && d.quiet() && len(batch) == len(d.Queue) {
		// The run may end once this goes: the same local activity reads
		// what the key owes after it, instead of a read of its own.
		in.ThenRead = d.readLimit()
	}
	if !local && d.localTried == head.Event.ID {
		// This head had a local attempt in this run: an event that attempt
		// delivered without the workflow learning of it (its worker died)
		// counts as delivered here.
		in.LocalHead = head.Event.ID
	}
	var res activities.DeliverResult
	var err error
	if first != nil {
		d.localTried = head.Event.ID
		res, err = first.Result, first.err()
		if in.ThenRead != first.ThenRead {
			// Its read after the delivery is not the one this run would
			// ask for: the run reads again before it ends.
			d.logger.Warn("the start's read read after its delivery otherwise than the run would")
			res.Owed = nil
		}
	} else {
		res, err = d.execute(ctx, head, in, local)
	}
	if local && err != nil {
		// The local attempt ended without a result (the worker failed it, or
		// it overran its timeout): the same batch goes to a regular activity
		// at once, before any operator action applies, and counts what the
		// lost attempt delivered.
		d.logger.Warn("first attempt as a local activity failed; continuing as an activity", "error", err)
		in.LocalHead = head.Event.ID
		if h := d.head(); h != nil {
			head = h // the queue may have grown meanwhile (a new backing array)
		}
		if d.oneMarker {
			d.attemptStarts(ctx, head, false) // an idle key now shows it
		}
		res, err = d.execute(ctx, head, in, false)
	}
	d.inActivity = false
	d.inflight = 0
	d.cancelActivity = nil
	now := workflow.Now(ctx)
	interrupted := d.interrupted
	d.interrupted = false
	if d.errorPolicy && countedFailure(before, res, err) {
		d.Unreachable = 0 // the subscriber answered: its back-off starts over
	}
	switch {
	case err != nil && temporal.IsCanceledError(err):
		// Interrupted by an operator: the deferred action decides what next.
	case err != nil && interrupted && !finalFailure(err):
		// Interrupted while an attempt was under way: the server closes the
		// activity as failed (retry state cancel requested), not canceled. The
		// attempt counts; the deferred action decides what next.
		if head := d.head(); head != nil {
			d.noteAttempt(head, err)
		}
	case err != nil:
		d.failed(ctx, err, now)
	default:
		d.applyResult(ctx, res, now)
		d.owed, d.owedTask = res.Owed, workflow.GetInfo(ctx).GetCurrentHistoryLength()
		if res.LeaseKept {
			// The key's lease, owned by this run, is still held: a run
			// that ended now would leave the key's next run waiting for
			// it. This one waits idle and takes the next event itself.
			d.endQuiet = false
		}
	}
	d.runDeferred(ctx)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// execute runs one Deliver execution, local or regular, handling signals
// while it runs, and returns its result.
func (d *delivery) execute(ctx workflow.Context, head *QueueItem, in activities.DeliverInput, local bool) (activities.DeliverResult, error) {
	var fut workflow.Future
	d.pausesAtDeliver = d.pauses // a result's pause yields to one handled since (applyResult)
	if local {
		d.localTried = head.Event.ID
		in.Local = true
		in.Deadline = d.localDeadline(ctx)
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			ScheduleToCloseTimeout: max(in.Deadline.Sub(workflow.Now(ctx)), 0) + localGrace,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		})
		// Not cancellable: an operator's action waits for it (it is never a
		// retry, the only delivery an action interrupts). By name: the
		// replayer, which registers no activities, then stands a placeholder
		// in for it and replays the recorded result.
		fut = workflow.ExecuteLocalActivity(lctx, deliverActivity, in)
	} else {
		fut = workflow.ExecuteActivity(d.activityOptions(ctx, head, len(in.Events)), (*activities.Activities).Deliver, in)
	}
	var res activities.DeliverResult
	var err error
	done := false
	for !done {
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(fut, func(f workflow.Future) {
			err = f.Get(ctx, &res)
			done = true
		})
		d.addSignals(ctx, sel)
		sel.Select(ctx)
	}
	return res, err
}

// localGrace is how long a local attempt may overrun its budget before the
// workflow gives up on it.
const localGrace = 2 * time.Second

// localDeadline is when the local attempts of the current workflow task
// must end: 60 % of the task's timeout (6 s of the default 10 s) after the
// task started, so that the task completes before the server could time it
// out and hand it to another worker, which would run the same attempts
// again while these still POST. Every local attempt of one task shares the
// deadline: workflow.Now moves on with each local result, but the history
// length (the task's started event id) marks a new task, as does a clock
// that moved on by more than a task may last (the test environment keeps
// no history length). What does not fit goes to a regular activity.
//
// The SDK has its own deadline beside this one, and both are needed. At 80 %
// of the task's timeout (ratioToForceCompleteWorkflowTaskComplete in
// go.temporal.io/sdk's internal_task_pollers.go), counted from when the
// worker began processing the task, a workflow task still waiting for a
// local activity is completed as a heartbeat and a new task is started: the
// server does not time it out, but the local activity keeps running and its
// result lands in a later task, at the cost of three more history events and
// a round trip per heartbeat. That deadline only keeps the task alive; it
// does not bound what the local activity does, so a POST would still run
// past it. This budget bounds the attempts themselves (Deliver makes no POST
// it could not finish by DeliverInput.Deadline: OutcomeHandOver), so a local
// delivery normally ends, with its result recorded in the same task, before
// the SDK's heartbeat is needed. It counts from the task's start as the
// workflow sees it, which is earlier than the worker's own start, and the 20
// points between them leave room for that lag and for completing the task.
// With the default 10 s timeout, localGrace's 2 s bring the local activity's
// own timeout to 8 s, the SDK's 80 %: one that overruns is given up when the
// SDK would heartbeat anyway (sdkdeadline_test.go pins the SDK's ratio). A
// delivery in the run's start read (DeliverInStartVersion) has the same
// deadline and is given up at the same time (FirstInput.Timeout), though
// the read before it, within the start's own timeouts, may have taken the
// task closer to the SDK's heartbeat.
func (d *delivery) localDeadline(ctx workflow.Context) time.Time {
	info := workflow.GetInfo(ctx)
	timeout := info.WorkflowTaskTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	now := workflow.Now(ctx)
	if n := info.GetCurrentHistoryLength(); n != d.taskHistory || d.taskStart.IsZero() || now.Sub(d.taskStart) > timeout {
		d.taskHistory, d.taskStart = n, now
	}
	return d.taskStart.Add(timeout * 6 / 10)
}

// deliverTimeout bounds one Deliver execution of n events.
func (d *delivery) deliverTimeout(n int) time.Duration {
	return time.Duration(n)*(d.p.DeliveryTimeout+5*time.Second) + 30*time.Second
}

// activityOptions are those of a regular Deliver execution of n events from
// head, cancellable by an operator's action (d.cancelActivity).
func (d *delivery) activityOptions(ctx workflow.Context, head *QueueItem, n int) workflow.Context {
	remaining := max(d.p.MaxAttempts()-head.Attempts, 1) // never 0, which Temporal reads as unlimited
	if !head.NotBefore.IsZero() {
		remaining++ // the first execution attempt only waits
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: d.deliverTimeout(n),
		HeartbeatTimeout:    d.p.DeliveryTimeout + 30*time.Second,
		// An interrupted delivery reports back only once its attempt under way
		// has ended, so no later event can overtake that attempt.
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    d.p.RetrySchedule[0],
			BackoffCoefficient: 2,
			MaximumInterval:    time.Hour,
			MaximumAttempts:    int32(remaining),
		},
	})
	actx, d.cancelActivity = workflow.WithCancel(actx)
	return actx
}

// batch is the head and the consecutive events behind it that one activity
// execution may deliver.
func (d *delivery) batch() []activities.Event {
	return batchOf(d.Queue, d.p.MaxBatch)
}

// batchOf is the batch of a queue (not empty): its head and the events
// behind it that have made no attempt, up to maxBatch.
func batchOf(queue []QueueItem, maxBatch int) []activities.Event {
	out := []activities.Event{queue[0].Event}
	for _, it := range queue[1:] {
		if len(out) >= maxBatch || it.Attempts > 0 || it.Failed {
			break
		}
		out = append(out, it.Event)
	}
	return out
}

// deliverInput is the Deliver input of batch, from head, under the run's
// settings p: the run's (deliverHead) and its start's read's
// (firstDelivery) come from here, so that they cannot differ.
func deliverInput(p Params, head *QueueItem, batch []activities.Event) activities.DeliverInput {
	return activities.DeliverInput{
		SubscriptionID: p.SubscriptionID,
		SubscriberApp:  p.SubscriberApp,
		SubjectKey:     p.SubjectKey,
		Events:         batch,
		PriorAttempts:  head.Attempts,
		NotBefore:      head.NotBefore,
		RetrySchedule:  p.RetrySchedule,
		MaxAttempts:    p.Attempts,
		Timeout:        p.DeliveryTimeout,
		BatchTime:      p.BatchTime,
		WaitsOutLimits: true,
	}
}

// maxRecent bounds the ids of events this run delivered that it remembers,
// to drop a relay's re-send of one without a trip to the database.
const maxRecent = 1000

// delivered remembers an event this run delivered.
func (d *delivery) delivered(id string) {
	if d.recent == nil {
		// Not sized for maxRecent: a map of that capacity costs some 40 KB,
		// held by every cached key workflow however few events its key has
		// (80 MB of a worker's heap at 2,000 live keys).
		d.recent = make(map[string]bool)
	}
	if len(d.recentOrder) >= maxRecent {
		delete(d.recent, d.recentOrder[0])
		d.recentOrder = d.recentOrder[1:]
	}
	d.recent[id] = true
	d.recentOrder = append(d.recentOrder, id)
}

// settle pops the events the activity is done with from the front of the
// queue. Rejected ones (a forged or wrong signal) are audited as
// signal_rejected; their outcome rows are not touched, since they may not
// belong to this key.
func (d *delivery) settle(ctx workflow.Context, done []activities.Settled) {
	var rejected []activities.AuditEntry
	for _, s := range done {
		var it QueueItem
		switch i := d.findSeq(s.ID, s.Seq); {
		case i == 0: // the usual case: the batch is the front of the queue
			it = d.Queue[0]
			d.Queue = d.Queue[1:]
		case i > 0:
			it = d.Queue[i]
			d.Queue = append(d.Queue[:i], d.Queue[i+1:]...)
		default:
			continue
		}
		switch {
		case s.Result == activities.ResultDelivered,
			// Delivered by an earlier attempt of this execution, whose worker
			// died before it could report.
			s.Result == activities.ResultSkipped && s.Reason == activities.SkippedDeliveredEarlier:
			if s.Attempts > 0 {
				it.Attempts = s.Attempts
			}
			d.noteSettledAttempts(s.Attempts)
			d.Counters.Delivered++
			d.outcome(ctx, it, "delivered", "")
			d.delivered(it.Event.ID)
			d.Rearms = 0
			d.Unreachable = 0
		case s.Result == activities.ResultRejected:
			d.outcome(ctx, it, "rejected", activities.CodeSignalRejected)
			rejected = append(rejected, d.auditEntry(ctx, AuditSignalRejected, "", "failed",
				activities.CodeSignalRejected, it.Event.ID, map[string]any{payload.MetaSeq: it.Event.Seq, payload.MetaReason: s.Reason}))
		}
	}
	if len(rejected) > 0 {
		d.record(ctx, nil, rejected...)
	}
}

func (d *delivery) applyResult(ctx workflow.Context, res activities.DeliverResult, now time.Time) {
	d.settle(ctx, res.Done)
	if len(res.Unrecorded) > 0 {
		d.record(ctx, res.Unrecorded)
	}
	head := d.head()
	switch res.Outcome {
	case activities.OutcomeDelivered:
		d.WaitUntil = time.Time{}
		d.WaitStatus = ""
	case activities.OutcomePartial:
		// The next event's first attempt failed after the ones before it went
		// through; its retry waits out the schedule in its own execution.
		head.Attempts = res.Attempt
		head.Code, head.LastCode, head.LastError = res.Code, res.Code, res.Error
		switch {
		case activities.IsTerminal(res.Code):
			d.markFailed(ctx, head, now)
			return
		case res.Attempt >= d.p.MaxAttempts():
			head.Code = activities.CodeAttemptsExhausted
			d.markFailed(ctx, head, now)
			return
		}
		delay := d.p.RetrySchedule[res.Attempt-1]
		if res.RetryAfter > delay {
			delay = min(res.RetryAfter, time.Hour)
		}
		// From when the attempt failed (a local attempt's result comes with
		// its workflow task's earlier time), but never later than a minute
		// ahead of the workflow's clock, whatever the worker's clock says.
		head.NotBefore = maxTime(now, minTime(res.FailedAt, now.Add(time.Minute))).Add(delay)
		head.NextAttemptAt = head.NotBefore
		d.attemptFailed(ctx)
	case activities.OutcomeUnreachable:
		head.Attempts = res.Attempt - 1
		head.Code, head.LastCode, head.LastError = res.Code, res.Code, res.Error
		wait := 30 * time.Second << min(d.Unreachable, 7)
		wait = min(wait, maxUnreachableWait)
		d.Unreachable++
		d.WaitUntil = now.Add(wait)
		d.WaitStatus = StatusUnreachable
		head.NextAttemptAt = d.WaitUntil
	case activities.OutcomeHandOver:
		// A local attempt stopped at its deadline: the head goes to a
		// regular activity (d.localTried). If a POST was cut short, the
		// subscriber may still be working on it: the retry waits until that
		// POST would have timed out anyway, so the next event cannot
		// overtake it, and this run makes no more local attempts.
		if res.Code != "" && head != nil {
			d.localSlow = true
			head.NotBefore = maxTime(now, minTime(res.FailedAt, now.Add(time.Minute))).Add(d.p.DeliveryTimeout)
			head.NextAttemptAt = head.NotBefore
		}
	case activities.OutcomeLimited:
		// The app's limits held the head back: that attempt is not spent
		// (earlier attempts of a retried execution are, as their reports
		// said), and the loop starts the next execution at once, or, when
		// the worker holds back an app whose POSTs time out (RetryAfter),
		// once that wait is over: the next execution's first attempt waits
		// in Temporal's retry timer, holding no activity slot
		// (SlowAppChange, asked only on such a result: a worker built before
		// it, in a rolling upgrade, loops at once, and its history replays
		// so).
		if head != nil && res.Attempt-1 > head.Attempts {
			head.Attempts = res.Attempt - 1
		}
		if head != nil && res.RetryAfter > 0 &&
			workflow.GetVersion(ctx, SlowAppChange, workflow.DefaultVersion, SlowAppVersion) >= SlowAppVersion {
			head.NotBefore = now.Add(min(res.RetryAfter, time.Minute))
			head.NextAttemptAt = head.NotBefore
		}
	case activities.OutcomeInactive:
		if res.KeyPaused && workflow.GetVersion(ctx, RowsPauseChange, workflow.DefaultVersion, RowsPauseVersion) >= RowsPauseVersion {
			// The rows say the key is paused and this run did not know: a
			// reset to before the pause, or a pause written beside the run.
			// The run holds the key paused, as a pause it took would, until
			// an operator resumes it; unless a pause or a resume reached the
			// run while the execution read the row: the latest word is the
			// operator's, and the next execution reads the row again.
			if d.pauses != d.pausesAtDeliver {
				return
			}
			d.logger.Warn("the key's paused_keys row says it is paused; holding it paused")
			d.KeyPaused = true
			d.pauses++
			return
		}
		d.SubState, d.SubReason = res.SubscriptionState, res.SubscriptionReason
		if res.SubscriptionState == activities.SubscriptionCancelled {
			d.removed(ctx, "subscription_cancelled")
			return
		}
		d.WaitStatus = StatusBlocked
		if res.SubscriptionState == activities.SubscriptionPaused {
			d.WaitStatus = StatusPaused
		}
		wait := d.p.RecheckInterval
		if res.SubscriptionState == activities.SubscriptionUnknown {
			// The database did not answer: look again soon (5 s, doubling),
			// rather than holding the key for a whole re-check interval.
			wait = min(5*time.Second<<min(d.LookupFailures, 6), d.p.RecheckInterval)
			d.LookupFailures++
		}
		d.WaitUntil = now.Add(wait)
	}
	if res.Outcome != activities.OutcomeInactive || res.SubscriptionState != activities.SubscriptionUnknown {
		d.LookupFailures = 0
	}
}

// failureDetails reads the details a Deliver error carries.
func failureDetails(err error) (activities.FailureDetails, bool) {
	var details activities.FailureDetails
	var appErr *temporal.ApplicationError
	ok := errors.As(err, &appErr) && appErr.HasDetails() && appErr.Details(&details) == nil
	return details, ok
}

// finalFailure reports whether an activity error ends the head for good
// (terminal code or last attempt), whoever interrupted it.
func finalFailure(err error) bool {
	details, ok := failureDetails(err)
	return ok && (details.Exhausted || activities.IsTerminal(details.Code))
}

// noteAttempt records the attempt an interrupted execution spent on the head.
func (d *delivery) noteAttempt(head *QueueItem, err error) {
	if details, ok := failureDetails(err); ok && details.Attempt > head.Attempts {
		head.Attempts = details.Attempt
		d.noteFailedAttempts(details.Attempt)
		head.Code, head.LastCode, head.LastError = details.Code, details.LastCode, details.Error
	}
}

// failed applies an activity error: a terminal failure of the head or its
// last attempt failing.
func (d *delivery) failed(ctx workflow.Context, err error, now time.Time) {
	var details activities.FailureDetails
	var appErr *temporal.ApplicationError
	var timeoutErr *temporal.TimeoutError
	switch {
	case errors.As(err, &appErr) && appErr.HasDetails() && appErr.Details(&details) == nil:
	case errors.As(err, &timeoutErr):
		details = activities.FailureDetails{Code: activities.CodeHandlerTimeout, Error: err.Error()}
	default:
		details = activities.FailureDetails{Code: activities.CodeHandlerFailed, Error: err.Error()}
	}
	head := d.head()
	if head == nil {
		return
	}
	if details.Attempt > 0 {
		head.Attempts = details.Attempt
	} else {
		head.Attempts++
	}
	if details.LastCode == "" {
		details.LastCode = details.Code
	}
	head.Code, head.LastCode, head.LastError = details.Code, details.LastCode, details.Error
	if !activities.IsTerminal(head.Code) && head.Attempts >= d.p.MaxAttempts() {
		head.Code = activities.CodeAttemptsExhausted
	}
	d.markFailed(ctx, head, now)
}

// markFailed holds the key on its head: outcome failed, audited.
func (d *delivery) markFailed(ctx workflow.Context, head *QueueItem, now time.Time) {
	if d.errorPolicy && d.skips(ctx) {
		d.skip(ctx, head)
		return
	}
	head.Failed = true
	head.FailedAt = now
	head.NotBefore = time.Time{}
	head.NextAttemptAt = time.Time{}
	if d.canRearm() {
		head.NextAttemptAt = now.Add(d.p.RearmCooldown)
	}
	d.Counters.Failed++
	d.outcome(ctx, *head, "failed", head.Code)
	d.record(ctx, []activities.OutcomeUpdate{{
		EventID: head.Event.ID, Seq: head.Event.Seq, Status: activities.RowFailed, Attempts: head.Attempts,
		Code: head.Code, LastCode: head.LastCode, LastError: head.LastError,
	}}, d.auditEntry(ctx, AuditDeliveryFailed, "", "failed", head.Code, head.Event.ID, map[string]any{
		payload.MetaSeq: head.Event.Seq, payload.MetaAttempts: head.Attempts, payload.MetaLastCode: head.LastCode, payload.MetaError: head.LastError,
	}))
	d.headFailed(ctx)
}

// auditEntry builds one audit row about this key.
func (d *delivery) auditEntry(ctx workflow.Context, action, actor, outcome, code, eventID string, meta map[string]any) activities.AuditEntry {
	if meta == nil {
		meta = map[string]any{}
	}
	meta[payload.MetaSubscription] = d.p.SubscriptionID
	meta[payload.MetaSubject] = d.p.SubjectKey
	if eventID != "" {
		meta[payload.MetaEventID] = eventID
	}
	// Deleting the empty values: the order does not matter.
	//workflowcheck:ignore
	for k, v := range meta {
		if s, ok := v.(string); ok && s == "" {
			delete(meta, k)
		}
	}
	if actor == "" {
		actor = "system"
	}
	return activities.AuditEntry{
		Action: action, Outcome: outcome, Actor: actor, TargetType: "delivery",
		TargetID: workflow.GetInfo(ctx).WorkflowExecution.ID, ErrorCode: code, Metadata: meta,
	}
}

// audit writes one audit row; the rare paths only.
func (d *delivery) audit(ctx workflow.Context, action, actor, outcome, code, eventID string, meta map[string]any) {
	d.record(ctx, nil, d.auditEntry(ctx, action, actor, outcome, code, eventID, meta))
}

// record writes outcome rows and audit rows through one activity.
func (d *delivery) record(ctx workflow.Context, outcomes []activities.OutcomeUpdate, audit ...activities.AuditEntry) {
	if len(outcomes) == 0 && len(audit) == 0 {
		return
	}
	d.showBare(ctx) // a Record may be retried through an outage
	in := activities.RecordInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey,
		Outcomes: outcomes, Audit: audit}
	if err := workflow.ExecuteActivity(d.recordContext(ctx, outcomes, audit), (*activities.Activities).Record, in).Get(ctx, nil); err != nil {
		d.logger.Warn("record outcomes and audit failed", "outcomes", len(outcomes), "audit", len(audit), "error", err)
	}
}

// recordContext carries the options of a Record of outcomes and audit.
func (d *delivery) recordContext(ctx workflow.Context, outcomes []activities.OutcomeUpdate, audit []activities.AuditEntry) workflow.Context {
	actx := d.shortActivity(ctx)
	if d.fromLog && (len(outcomes) > 0 || pausesKey(audit)) {
		// The rows are what the key owes: an outcome this run decided must
		// reach them, or a later read would queue the event again, and a
		// pause or resume must reach paused_keys, or the key's next run
		// would start as it was before the operator acted. Retried until it
		// does (a database outage holds the key meanwhile). The retry
		// policy is no part of what replay compares.
		actx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
				NonRetryableErrorTypes: []string{activities.ErrTypeNotFound, activities.CodeSignalRejected},
			},
		})
	}
	return actx
}

// pausesKey reports whether audit holds a pause or a resume of the key,
// which the store keeps in paused_keys.
func pausesKey(audit []activities.AuditEntry) bool {
	return slices.ContainsFunc(audit, func(e activities.AuditEntry) bool {
		return e.Action == AuditDeliveryPaused || e.Action == AuditDeliveryResumed
	})
}

// shortActivity is the option set of the small database activities.
func (d *delivery) shortActivity(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			MaximumAttempts: 20, NonRetryableErrorTypes: []string{activities.ErrTypeNotFound},
		},
	})
}

package workflows

import (
	"errors"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/reason"
	"herald/workflows/payload"
)

// op is one operator action on the key, from a signal or an Update. Both
// run through the workflow's main loop, one at a time, so an action never
// interleaves with another or with a delivery's result.
type op struct {
	// quiet reports whether the action touches the events of the delivery
	// in flight; it then waits for that delivery, interrupting it if it is
	// only waiting between retries.
	quiet func() bool
	apply func(workflow.Context) OpResult
	// pause and resume mark those actions (OpsInOrderChange).
	pause, resume bool
	// done and result are set once the action has been applied.
	done   bool
	result OpResult
}

func (d *delivery) redeliverOp(s RedeliverSignal) *op {
	pin := ""
	if len(s.EventIDs) == 0 && s.EventID == "" {
		pin = d.headID()
	}
	return &op{
		quiet: func() bool { return len(s.EventIDs) == 0 && d.aboutHead(s.EventID) },
		apply: func(ctx workflow.Context) OpResult {
			if d.headChanged(pin) {
				return d.refuseHeadChanged(ctx, AuditDeliveryRedelivered, s.Actor, s.Reason, pin)
			}
			return d.onRedeliver(ctx, s)
		},
	}
}

func (d *delivery) cancelOp(s CancelSignal) *op {
	pin := ""
	if !s.All && s.EventID == "" {
		pin = d.headID()
	}
	return &op{
		quiet: func() bool {
			if s.All || s.EventID == "" {
				return true
			}
			i := d.find(s.EventID)
			return i >= 0 && i < max(d.inflight, 1)
		},
		apply: func(ctx workflow.Context) OpResult {
			if d.headChanged(pin) {
				return d.refuseHeadChanged(ctx, AuditDeliveryCancelled, s.Actor, s.Reason, pin)
			}
			return d.onCancel(ctx, s)
		},
	}
}

// headID is the id of the head now ("" when nothing is queued). An action
// about "the head" acts on this one: if it is gone by the time the action
// applies (delivered meanwhile), the action does nothing rather than hit the
// next event.
func (d *delivery) headID() string {
	if head := d.head(); head != nil {
		return head.Event.ID
	}
	return ""
}

func (d *delivery) headChanged(pin string) bool {
	return pin != "" && d.headID() != pin
}

func (d *delivery) refuseHeadChanged(ctx workflow.Context, action, actor, why, pin string) OpResult {
	d.audit(ctx, action, actor, "failed", string(reason.HeadChanged), pin, map[string]any{payload.MetaReason: why})
	return OpResult{Reason: reason.HeadChanged}
}

func (d *delivery) pauseOp(s ControlSignal) *op {
	return &op{
		// A key pauses after the delivery in flight; a retrying head is
		// interrupted instead of waiting out its schedule.
		quiet: func() bool { head := d.head(); return head != nil && head.Attempts > 0 },
		apply: func(ctx workflow.Context) OpResult { return d.onPause(ctx, s) },
		pause: true,
	}
}

func (d *delivery) resumeOp(s ControlSignal) *op {
	return &op{
		quiet:  func() bool { return false },
		apply:  func(ctx workflow.Context) OpResult { return d.onResume(ctx, s) },
		resume: true,
	}
}

// ResumeRowChange is the version of a resume that finds its run not
// paused: it deletes the key's paused_keys row all the same, for a pause
// the run never learnt of (a reset past it, a late write of a terminated
// run, an older worker's resume that left the row), so the key's next run
// does not start paused; a row it deletes makes the resume change
// something, audited as any. Asked only at that moment.
const ResumeRowChange = "resume-row"

// ResumeRowVersion is the ResumeRowChange version that deletes the row.
const ResumeRowVersion = 1

// forgetPause deletes the key's paused_keys row for a resume its run was
// not paused for, and reports whether there was one.
func (d *delivery) forgetPause(ctx workflow.Context, s ControlSignal) bool {
	if !d.fromLog || workflow.GetVersion(ctx, ResumeRowChange, workflow.DefaultVersion, ResumeRowVersion) < ResumeRowVersion {
		return false
	}
	e := d.auditEntry(ctx, AuditDeliveryResumed, s.Actor, "allowed", "", "", map[string]any{payload.MetaReason: s.Reason})
	in := activities.ForgetPauseInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey, Audit: e}
	var forgot bool
	if err := workflow.ExecuteActivity(d.recordContext(ctx, nil, []activities.AuditEntry{e}), (*activities.Activities).ForgetPause, in).Get(ctx, &forgot); err != nil {
		d.logger.Warn("forget the key's pause", "error", err)
		return false
	}
	return forgot
}

func (d *delivery) subscriptionOp(s SubscriptionSignal) *op {
	return &op{
		quiet: func() bool { return true },
		apply: func(ctx workflow.Context) OpResult { return d.onSubscription(ctx, s) },
	}
}

// submit applies an action now, or after the delivery in flight when it
// touches that delivery's events, so an activity's result is never applied
// to a queue changed under it. A head that is only waiting between retries
// is interrupted rather than waited for; the attempt under way, if any,
// still ends first (WaitForCancellation), so order is kept.
func (d *delivery) submit(ctx workflow.Context, o *op) {
	d.signals++
	quiet := o.quiet()
	if !d.inActivity || (!quiet && !d.behindDeferred(ctx, o)) {
		d.finish(ctx, o)
		return
	}
	d.deferred = append(d.deferred, o)
	if head := d.head(); quiet && head != nil && head.Attempts > 0 && d.cancelActivity != nil {
		d.cancelActivity()
		d.interrupted = true
	}
}

// OpsInOrderChange is the version of a resume that comes while a pause
// waits for the delivery in flight: it waits behind the pause, so the two
// apply in the order they came. Before it, the resume applied first
// (answering not_paused) and the pause after it, leaving the key paused,
// in paused_keys too. Other actions that need not wait still apply at
// once: one that waited behind an attempt its retries keep going would
// outlast the operator's Update. Asked only at that moment, so no other
// run records a marker.
const OpsInOrderChange = "ops-in-order"

// OpsInOrderVersion is the OpsInOrderChange version that keeps the order.
const OpsInOrderVersion = 1

// behindDeferred reports whether o, which need not wait for the delivery in
// flight, waits anyway: a resume behind a pause deferred before it.
func (d *delivery) behindDeferred(ctx workflow.Context, o *op) bool {
	return o.resume && slices.ContainsFunc(d.deferred, func(p *op) bool { return p.pause }) &&
		workflow.GetVersion(ctx, OpsInOrderChange, workflow.DefaultVersion, OpsInOrderVersion) >= OpsInOrderVersion
}

func (d *delivery) finish(ctx workflow.Context, o *op) {
	o.result = o.apply(ctx)
	o.result.Status = d.restingStatus()
	o.result.Queued = len(d.Queue)
	o.done = true
	d.refreshDetails(ctx)
}

// runDeferred applies the actions that waited for a delivery.
func (d *delivery) runDeferred(ctx workflow.Context) {
	deferred := d.deferred
	d.deferred = nil
	for _, o := range deferred {
		d.finish(ctx, o)
	}
}

// setUpdateHandlers registers the operator Updates. Each hands its action
// to the main loop and answers once it has been applied.
func (d *delivery) setUpdateHandlers(ctx workflow.Context) error {
	run := func(ctx workflow.Context, o *op) (OpResult, error) {
		d.updatesCame++
		d.updates.Send(ctx, o)
		if err := workflow.Await(ctx, func() bool { return o.done }); err != nil {
			return OpResult{}, err
		}
		return o.result, nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRedeliver,
		func(ctx workflow.Context, s RedeliverSignal) (OpResult, error) { return run(ctx, d.redeliverOp(s)) },
		workflow.UpdateHandlerOptions{Validator: validateRedeliver}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel,
		func(ctx workflow.Context, s CancelSignal) (OpResult, error) { return run(ctx, d.cancelOp(s)) },
		workflow.UpdateHandlerOptions{Validator: validateCancel}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdatePause,
		func(ctx workflow.Context, s ControlSignal) (OpResult, error) { return run(ctx, d.pauseOp(s)) },
		workflow.UpdateHandlerOptions{Validator: validateControl}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateResume,
		func(ctx workflow.Context, s ControlSignal) (OpResult, error) { return run(ctx, d.resumeOp(s)) },
		workflow.UpdateHandlerOptions{Validator: validateControl})
}

// maxOpText bounds the free text of an operator request.
const maxOpText = 1000

// maxRedeliverIDs bounds the events one redeliver names.
const maxRedeliverIDs = 1000

func validateRedeliver(_ workflow.Context, s RedeliverSignal) error {
	if len(s.EventIDs) > maxRedeliverIDs {
		return errors.New("eventIds: at most 1000 events per request")
	}
	return validateControl(nil, ControlSignal{Actor: s.Actor, Reason: s.Reason})
}

func validateCancel(_ workflow.Context, s CancelSignal) error {
	if s.All && s.EventID != "" {
		return errors.New("give eventId or all, not both")
	}
	return validateControl(nil, ControlSignal{Actor: s.Actor, Reason: s.Reason})
}

// maxActor bounds an operator's name.
const maxActor = 200

func validateControl(_ workflow.Context, s ControlSignal) error {
	if len(s.Actor) > maxActor || len(s.Reason) > maxOpText {
		return errors.New("actor is at most 200 bytes and reason at most 1000")
	}
	if !validActor(s.Actor) {
		return errors.New("actor: printable text without control characters or surrounding spaces")
	}
	if !utf8.ValidString(s.Reason) {
		return errors.New("reason: not valid UTF-8")
	}
	return nil
}

// validActor reports whether an actor is empty (the system) or printable
// UTF-8 text with no control characters and no surrounding spaces: the
// audit trail shows it as it is.
func validActor(a string) bool {
	if a == "" {
		return true
	}
	if !utf8.ValidString(a) || strings.TrimSpace(a) != a {
		return false
	}
	for _, r := range a {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// operatorSignal submits the action of an operator's signal, once the
// Updates' validation passed it (QueueFromLogVersion): an invalid signal
// changes nothing and writes nothing but one bounded log line.
func (d *delivery) operatorSignal(ctx workflow.Context, name string, invalid error, o *op) {
	if invalid == nil || !d.fromLog {
		d.submit(ctx, o)
		return
	}
	d.signals++
	msg := invalid.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	d.logger.Warn("refused an invalid operator signal", "signal", name, "error", msg)
}

func (d *delivery) onRedeliver(ctx workflow.Context, s RedeliverSignal) OpResult {
	head := d.head()
	if len(s.EventIDs) == 0 && (s.EventID == "" || (head != nil && head.Event.ID == s.EventID)) {
		if head == nil || !d.stuck(head) {
			d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "failed", string(reason.NothingToRedeliver), s.EventID, map[string]any{payload.MetaReason: s.Reason})
			return OpResult{Reason: reason.NothingToRedeliver}
		}
		d.freshAttempts(head)
		d.Rearms = 0 // an operator's redeliver restores the automatic re-arms
		entry := d.auditEntry(ctx, AuditDeliveryRedelivered, s.Actor, "allowed", "", head.Event.ID,
			map[string]any{payload.MetaReason: s.Reason, payload.MetaSeq: head.Event.Seq})
		if !d.fromLog {
			d.record(ctx, nil, entry)
			return OpResult{Changed: true, Requeued: []string{head.Event.ID}}
		}
		// Its row says so too, and its hold clock starts again, as for a
		// redelivery by id.
		head.QueuedAt = workflow.Now(ctx)
		d.expiryKnown = false
		d.record(ctx, []activities.OutcomeUpdate{{EventID: head.Event.ID, Seq: head.Event.Seq,
			Status: activities.RowQueued, Restart: true}}, entry)
		return OpResult{Changed: true, Requeued: []string{head.Event.ID}}
	}
	ids := s.EventIDs
	if s.EventID != "" {
		ids = append([]string{s.EventID}, ids...)
	}
	var fresh []string
	refused := map[string]reason.Code{}
	for _, id := range ids {
		if d.find(id) >= 0 {
			refused[id] = reason.AlreadyQueued
		} else {
			fresh = append(fresh, id)
		}
	}
	var res activities.RequeueResult
	if len(fresh) > 0 {
		in := activities.RequeueInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey, EventIDs: fresh}
		if err := workflow.ExecuteActivity(d.shortActivity(ctx), (*activities.Activities).Requeue, in).Get(ctx, &res); err != nil {
			d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "failed", string(reason.RequeueFailed), s.EventID,
				map[string]any{payload.MetaReason: s.Reason, payload.MetaCount: len(fresh), payload.MetaError: err.Error()})
			return OpResult{Reason: reason.RequeueFailed}
		}
	}
	// Copying into another map: the order does not matter.
	//workflowcheck:ignore
	for id, why := range res.Refused {
		refused[id] = why
	}
	// In front of every queued event, after earlier redeliveries and the
	// delivery in flight, in sequence order.
	pos := d.inflight
	for pos < len(d.Queue) && d.Queue[pos].Event.Again {
		pos++
	}
	now := workflow.Now(ctx)
	result := OpResult{Changed: len(res.Events) > 0}
	for _, ev := range res.Events {
		ev.Again = true
		d.insert(pos, QueueItem{Event: ev, QueuedAt: now})
		result.Requeued = append(result.Requeued, ev.ID)
		pos++
	}
	meta := map[string]any{payload.MetaReason: s.Reason, payload.MetaAgain: true, payload.MetaCount: len(res.Events)}
	if len(refused) > 0 {
		meta[payload.MetaRefused] = refused
		result.Refused = refused
	}
	outcome, code, eventID := "allowed", "", s.EventID
	if len(res.Events) == 0 {
		// The first named id's reason: one id, or a window none of which
		// could be queued (in request order: map order is not deterministic).
		result.Reason = refused[ids[0]]
		outcome, code = "failed", string(result.Reason)
	}
	if len(res.Events) == 1 {
		eventID = res.Events[0].ID
		meta[payload.MetaSeq] = res.Events[0].Seq
	}
	d.audit(ctx, AuditDeliveryRedelivered, s.Actor, outcome, code, eventID, meta)
	return result
}

// stuck reports whether the head is held or waiting, so an operator's
// redeliver or cancel has something to act on.
func (d *delivery) stuck(head *QueueItem) bool {
	return head.Failed || head.Attempts > 0 || !d.WaitUntil.IsZero()
}

// freshAttempts gives the head a new set of attempts, now.
func (d *delivery) freshAttempts(head *QueueItem) {
	head.Failed = false
	head.FailedAt = time.Time{}
	head.Attempts = 0
	head.NotBefore = time.Time{}
	head.NextAttemptAt = time.Time{}
	d.WaitUntil = time.Time{}
	d.Unreachable = 0
}

func (d *delivery) onCancel(ctx workflow.Context, s CancelSignal) OpResult {
	meta := map[string]any{payload.MetaReason: s.Reason}
	var rows []activities.OutcomeUpdate
	var eventID string
	switch {
	case s.All:
		rows = d.cancelAll(ctx, activities.RowCancelled, "")
		backlog := d.dropBacklog(ctx, activities.RowCancelled, "")
		meta[payload.MetaCount] = len(rows) + backlog
		meta[payload.MetaAll] = true
		if len(rows)+backlog == 0 {
			d.audit(ctx, AuditDeliveryCancelled, s.Actor, "failed", string(reason.NothingQueued), "", meta)
			return OpResult{Reason: reason.NothingQueued}
		}
	case s.EventID != "":
		i := d.find(s.EventID)
		if i < 0 {
			d.audit(ctx, AuditDeliveryCancelled, s.Actor, "failed", string(reason.EventNotQueued), s.EventID, meta)
			return OpResult{Reason: reason.EventNotQueued}
		}
		rows = append(rows, d.cancelAt(ctx, i, activities.RowCancelled, ""))
		eventID = s.EventID
	default:
		head := d.head()
		if head == nil || !d.stuck(head) {
			d.audit(ctx, AuditDeliveryCancelled, s.Actor, "failed", string(reason.NoFailedHead), "", meta)
			return OpResult{Reason: reason.NoFailedHead}
		}
		eventID = head.Event.ID
		rows = append(rows, d.cancelAt(ctx, 0, activities.RowCancelled, ""))
	}
	d.record(ctx, rows, d.auditEntry(ctx, AuditDeliveryCancelled, s.Actor, "allowed", "", eventID, meta))
	res := OpResult{Changed: true}
	for i := len(rows) - 1; i >= 0; i-- { // cancelAll drops from the back
		res.Cancelled = append(res.Cancelled, rows[i].EventID)
	}
	if !s.All {
		res.Cancelled = []string{rows[0].EventID}
	}
	return res
}

// onSubscription applies the worker's word that the subscription is gone,
// once the database confirms it: the signal alone proves nothing.
func (d *delivery) onSubscription(ctx workflow.Context, s SubscriptionSignal) OpResult {
	if s.State != activities.SubscriptionCancelled {
		return OpResult{Reason: reason.UnknownState}
	}
	var state string
	err := workflow.ExecuteActivity(d.shortActivity(ctx), (*activities.Activities).SubscriptionState, d.p.SubscriptionID).Get(ctx, &state)
	if err != nil || state != activities.SubscriptionCancelled {
		d.audit(ctx, AuditSignalRejected, "", "failed", activities.CodeSignalRejected, "",
			map[string]any{payload.MetaSignal: SignalSubscription, payload.MetaReason: reason.SubscriptionNotCancelled, payload.MetaState: state})
		return OpResult{Reason: reason.SubscriptionNotCancelled}
	}
	d.removed(ctx, activities.CodeSubscriptionRemoved)
	return OpResult{Changed: true}
}

// removed drops the whole queue of a removed subscription, audits it and
// ends the workflow.
func (d *delivery) removed(ctx workflow.Context, reason string) {
	rows := d.cancelAll(ctx, activities.RowCancelled, activities.CodeSubscriptionRemoved)
	backlog := d.dropBacklog(ctx, activities.RowCancelled, activities.CodeSubscriptionRemoved)
	d.record(ctx, rows, d.auditEntry(ctx, AuditDeliveryCancelled, "", "allowed", activities.CodeSubscriptionRemoved, "",
		map[string]any{payload.MetaCount: len(rows) + backlog, payload.MetaReason: reason}))
	d.completed = true
}

// PausedIdleChange is the version of a paused run with nothing queued:
// before it, the run waited for an operator with no timer, so one whose
// subscription was removed never ended (the removal deletes the keys'
// pauses, and its sweep tells only keys that hold events). At
// PausedIdleVersion it looks again after each idle period
// (lookWhilePaused). Asked only at that moment, so runs recorded before it
// replay as they ran.
const PausedIdleChange = "paused-idle"

// PausedIdleVersion is the PausedIdleChange version that looks again.
const PausedIdleVersion = 1

// pausedRunsLook reports whether a paused run with nothing queued looks at
// its rows and subscription after each idle period (PausedIdleChange).
func (d *delivery) pausedRunsLook(ctx workflow.Context) bool {
	return d.fromLog &&
		workflow.GetVersion(ctx, PausedIdleChange, workflow.DefaultVersion, PausedIdleVersion) >= PausedIdleVersion
}

// lookWhilePaused reads the key's rows and its subscription's state when a
// paused run has waited an idle period with nothing queued. A removed
// subscription: the run drops what it holds, is audited as a removed
// subscription's key and completes (d.completed). Rows owed are queued,
// and the run goes on paused. Otherwise it waits another idle period: it
// holds the key paused, and shows among the running keys as paused, until
// an operator resumes it.
func (d *delivery) lookWhilePaused(ctx workflow.Context) {
	if !d.owesNothing(ctx) {
		return // rows queued behind the pause, or the read failed
	}
	var state string
	if err := workflow.ExecuteActivity(d.shortActivity(ctx), (*activities.Activities).SubscriptionState, d.p.SubscriptionID).Get(ctx, &state); err != nil {
		d.logger.Warn("read the paused key's subscription", "error", err)
		d.wait(ctx, workflow.Now(ctx).Add(5*time.Second))
		return
	}
	if state == activities.SubscriptionCancelled {
		d.removed(ctx, activities.CodeSubscriptionRemoved)
		return
	}
	if d.pauseRowLooks(ctx) && d.pauseRowGone(ctx) {
		return // idle as a resumed key: it completes once the rows agree
	}
	d.idleSince = workflow.Now(ctx) // another idle period, then look again
}

// PauseRowChange is the version of a paused run that reads its key's
// paused_keys row after each idle period, with or without a queue, and
// lets the key go when the row is gone: the operator's resume that
// deleted it reached another run, or a run this one was reset from
// (pauseRowGone). Asked only by a paused run, so runs recorded before it
// replay as they were.
const PauseRowChange = "pause-row"

// PauseRowVersion is the PauseRowChange version that reads the row.
const PauseRowVersion = 1

// PauseAgainChange is the version of a run that, paused, reads its key's
// paused_keys row when an operator pauses it again, and takes the pause
// again when the row is gone (onPause). Asked only then.
const PauseAgainChange = "pause-again"

// PauseAgainVersion is the PauseAgainChange version that reads the row.
const PauseAgainVersion = 1

// pausesAgain reports whether this paused run reads its row on a pause
// (PauseAgainChange).
func (d *delivery) pausesAgain(ctx workflow.Context) bool {
	return d.fromLog &&
		workflow.GetVersion(ctx, PauseAgainChange, workflow.DefaultVersion, PauseAgainVersion) >= PauseAgainVersion
}

// RowsPauseChange is the version of a run that holds its key paused when a
// Deliver execution found the key's paused_keys row (DeliverResult.KeyPaused).
// Asked only on such a result: a worker built before it, in a rolling
// upgrade, read the result as a database that did not answer and looked
// again soon, and its history replays so.
const RowsPauseChange = "rows-pause"

// RowsPauseVersion is the RowsPauseChange version that holds the key paused.
const RowsPauseVersion = 1

// SlowAppChange is the version of a run that waits out the RetryAfter of a
// limited Deliver result (the worker holds back an app whose POSTs time
// out: activities.SlowAppPosts) before its next execution. Asked only on
// such a result.
const SlowAppChange = "slow-app"

// SlowAppVersion is the SlowAppChange version that waits.
const SlowAppVersion = 1

// pauseRowLooks reports whether this paused run reads its pause row
// (PauseRowChange).
func (d *delivery) pauseRowLooks(ctx workflow.Context) bool {
	return d.fromLog &&
		workflow.GetVersion(ctx, PauseRowChange, workflow.DefaultVersion, PauseRowVersion) >= PauseRowVersion
}

// waitPaused waits while a paused run holds a queue: until a signal or
// an Update, the queue's next hold expiry, or the end of an idle period,
// when it reads the key's pause row (pauseRowGone).
func (d *delivery) waitPaused(ctx workflow.Context) {
	now := workflow.Now(ctx)
	if d.pauseLookAt.IsZero() {
		d.pauseLookAt = now.Add(d.p.IdleTimeout)
	}
	d.wait(ctx, earliest(d.nextExpiry(), d.pauseLookAt))
	if workflow.Now(ctx).Before(d.pauseLookAt) || d.settleHandlers(ctx) > 0 || !d.KeyPaused {
		return
	}
	d.pauseLookAt = time.Time{}
	d.pauseRowGone(ctx)
}

// pauseRowMissing reads the key's paused_keys row and reports whether
// there is none; a read that fails reports false.
func (d *delivery) pauseRowMissing(ctx workflow.Context) bool {
	in := activities.QueueInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey, WithPause: true}
	var q activities.QueueResult
	if err := workflow.ExecuteLocalActivity(queueReadOptions(ctx), keyQueueActivity, in).Get(ctx, &q); err != nil {
		d.logger.Warn("read the paused key's pause row", "error", err)
		return false
	}
	return !q.Paused
}

// pauseRowGone reads the key's paused_keys row for a run that holds the
// key paused. The row is the pause: with none, the run lets the key go as
// a resume would (the resume that deleted the row wrote its audit row) and
// reports true; a read that fails changes nothing. No pause or resume can
// come while the read is under way: operator actions apply in the main
// loop, which this read holds.
func (d *delivery) pauseRowGone(ctx workflow.Context) bool {
	if !d.pauseRowMissing(ctx) {
		return false
	}
	d.logger.Warn("the key's paused_keys row is gone; letting the key go")
	d.KeyPaused = false
	d.pauses++
	d.Rearms = 0 // as a resume restores the automatic re-arms
	return true
}

func (d *delivery) onPause(ctx workflow.Context, s ControlSignal) OpResult {
	if d.KeyPaused && !(d.pausesAgain(ctx) && d.pauseRowMissing(ctx)) {
		return OpResult{Reason: reason.AlreadyPaused}
	}
	// Not paused; or paused in this run's memory alone (its row is gone:
	// the resume that deleted it reached a run this one was reset from),
	// which the next look would let go: the pause is taken again, row and
	// audit row, as the operator asked.
	d.KeyPaused = true
	d.pauses++
	d.audit(ctx, AuditDeliveryPaused, s.Actor, "allowed", "", "", map[string]any{payload.MetaReason: s.Reason})
	return OpResult{Changed: true}
}

func (d *delivery) onResume(ctx workflow.Context, s ControlSignal) OpResult {
	wasPaused := d.KeyPaused
	d.KeyPaused = false
	d.pauses++
	// A resume also re-checks a blocked or paused subscription at once.
	rechecked := false
	if (d.WaitStatus == StatusBlocked || d.WaitStatus == StatusPaused) && !d.WaitUntil.IsZero() {
		d.WaitUntil = time.Time{}
		rechecked = true
	}
	// A key paused in its rows alone: forgetPause deletes the row and
	// writes the audit row with it.
	if !wasPaused && !d.forgetPause(ctx, s) && !rechecked {
		return OpResult{Reason: reason.NotPaused}
	}
	d.Rearms = 0 // a resume restores the automatic re-arms
	if wasPaused {
		d.audit(ctx, AuditDeliveryResumed, s.Actor, "allowed", "", "", map[string]any{payload.MetaReason: s.Reason})
	}
	return OpResult{Changed: true}
}

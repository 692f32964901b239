package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/reason"
)

// Audit actions written by the delivery workflow.
const (
	AuditDeliveryFailed      = "delivery.failed"
	AuditDeliveryRedelivered = "delivery.redelivered"
	AuditDeliveryCancelled   = "delivery.cancelled"
	AuditDeliveryRearmed     = "delivery.rearmed"
	AuditDeliveryPaused      = "delivery.paused"
	AuditDeliveryResumed     = "delivery.resumed"
	// AuditSignalRejected: a signal named an event that is not accepted for
	// this key (error code signal_rejected, the reason in the metadata).
	AuditSignalRejected = "delivery.signal_rejected"
)

// addSignals lets sel handle any one signal.
func (d *delivery) addSignals(ctx workflow.Context, sel workflow.Selector) {
	sel.AddReceive(d.channels.event, func(c workflow.ReceiveChannel, _ bool) {
		var s EventSignal
		c.Receive(ctx, &s)
		d.onEvent(ctx, s)
	})
	sel.AddReceive(d.channels.attempt, func(c workflow.ReceiveChannel, _ bool) {
		var r activities.AttemptReport
		c.Receive(ctx, &r)
		d.onAttempt(ctx, r)
	})
	sel.AddReceive(d.channels.reachable, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		d.onReachable()
	})
	sel.AddReceive(d.channels.subscription, func(c workflow.ReceiveChannel, _ bool) {
		var s SubscriptionSignal
		c.Receive(ctx, &s)
		d.submit(ctx, d.subscriptionOp(s))
	})
	sel.AddReceive(d.channels.redeliver, func(c workflow.ReceiveChannel, _ bool) {
		var s RedeliverSignal
		c.Receive(ctx, &s)
		d.operatorSignal(ctx, SignalRedeliver, validateRedeliver(ctx, s), d.redeliverOp(s))
	})
	sel.AddReceive(d.channels.cancel, func(c workflow.ReceiveChannel, _ bool) {
		var s CancelSignal
		c.Receive(ctx, &s)
		d.operatorSignal(ctx, SignalCancel, validateCancel(ctx, s), d.cancelOp(s))
	})
	sel.AddReceive(d.channels.pause, func(c workflow.ReceiveChannel, _ bool) {
		var s ControlSignal
		c.Receive(ctx, &s)
		d.operatorSignal(ctx, SignalPause, validateControl(ctx, s), d.pauseOp(s))
	})
	sel.AddReceive(d.channels.resume, func(c workflow.ReceiveChannel, _ bool) {
		var s ControlSignal
		c.Receive(ctx, &s)
		d.operatorSignal(ctx, SignalResume, validateControl(ctx, s), d.resumeOp(s))
	})
	sel.AddReceive(d.updates, func(c workflow.ReceiveChannel, _ bool) {
		var o *op
		c.Receive(ctx, &o)
		d.submit(ctx, o)
	})
}

// drain handles every signal already received, without blocking, and returns
// how many there were. It runs before completing or continuing-as-new so that
// no signal is ever lost.
func (d *delivery) drain(ctx workflow.Context) int {
	n := 0
	for {
		sel := workflow.NewSelector(ctx)
		d.addSignals(ctx, sel)
		// With a default, Select never blocks: it runs a ready receive or the default.
		sel.AddDefault(func() {})
		before := d.signals
		sel.Select(ctx)
		if d.signals == before {
			return n
		}
		n++
	}
}

// aboutHead reports whether a signal naming eventID (or none) concerns the head.
func (d *delivery) aboutHead(eventID string) bool {
	head := d.head()
	return eventID == "" || (head != nil && head.Event.ID == eventID)
}

func (d *delivery) onEvent(ctx workflow.Context, s EventSignal) {
	d.signals++
	if d.fromLog {
		d.claim(s)
		return
	}
	now := workflow.Now(ctx)
	// Keyed by id and seq: a forged copy of an event with a wrong seq must
	// not shadow the genuine one (it is rejected when its turn comes).
	type idSeq struct {
		id  string
		seq int64
	}
	queued := make(map[idSeq]bool, len(d.Queue)+len(s.Events))
	for _, it := range d.Queue {
		queued[idSeq{it.Event.ID, it.Event.Seq}] = true
	}
	normal := -1 // counted when first needed
	for _, ev := range s.Events {
		k := idSeq{ev.ID, ev.Seq}
		if queued[k] || d.recent[ev.ID] {
			continue // a re-sent event: the relay may send again after a crash
		}
		if d.Backlog {
			continue // its outcome row is queued: read back in order with the backlog
		}
		if normal < 0 {
			normal = d.normalQueued()
		}
		if normal >= d.p.MaxQueue {
			// The queue is full: from here on the key's events stay in
			// PostgreSQL (the relay wrote their rows before signalling) and
			// are read back in order as the queue drains.
			d.Backlog, d.BacklogAfter = true, d.lastNormalSeq()
			continue
		}
		normal++
		queued[k] = true
		// Anything else is queued as it came; the deliver activity checks
		// it against the event log before anything is sent, skips what is
		// already settled and rejects what is not this key's.
		ev.Again = false
		d.insert(d.insertPos(ev.Seq), QueueItem{Event: ev, QueuedAt: now})
	}
}

// lastNormalSeq is the highest seq of the queued events that are not
// redeliveries.
func (d *delivery) lastNormalSeq() int64 {
	var last int64
	for i := range d.Queue {
		if !d.Queue[i].Event.Again && d.Queue[i].Event.Seq > last {
			last = d.Queue[i].Event.Seq
		}
	}
	return last
}

// dropBacklog settles the backlog too (cancel --all, removal) and returns
// how many events it held.
func (d *delivery) dropBacklog(ctx workflow.Context, status, code string) int {
	if !d.Backlog && !d.mayHaveUnsignalled(ctx) {
		return 0
	}
	in := activities.BacklogInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey,
		After: d.BacklogAfter, Status: status, Code: code}
	var n int
	if err := workflow.ExecuteActivity(d.shortActivity(ctx), (*activities.Activities).DropBacklog, in).Get(ctx, &n); err != nil {
		d.logger.Warn("drop the backlog", "error", err)
		return 0
	}
	d.Backlog = false
	d.Counters.Cancelled += n
	return n
}

// insertPos is where an event with this sequence number goes: in sequence
// order, behind operators' redeliveries, and never in front of the head or
// of the events a delivery in flight covers.
func (d *delivery) insertPos(seq int64) int {
	n := len(d.Queue)
	if n > 0 && n > d.inflight && !d.Queue[n-1].Event.Again && d.Queue[n-1].Event.Seq < seq {
		return n // the usual case: the relay sends a key's events in order
	}
	i := 0
	if n > 0 {
		i = max(1, d.inflight)
		if d.fromLog && d.inflight == 0 && d.untouched(&d.Queue[0]) {
			i = 0 // a head nothing was sent of yet is no head to keep
		}
	}
	for i < len(d.Queue) && (d.Queue[i].Event.Again || d.Queue[i].Event.Seq < seq) {
		i++
	}
	return i
}

// untouched reports whether nothing of the head was sent or decided yet:
// no attempt, no failure, no wait, no local attempt.
func (d *delivery) untouched(head *QueueItem) bool {
	return head.Attempts == 0 && !head.Failed && head.NotBefore.IsZero() && !head.Event.Again &&
		d.localTried != head.Event.ID
}

// insert puts it at position i of the queue.
func (d *delivery) insert(i int, it QueueItem) {
	d.Queue = append(d.Queue, QueueItem{})
	copy(d.Queue[i+1:], d.Queue[i:])
	d.Queue[i] = it
	if d.expiryKnown && d.expiryAt.IsZero() {
		d.expiryAt = it.QueuedAt.Add(d.p.HoldExpiry)
	}
}

func (d *delivery) onAttempt(ctx workflow.Context, r activities.AttemptReport) {
	d.signals++
	head := d.head()
	// Only the activity's own report for the head counts; a forged one
	// could not make the retry policy unbounded.
	if head == nil || head.Event.ID != r.EventID || r.Attempt < 1 || r.Attempt >= d.p.MaxAttempts() {
		return
	}
	head.Attempts = r.Attempt
	d.noteFailedAttempts(r.Attempt)
	head.Code, head.LastCode = r.Code, r.Code
	head.LastError = r.Error
	head.NextAttemptAt = r.NextAttemptAt
	if !r.NextAttemptAt.IsZero() {
		d.setStatus(ctx, StatusRetrying)
	}
	d.refreshDetails(ctx)
}

// onReachable ends an unreachable subscriber's back-off: a delivery to the
// same app has just gone through.
func (d *delivery) onReachable() {
	d.signals++
	if d.WaitStatus == StatusUnreachable && !d.WaitUntil.IsZero() {
		d.WaitUntil = time.Time{}
		d.Unreachable = 0
	}
}

func (d *delivery) onRedeliver(ctx workflow.Context, s RedeliverSignal) OpResult {
	head := d.head()
	if len(s.EventIDs) == 0 && (s.EventID == "" || (head != nil && head.Event.ID == s.EventID)) {
		if head == nil || !d.stuck(head) {
			d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "failed", string(reason.NothingToRedeliver), s.EventID, map[string]any{"reason": s.Reason})
			return OpResult{Reason: reason.NothingToRedeliver}
		}
		d.freshAttempts(head)
		d.Rearms = 0 // an operator's redeliver restores the automatic re-arms
		entry := d.auditEntry(ctx, AuditDeliveryRedelivered, s.Actor, "allowed", "", head.Event.ID,
			map[string]any{"reason": s.Reason, "seq": head.Event.Seq})
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
				map[string]any{"reason": s.Reason, "count": len(fresh), "error": err.Error()})
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
	meta := map[string]any{"reason": s.Reason, "again": true, "count": len(res.Events)}
	if len(refused) > 0 {
		meta["refused"] = refused
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
		meta["seq"] = res.Events[0].Seq
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
	meta := map[string]any{"reason": s.Reason}
	var rows []activities.OutcomeUpdate
	var eventID string
	switch {
	case s.All:
		rows = d.cancelAll(ctx, activities.RowCancelled, "")
		backlog := d.dropBacklog(ctx, activities.RowCancelled, "")
		meta["count"] = len(rows) + backlog
		meta["all"] = true
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

// cancelAt drops item i as cancelled or expired and returns its outcome row.
func (d *delivery) cancelAt(ctx workflow.Context, i int, status, code string) activities.OutcomeUpdate {
	it := d.Queue[i]
	d.Queue = append(d.Queue[:i], d.Queue[i+1:]...)
	d.Counters.Cancelled++
	if code == "" {
		code = it.Code
	}
	d.outcome(ctx, it, status, code)
	if i == 0 {
		d.WaitUntil = time.Time{}
		d.Unreachable = 0
		d.Rearms = 0
	}
	return activities.OutcomeUpdate{EventID: it.Event.ID, Seq: it.Event.Seq, Status: status, Code: code}
}

// cancelAll drops every queued event and returns their outcome rows.
func (d *delivery) cancelAll(ctx workflow.Context, status, code string) []activities.OutcomeUpdate {
	rows := make([]activities.OutcomeUpdate, 0, len(d.Queue))
	for len(d.Queue) > 0 {
		rows = append(rows, d.cancelAt(ctx, len(d.Queue)-1, status, code))
	}
	return rows
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
			map[string]any{"signal": SignalSubscription, "reason": reason.SubscriptionNotCancelled, "state": state})
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
		map[string]any{"count": len(rows) + backlog, "reason": reason}))
	d.completed = true
}

// nextExpiry is when the oldest queued event expires (zero when none is
// queued). The answer is cached: events are queued later than those before
// them, so only removals move it, and a stale, earlier answer only costs a
// wake-up that finds nothing.
func (d *delivery) nextExpiry() time.Time {
	if !d.expiryKnown {
		d.expiryAt = time.Time{}
		for _, it := range d.Queue {
			d.expiryAt = earliest(d.expiryAt, it.QueuedAt.Add(d.p.HoldExpiry))
		}
		d.expiryKnown = true
	}
	return d.expiryAt
}

// expire cancels, as retention_expired, every event held longer than the
// hold expiry.
func (d *delivery) expire(ctx workflow.Context, now time.Time) {
	if at := d.nextExpiry(); at.IsZero() || now.Before(at) {
		return
	}
	var rows []activities.OutcomeUpdate
	for i := 0; i < len(d.Queue); {
		if now.Before(d.Queue[i].QueuedAt.Add(d.p.HoldExpiry)) {
			i++
			continue
		}
		rows = append(rows, d.cancelAt(ctx, i, activities.RowExpired, activities.CodeRetentionExpired))
	}
	d.expiryKnown = false
	if len(rows) == 0 {
		return
	}
	ids := make([]string, 0, min(len(rows), 20))
	for _, r := range rows[:min(len(rows), 20)] {
		ids = append(ids, r.EventID)
	}
	d.record(ctx, rows, d.auditEntry(ctx, AuditDeliveryCancelled, "", "allowed", activities.CodeRetentionExpired, "",
		map[string]any{"count": len(rows), "eventIds": ids, "holdExpiry": d.p.HoldExpiry.String()}))
}

func (d *delivery) onPause(ctx workflow.Context, s ControlSignal) OpResult {
	if d.KeyPaused {
		return OpResult{Reason: reason.AlreadyPaused}
	}
	d.KeyPaused = true
	d.audit(ctx, AuditDeliveryPaused, s.Actor, "allowed", "", "", map[string]any{"reason": s.Reason})
	return OpResult{Changed: true}
}

func (d *delivery) onResume(ctx workflow.Context, s ControlSignal) OpResult {
	wasPaused := d.KeyPaused
	d.KeyPaused = false
	// A resume also re-checks a blocked or paused subscription at once.
	rechecked := false
	if (d.WaitStatus == StatusBlocked || d.WaitStatus == StatusPaused) && !d.WaitUntil.IsZero() {
		d.WaitUntil = time.Time{}
		rechecked = true
	}
	if !wasPaused && !rechecked {
		return OpResult{Reason: reason.NotPaused}
	}
	d.Rearms = 0 // a resume restores the automatic re-arms
	if wasPaused {
		d.audit(ctx, AuditDeliveryResumed, s.Actor, "allowed", "", "", map[string]any{"reason": s.Reason})
	}
	return OpResult{Changed: true}
}

func (d *delivery) rearm(ctx workflow.Context, head *QueueItem) {
	d.Rearms++
	d.Counters.Rearms++
	d.freshAttempts(head)
	d.rearmed = head.Event.ID // its row still says failed (holding)
	d.audit(ctx, AuditDeliveryRearmed, "", "allowed", "", head.Event.ID, map[string]any{"rearm": d.Rearms, "max": d.p.MaxRearms})
}

// findSeq is the position of the queued event with this id and seq, or -1;
// a zero seq (a result recorded before results carried it) matches by id.
func (d *delivery) findSeq(id string, seq int64) int {
	if seq == 0 {
		return d.find(id)
	}
	for i := range d.Queue {
		if d.Queue[i].Event.ID == id && d.Queue[i].Event.Seq == seq {
			return i
		}
	}
	return -1
}

func (d *delivery) find(id string) int {
	for i := range d.Queue {
		if d.Queue[i].Event.ID == id {
			return i
		}
	}
	return -1
}

package workflows

import (
	"encoding/json"
	"sort"
	"time"

	"go.temporal.io/sdk/workflow"

	"herald/activities"
)

// Audit actions written by the delivery workflow.
const (
	AuditDeliveryFailed      = "delivery.failed"
	AuditDeliveryRedelivered = "delivery.redelivered"
	AuditDeliveryCancelled   = "delivery.cancelled"
	AuditDeliveryRearmed     = "delivery.rearmed"
	AuditDeliveryPaused      = "delivery.paused"
	AuditDeliveryResumed     = "delivery.resumed"
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
	sel.AddReceive(d.channels.redeliver, func(c workflow.ReceiveChannel, _ bool) {
		var s RedeliverSignal
		c.Receive(ctx, &s)
		d.control(ctx, d.aboutHead(s.EventID), func(ctx workflow.Context) { d.onRedeliver(ctx, s) })
	})
	sel.AddReceive(d.channels.cancel, func(c workflow.ReceiveChannel, _ bool) {
		var s CancelSignal
		c.Receive(ctx, &s)
		d.control(ctx, s.All || d.aboutHead(s.EventID), func(ctx workflow.Context) { d.onCancel(ctx, s) })
	})
	sel.AddReceive(d.channels.pause, func(c workflow.ReceiveChannel, _ bool) {
		var s ControlSignal
		c.Receive(ctx, &s)
		d.control(ctx, true, func(ctx workflow.Context) { d.onPause(ctx, s) })
	})
	sel.AddReceive(d.channels.resume, func(c workflow.ReceiveChannel, _ bool) {
		var s ControlSignal
		c.Receive(ctx, &s)
		d.control(ctx, false, func(ctx workflow.Context) { d.onResume(ctx, s) })
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

// control runs an operator signal now, or after the delivery in flight ends,
// so an activity's result is never applied to a queue changed under it. A
// signal about a head that is retrying (redeliver, cancel, pause) interrupts
// the activity's retries instead of waiting out the schedule; the attempt
// under way, if any, still ends first, so order is kept.
func (d *delivery) control(ctx workflow.Context, aboutHead bool, fn func(workflow.Context)) {
	d.signals++
	if !d.inActivity {
		fn(ctx)
		return
	}
	d.deferred = append(d.deferred, fn)
	if head := d.head(); aboutHead && head != nil && head.Attempts > 0 && d.cancelActivity != nil {
		d.cancelActivity()
	}
}

// aboutHead reports whether a signal naming eventID (or none) concerns the head.
func (d *delivery) aboutHead(eventID string) bool {
	head := d.head()
	return eventID == "" || (head != nil && head.Event.ID == eventID)
}

func (d *delivery) onEvent(ctx workflow.Context, s EventSignal) {
	d.signals++
	added := false
	for _, ev := range s.Events {
		if ev.Seq <= d.LastSeq || d.find(ev.ID) >= 0 {
			continue // a re-sent event: the relay may send again after a crash
		}
		if ev.Type == "" {
			ev.Type = envelopeType(ev.Envelope)
		}
		d.Queue = append(d.Queue, QueueItem{Event: ev})
		d.LastSeq = ev.Seq
		added = true
	}
	if added && !sort.SliceIsSorted(d.Queue, d.lessSeq) {
		// Only an operator's redelivery sits out of sequence order, in front.
		sort.SliceStable(d.Queue, d.lessSeq)
	}
}

// lessSeq orders redeliveries first, then by sequence.
func (d *delivery) lessSeq(i, j int) bool {
	a, b := d.Queue[i], d.Queue[j]
	if a.Redelivery != b.Redelivery {
		return a.Redelivery
	}
	if a.Redelivery {
		return false // keep operators' order among redeliveries
	}
	return a.Event.Seq < b.Event.Seq
}

func (d *delivery) onAttempt(ctx workflow.Context, r activities.AttemptReport) {
	d.signals++
	head := d.head()
	if head == nil || head.Event.ID != r.EventID {
		return
	}
	head.Attempts = r.Attempt
	head.Code = r.Code
	head.LastError = r.Error
	head.NextAttemptAt = r.NextAttemptAt
	if !r.NextAttemptAt.IsZero() {
		d.setStatus(ctx, StatusRetrying)
	}
}

func (d *delivery) onRedeliver(ctx workflow.Context, s RedeliverSignal) {
	head := d.head()
	if s.EventID == "" || (head != nil && head.Event.ID == s.EventID) {
		if head == nil || !d.stuck(head) {
			d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "failed", "nothing_to_redeliver", s.EventID, map[string]any{"reason": s.Reason})
			return
		}
		d.freshAttempts(head)
		d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "allowed", "", head.Event.ID,
			map[string]any{"reason": s.Reason, "seq": head.Event.Seq})
		return
	}
	if d.find(s.EventID) >= 0 {
		d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "failed", "already_queued", s.EventID, map[string]any{"reason": s.Reason})
		return
	}
	var ev activities.LoadedEvent
	err := workflow.ExecuteActivity(d.shortActivity(ctx), (*activities.Activities).LoadEvent, s.EventID).Get(ctx, &ev)
	if ev.Event.Type == "" {
		ev.Event.Type = envelopeType(ev.Event.Envelope)
	}
	switch {
	case err != nil:
		d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "failed", "event_not_found", s.EventID, map[string]any{"reason": s.Reason, "error": err.Error()})
		return
	case ev.Event.Type != d.p.EventType || ev.Subject != d.p.SubjectKey:
		d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "failed", "event_not_for_key", s.EventID, map[string]any{"reason": s.Reason})
		return
	}
	// In front of every queued event, after earlier redeliveries.
	pos := 0
	for pos < len(d.Queue) && d.Queue[pos].Redelivery {
		pos++
	}
	it := QueueItem{Event: ev.Event, Redelivery: true}
	d.Queue = append(d.Queue[:pos], append([]QueueItem{it}, d.Queue[pos:]...)...)
	d.audit(ctx, AuditDeliveryRedelivered, s.Actor, "allowed", "", s.EventID, map[string]any{"reason": s.Reason, "seq": ev.Event.Seq, "again": true})
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

func (d *delivery) onCancel(ctx workflow.Context, s CancelSignal) {
	meta := map[string]any{"reason": s.Reason}
	switch {
	case s.All:
		n := d.cancelAll(ctx)
		meta["count"] = n
		meta["all"] = true
		d.audit(ctx, AuditDeliveryCancelled, s.Actor, "allowed", "", "", meta)
	case s.EventID != "":
		i := d.find(s.EventID)
		if i < 0 {
			d.audit(ctx, AuditDeliveryCancelled, s.Actor, "failed", "event_not_queued", s.EventID, meta)
			return
		}
		d.cancelAt(ctx, i)
		d.audit(ctx, AuditDeliveryCancelled, s.Actor, "allowed", "", s.EventID, meta)
	default:
		head := d.head()
		if head == nil || !d.stuck(head) {
			d.audit(ctx, AuditDeliveryCancelled, s.Actor, "failed", "no_failed_head", "", meta)
			return
		}
		id := head.Event.ID
		d.cancelAt(ctx, 0)
		d.audit(ctx, AuditDeliveryCancelled, s.Actor, "allowed", "", id, meta)
	}
}

func (d *delivery) cancelAt(ctx workflow.Context, i int) {
	it := d.Queue[i]
	d.Queue = append(d.Queue[:i], d.Queue[i+1:]...)
	d.Counters.Cancelled++
	d.outcome(ctx, it, "cancelled", it.Code)
	if i == 0 {
		d.WaitUntil = time.Time{}
		d.Unreachable = 0
		d.Rearms = 0
	}
}

func (d *delivery) cancelAll(ctx workflow.Context) int {
	n := len(d.Queue)
	for len(d.Queue) > 0 {
		d.cancelAt(ctx, len(d.Queue)-1)
	}
	return n
}

func (d *delivery) onPause(ctx workflow.Context, s ControlSignal) {
	if d.KeyPaused {
		return
	}
	d.KeyPaused = true
	d.audit(ctx, AuditDeliveryPaused, s.Actor, "allowed", "", "", map[string]any{"reason": s.Reason})
}

func (d *delivery) onResume(ctx workflow.Context, s ControlSignal) {
	wasPaused := d.KeyPaused
	d.KeyPaused = false
	// A resume also re-checks a blocked or paused subscription at once.
	if d.WaitStatus == StatusBlocked || d.WaitStatus == StatusPaused {
		d.WaitUntil = time.Time{}
	}
	if wasPaused {
		d.audit(ctx, AuditDeliveryResumed, s.Actor, "allowed", "", "", map[string]any{"reason": s.Reason})
	}
}

func (d *delivery) rearm(ctx workflow.Context, head *QueueItem) {
	d.Rearms++
	d.Counters.Rearms++
	d.freshAttempts(head)
	d.audit(ctx, AuditDeliveryRearmed, "", "allowed", "", head.Event.ID, map[string]any{"rearm": d.Rearms, "max": d.p.MaxRearms})
}

func (d *delivery) find(id string) int {
	for i := range d.Queue {
		if d.Queue[i].Event.ID == id {
			return i
		}
	}
	return -1
}

// envelopeType reads the CloudEvent type when the relay did not send it.
func envelopeType(env json.RawMessage) string {
	var e struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(env, &e)
	return e.Type
}

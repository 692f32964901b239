package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/workflows/payload"
)

// Audit actions written by the delivery workflow, defined once in payload.
const (
	AuditDeliveryFailed      = payload.AuditDeliveryFailed
	AuditDeliveryRedelivered = payload.AuditDeliveryRedelivered
	AuditDeliveryCancelled   = payload.AuditDeliveryCancelled
	AuditDeliveryRearmed     = payload.AuditDeliveryRearmed
	AuditDeliveryPaused      = payload.AuditDeliveryPaused
	AuditDeliveryResumed     = payload.AuditDeliveryResumed
	// AuditSignalRejected: a signal named an event that is not accepted for
	// this key (error code signal_rejected, the reason in the metadata).
	AuditSignalRejected = payload.AuditSignalRejected
)

// CorruptSignalChange is the workflow.GetVersion change id of how a run
// takes a signal whose payload does not decode into its type: a wrong JSON
// type, sent by hand (`temporal workflow signal --name cancel --input
// '{"all":"true"}'`). Version 1: the signal is dropped with a warning, and
// the run goes on. A run at workflow.DefaultVersion (recorded before it)
// waited, inside its handling of that signal, for the next signal of the
// same name that decodes: nothing else of the run moved meanwhile (no
// timer, no activity's result, no Update), and a key whose operators sent
// no other, or whose relay no longer signals it (a held key), stayed so.
// The version is asked for only when such a signal comes, so a run that
// never gets one records no marker; a run recorded waiting replays waiting.
const CorruptSignalChange = "corrupt-signal"

// CorruptSignalVersion is the CorruptSignalChange version that drops a
// signal that does not decode.
const CorruptSignalVersion = 1

// receive takes into ptr the signal sel found on c, and reports whether it
// decoded; one that does not is dropped (CorruptSignalChange).
func (d *delivery) receive(ctx workflow.Context, c workflow.ReceiveChannel, ptr any) bool {
	if c.ReceiveAsync(ptr) { // it drops values that do not decode, as Receive does
		return true
	}
	if workflow.GetVersion(ctx, CorruptSignalChange, workflow.DefaultVersion, CorruptSignalVersion) < CorruptSignalVersion {
		c.Receive(ctx, ptr) // as recorded: wait for one that decodes
		return true
	}
	d.logger.Warn("a signal whose payload does not decode is dropped", "signal", c.Name())
	return false
}

// addSignals lets sel handle any one signal.
func (d *delivery) addSignals(ctx workflow.Context, sel workflow.Selector) {
	sel.AddReceive(d.channels.event, func(c workflow.ReceiveChannel, _ bool) {
		var s EventSignal
		if d.receive(ctx, c, &s) {
			d.onEvent(ctx, s)
		}
	})
	sel.AddReceive(d.channels.attempt, func(c workflow.ReceiveChannel, _ bool) {
		var r activities.AttemptReport
		if d.receive(ctx, c, &r) {
			d.onAttempt(ctx, r)
		}
	})
	sel.AddReceive(d.channels.reachable, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		d.onReachable()
	})
	sel.AddReceive(d.channels.subscription, func(c workflow.ReceiveChannel, _ bool) {
		var s SubscriptionSignal
		if d.receive(ctx, c, &s) {
			d.submit(ctx, d.subscriptionOp(s))
		}
	})
	sel.AddReceive(d.channels.redeliver, func(c workflow.ReceiveChannel, _ bool) {
		var s RedeliverSignal
		if d.receive(ctx, c, &s) {
			d.operatorSignal(ctx, SignalRedeliver, validateRedeliver(ctx, s), d.redeliverOp(s))
		}
	})
	sel.AddReceive(d.channels.cancel, func(c workflow.ReceiveChannel, _ bool) {
		var s CancelSignal
		if d.receive(ctx, c, &s) {
			d.operatorSignal(ctx, SignalCancel, validateCancel(ctx, s), d.cancelOp(s))
		}
	})
	sel.AddReceive(d.channels.pause, func(c workflow.ReceiveChannel, _ bool) {
		var s ControlSignal
		if d.receive(ctx, c, &s) {
			d.operatorSignal(ctx, SignalPause, validateControl(ctx, s), d.pauseOp(s))
		}
	})
	sel.AddReceive(d.channels.resume, func(c workflow.ReceiveChannel, _ bool) {
		var s ControlSignal
		if d.receive(ctx, c, &s) {
			d.operatorSignal(ctx, SignalResume, validateControl(ctx, s), d.resumeOp(s))
		}
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
		// With a default, Select never blocks: it runs a ready receive or
		// the default. A receive that dropped a signal that does not decode
		// (CorruptSignalChange) counts too: what follows it must be taken
		// in, an Update's operation among them. (Every other receive counts
		// in d.signals, which this loop compared until then.)
		none := false
		sel.AddDefault(func() { none = true })
		sel.Select(ctx)
		if none {
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
		d.attemptFailed(ctx)
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

// nothingSignalled reports whether no signal waits in any of the run's
// channels: those that came with its workflow task are in its history, so
// a replay sees the same.
func (d *delivery) nothingSignalled() bool {
	c := d.channels
	for _, ch := range []workflow.ReceiveChannel{c.event, c.redeliver, c.cancel, c.pause, c.resume, c.attempt, c.subscription, c.reachable} {
		if ch.Len() > 0 {
			return false
		}
	}
	return true
}

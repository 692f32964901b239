package workflows

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.temporal.io/sdk/workflow"

	"herald/reason"
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
	d.audit(ctx, action, actor, "failed", string(reason.HeadChanged), pin, map[string]any{"reason": why})
	return OpResult{Reason: reason.HeadChanged}
}

func (d *delivery) pauseOp(s ControlSignal) *op {
	return &op{
		// A key pauses after the delivery in flight; a retrying head is
		// interrupted instead of waiting out its schedule.
		quiet: func() bool { head := d.head(); return head != nil && head.Attempts > 0 },
		apply: func(ctx workflow.Context) OpResult { return d.onPause(ctx, s) },
	}
}

func (d *delivery) resumeOp(s ControlSignal) *op {
	return &op{
		quiet: func() bool { return false },
		apply: func(ctx workflow.Context) OpResult { return d.onResume(ctx, s) },
	}
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
	if !d.inActivity || !o.quiet() {
		d.finish(ctx, o)
		return
	}
	d.deferred = append(d.deferred, o)
	if head := d.head(); head != nil && head.Attempts > 0 && d.cancelActivity != nil {
		d.cancelActivity()
		d.interrupted = true
	}
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

package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// Statuses of a delivery workflow, also its HeraldStatus search attribute.
const (
	StatusIdle        = "idle"
	StatusDelivering  = "delivering"
	StatusRetrying    = "retrying"
	StatusUnreachable = "unreachable"
	StatusFailed      = "failed"
	// StatusExhausted is a failed key whose automatic re-arms are used up:
	// only an operator (redeliver, cancel, resume) moves it on.
	StatusExhausted = "exhausted"
	StatusBlocked   = "blocked"
	StatusPaused    = "paused"
)

func (d *delivery) rearm(ctx workflow.Context, head *QueueItem) {
	d.Rearms++
	d.Counters.Rearms++
	d.freshAttempts(head)
	d.rearmed = head.Event.ID // its row still says failed (holding)
	d.audit(ctx, AuditDeliveryRearmed, "", "allowed", "", head.Event.ID, map[string]any{"rearm": d.Rearms, "max": d.p.MaxRearms})
}

// run is the workflow's event loop: each turn either delivers the head or
// waits for a signal or a timer, according to the key's state.
func (d *delivery) run(ctx workflow.Context) error {
	for {
		// Take in whatever has arrived before deciding: the relay's first
		// signal comes with the start, and the key should not look idle first.
		d.drain(ctx)
		if d.completed {
			d.settleHandlers(ctx)
			return nil
		}
		d.refreshDetails(ctx)
		if d.shouldContinueAsNew(ctx) {
			d.settleHandlers(ctx)
			if len(d.claims) > 0 {
				d.refillFromLog(ctx) // claims are not carried: check them now
			}
			if !d.completed {
				d.setStatus(ctx, d.restingStatus())
				carry := d.Carry
				carry.PrevRun = workflow.GetInfo(ctx).WorkflowExecution.RunID
				next := d.p
				next.Carry = &carry
				return workflow.NewContinueAsNewError(ctx, Delivery, next)
			}
			continue
		}
		if d.fromLog {
			d.noteHeld(ctx)
			d.refillFromLog(ctx)
		} else {
			d.refill(ctx)
		}
		now := workflow.Now(ctx)
		if !d.fromLog || d.loaded {
			// Not before the worker's settings and the rows are read.
			d.expire(ctx, now)
			if d.fromLog && d.heldSeen && !d.holding() {
				// The head it held on expired: the next turn reads what
				// the relay left unsignalled (noteHeld), before it idles.
				continue
			}
		}
		head := d.head()
		switch {
		case d.fromLog && !d.loaded:
			// The outcome rows could not be read: deliver nothing until
			// they are, whatever the signals say.
			d.setStatus(ctx, StatusBlocked)
			d.wait(ctx, now.Add(5*time.Second))
		case d.KeyPaused:
			d.setStatus(ctx, StatusPaused)
			d.wait(ctx, d.nextExpiry())
		case head == nil && d.Backlog:
			// The backlog could not be read (the database did not answer):
			// never idle out with events left in it; look again soon.
			d.wait(ctx, now.Add(5*time.Second))
		case head == nil:
			d.setStatus(ctx, StatusIdle)
			if d.waitIdle(ctx) && d.settleHandlers(ctx) == 0 && d.head() == nil && !d.KeyPaused && d.owesNothing(ctx) {
				return nil
			}
		case head.Failed && d.fromLog && d.checkedHead != head.Event.ID:
			// Once per failed head, its row decides: a run reset to before
			// the head was redelivered or settled must not hold on it.
			d.checkedHead = head.Event.ID
			d.recheckHead(ctx)
		case head.Failed:
			d.setStatus(ctx, d.failedStatus())
			var rearmAt time.Time
			if d.canRearm() {
				rearmAt = head.FailedAt.Add(d.p.RearmCooldown)
			}
			if d.wait(ctx, earliest(rearmAt, d.nextExpiry())) && !rearmAt.IsZero() &&
				!workflow.Now(ctx).Before(rearmAt) && d.head() == head && head.Failed {
				d.rearm(ctx, head)
			}
		case now.Before(d.WaitUntil):
			d.setStatus(ctx, d.WaitStatus)
			if d.wait(ctx, earliest(d.WaitUntil, d.nextExpiry())) && !workflow.Now(ctx).Before(d.WaitUntil) {
				d.WaitUntil = time.Time{}
			}
		default:
			d.deliver(ctx)
		}
	}
}

// earliest is the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// restingStatus is the status shown between runs.
func (d *delivery) restingStatus() string {
	head := d.head()
	switch {
	case d.KeyPaused:
		return StatusPaused
	case head == nil:
		return StatusIdle
	case head.Failed:
		return d.failedStatus()
	case d.WaitStatus != "" && !d.WaitUntil.IsZero():
		return d.WaitStatus
	case head.Attempts > 0:
		return StatusRetrying
	}
	return StatusDelivering
}

// canRearm reports whether a failed head may still re-arm itself.
func (d *delivery) canRearm() bool {
	return d.p.MaxRearms > 0 && d.Rearms < d.p.MaxRearms
}

func (d *delivery) shouldContinueAsNew(ctx workflow.Context) bool {
	return d.signals >= d.p.SignalsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// failedStatus is the status of a key held on a failed head: exhausted
// once its automatic re-arms are used up (ErrorPolicyChange).
func (d *delivery) failedStatus() string {
	if d.errorPolicy && !d.canRearm() {
		return StatusExhausted
	}
	return StatusFailed
}

// setStatus records a status change: the search attributes (status and the
// queue length at that moment) and the current details are upserted on
// changes only, never per event.
func (d *delivery) setStatus(ctx workflow.Context, status string) {
	if status == d.status {
		return
	}
	d.status = status
	if err := workflow.UpsertTypedSearchAttributes(ctx,
		SAStatus.ValueSet(status), SAQueued.ValueSet(int64(len(d.Queue)))); err != nil {
		d.logger.Warn("upsert search attributes failed", "error", err)
	}
	d.refreshDetails(ctx)
}

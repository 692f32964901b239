// This file is the Delivery workflow's state machine: the statuses a key
// can be in, the one function that works out a key's status (keyStatus),
// the transitions, and the run loop that drives them.
//
// A key's status is its HeraldStatus search attribute (upserted on changes
// only, by setStatus; a run started bare writes it, with its identity, the
// first time it shows one: BareStartVersion), the state query's status and
// an operator's answer.
// Each turn of the run loop decides what the key does next and, when it
// waits, sets keyStatus first; three transitions happen inside a turn and
// are named below (attemptStarts, attemptFailed, headFailed):
//
//	to                    when                                            where
//	blocked               its outcome rows could not be read yet          run
//	paused                an operator paused the key                      run
//	idle                  nothing is queued                               run
//	delivering            the head's first attempt starts (an idle key    attemptStarts
//	                      stays idle through a local first attempt:
//	                      FirstAttemptChange; retrying for a head with
//	                      attempts read from the rows: OneMarkerVersion)
//	retrying              an attempt failed and attempts are left         attemptFailed
//	failed, exhausted     the head failed for good (exhausted: its        headFailed, run
//	                      automatic re-arms are used up)
//	unreachable           nothing reached the subscriber: back-off        run (WaitStatus)
//	blocked, paused       the subscription is not active: re-check        run (WaitStatus)
//
// A key leaves failed or exhausted when it re-arms (rearm, after
// RearmCooldown), an operator redelivers or cancels the head, or the head
// expires; it leaves a wait when the wait ends, a signal ends it early
// (reachable, resume), or an operator acts on the head (ops.go). The queue
// (queue.go), expiry (expiry.go) and the operator actions (ops.go) change
// the state keyStatus reads; they never set a status themselves.
package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"herald/workflows/payload"
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
	d.audit(ctx, AuditDeliveryRearmed, "", "allowed", "", head.Event.ID, map[string]any{payload.MetaRearm: d.Rearms, payload.MetaMax: d.p.MaxRearms})
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
				next.Version = NoMarkerVersion
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
		// Each turn that waits shows why first; a turn that acts (reads the
		// backlog or a failed head's row again, delivers) leaves the status
		// to what it does.
		head := d.head()
		status := d.keyStatus(now, atTurn)
		switch {
		case d.fromLog && !d.loaded:
			// The outcome rows could not be read: deliver nothing until
			// they are, whatever the signals say.
			d.setStatus(ctx, status) // blocked
			d.wait(ctx, now.Add(5*time.Second))
		case d.KeyPaused:
			d.setStatus(ctx, status) // paused
			if head == nil && !d.Backlog && d.pausedRunsLook(ctx) {
				// Nothing queued: the run looks again after each idle
				// period (lookWhilePaused). One whose subscription was
				// removed is completed at the loop's top, once handlers
				// that came meanwhile are settled.
				if d.waitIdle(ctx) && d.settleHandlers(ctx) == 0 && d.head() == nil && d.KeyPaused {
					d.lookWhilePaused(ctx)
				}
				continue
			}
			if d.pauseRowLooks(ctx) {
				d.waitPaused(ctx)
				continue
			}
			d.wait(ctx, d.nextExpiry())
		case head == nil && d.Backlog:
			// The backlog could not be read (the database did not answer):
			// never idle out with events left in it; look again soon.
			d.wait(ctx, now.Add(5*time.Second))
		case head == nil:
			// A run nothing signalled ends now if the rows agree
			// (HERALD_END_QUIET_KEYS), in the task that delivered, without
			// an idle timer; any other waits out its idle period first.
			// A bare start (BareStartVersion) ending so shows nothing.
			quiet := d.quiet()
			if !quiet || !d.unshown {
				d.setStatus(ctx, status) // idle (a one-event start already is)
			}
			if (quiet || d.waitIdle(ctx)) && d.settleHandlers(ctx) == 0 && d.head() == nil && !d.KeyPaused && d.owesNothing(ctx) {
				return nil
			}
			if quiet {
				d.endQuiet = false // the key is not quiet after all: idle as usual
			}
		case head.Failed && d.fromLog && d.checkedHead != head.Event.ID:
			// Once per failed head, its row decides: a run reset to before
			// the head was redelivered or settled must not hold on it.
			d.checkedHead = head.Event.ID
			d.recheckHead(ctx)
		case head.Failed:
			d.setStatus(ctx, status) // failed or exhausted
			var rearmAt time.Time
			if d.canRearm() {
				rearmAt = head.FailedAt.Add(d.p.RearmCooldown)
			}
			if d.wait(ctx, earliest(rearmAt, d.nextExpiry())) && !rearmAt.IsZero() &&
				!workflow.Now(ctx).Before(rearmAt) && d.head() == head && head.Failed {
				d.rearm(ctx, head)
			}
		case now.Before(d.WaitUntil):
			d.setStatus(ctx, status) // WaitStatus
			if d.wait(ctx, earliest(d.WaitUntil, d.nextExpiry())) && !workflow.Now(ctx).Before(d.WaitUntil) {
				d.WaitUntil = time.Time{}
			}
		default:
			d.deliver(ctx)
		}
	}
}

// quiet reports whether the run may end without waiting idle: the worker
// or the relay asked for it (Params.EndQuietKeys, Params.Quiet), the relay
// did not start it as busy (Params.Busy), the run has taken no event
// signal, was not continued from another, and has read the key's rows.
// Once it finds rows owed or a signal, it waits idle as any run does.
func (d *delivery) quiet() bool {
	return d.endQuiet && (d.p.EndQuietKeys || d.p.Quiet) && !d.p.Busy && d.fromLog && d.loaded && !d.carried && d.signals == 0
}

// earliest is the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// statusMoment is when keyStatus is asked.
type statusMoment int

const (
	// atTurn: at a turn of the run loop, for what the key waits for now.
	// Outcome rows not read yet hold the key blocked, and a wait whose
	// time has come is over (the turn delivers).
	atTurn statusMoment = iota
	// atRest: between turns, for the next run (continue-as-new), an
	// operator's answer and the current details. A wait not yet acted on
	// still shows.
	atRest
)

// keyStatus works out the key's status from its state: the one function
// that does (the state query shows the status last set: queryStatus).
func (d *delivery) keyStatus(now time.Time, at statusMoment) string {
	head := d.head()
	switch {
	case at == atTurn && d.fromLog && !d.loaded:
		return StatusBlocked
	case d.KeyPaused:
		return StatusPaused
	case head == nil:
		return StatusIdle
	case head.Failed:
		return d.failedStatus()
	// WaitStatus is set whenever WaitUntil is (applyResult).
	case d.WaitStatus != "" && !d.WaitUntil.IsZero() && (at == atRest || now.Before(d.WaitUntil)):
		return d.WaitStatus
	case head.Attempts > 0:
		return StatusRetrying
	}
	return StatusDelivering
}

// restingStatus is the key's status between turns (keyStatus atRest).
func (d *delivery) restingStatus() string {
	return d.keyStatus(time.Time{}, atRest)
}

// queryStatus is the status the state query answers: the one last set,
// except that a key that stays idle through a first attempt
// (FirstAttemptChange) says it is delivering.
func (d *delivery) queryStatus() string {
	if d.status == StatusIdle && d.inActivity {
		return StatusDelivering
	}
	return d.status
}

// holdsQueue reports whether the head holds the events behind it (the
// state query names it as what they wait behind): any status but
// delivering and idle.
func (d *delivery) holdsQueue() bool {
	return d.status != StatusDelivering && d.status != StatusIdle
}

// attemptStarts is the transition as a Deliver execution starts: a head's
// first attempt shows delivering, except that an idle key stays idle
// through a local first attempt (FirstAttemptChange). Runs before
// OneMarkerVersion stayed idle through any first execution, local or not;
// at it, a regular one (app limits, a local attempt that ended without a
// result, a head with attempts read from the rows) shows delivering, or
// retrying for a head with attempts, since it may wait for seconds.
func (d *delivery) attemptStarts(ctx workflow.Context, head *QueueItem, local bool) {
	switch {
	case d.oneMarker && d.status == StatusIdle && local:
	case d.oneMarker && d.status == StatusIdle && head.Attempts > 0:
		d.setStatus(ctx, StatusRetrying)
	case head.Attempts == 0 && !(d.firstAttempt && d.status == StatusIdle && !d.oneMarker):
		d.setStatus(ctx, StatusDelivering)
	}
}

// attemptFailed is the transition when an attempt failed and the head will
// be retried.
func (d *delivery) attemptFailed(ctx workflow.Context) {
	d.setStatus(ctx, StatusRetrying)
}

// headFailed is the transition when the head failed for good.
func (d *delivery) headFailed(ctx workflow.Context) {
	d.setStatus(ctx, d.failedStatus())
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

// showBare writes a bare run's search attributes (BareStartVersion) with
// its status at rest, if it has not shown one yet: every wait (wait,
// waitIdle) and every Record, which is retried through a database outage,
// calls it first, so that no key waits unlisted. A no-op for any other run.
func (d *delivery) showBare(ctx workflow.Context) {
	if d.unshown {
		d.setStatus(ctx, d.restingStatus())
	}
}

// setStatus records a status change: the search attributes (status and the
// queue length at that moment) and the current details are upserted on
// changes only, never per event.
func (d *delivery) setStatus(ctx workflow.Context, status string) {
	if status == d.status && !d.unshown {
		return
	}
	d.status = status
	attrs := append(d.unwritten, SAStatus.ValueSet(status), SAQueued.ValueSet(int64(len(d.Queue))))
	d.unshown, d.unwritten = false, nil
	if err := workflow.UpsertTypedSearchAttributes(ctx, attrs...); err != nil {
		d.logger.Warn("upsert search attributes failed", "error", err)
	}
	d.refreshDetails(ctx)
}

package activities

import (
	"context"
	"math/rand/v2"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"
)

// Waits for a subscriber app's limits (manifest "limits"). A wait is not an
// attempt: it spends none, and a key keeps its order while it waits.
const (
	// LimitHeadWait bounds how long one execution waits for its first
	// event's turn. It stays well below the execution's timeouts (its
	// StartToClose allows the delivery timeout plus 35 s for one event, and
	// the wait heartbeats); past it the execution ends with OutcomeLimited
	// and the workflow starts the next one at once.
	LimitHeadWait = 10 * time.Second
	// maxLimitBatchWait bounds the waits of the later events of an
	// execution, together, with the batch time: past it the execution ends
	// with what it delivered.
	maxLimitBatchWait = 15 * time.Second
	// leaseMargin is added to the delivery timeout for an in-flight lease's
	// expiry: a lease of a worker that died frees itself after that.
	leaseMargin = 30 * time.Second
	// capacityPoll is the first pause before asking again when the app has
	// maxInFlight deliveries under way; it grows to maxCapacityPoll.
	capacityPoll    = 20 * time.Millisecond
	maxCapacityPoll = 250 * time.Millisecond
	// releaseTimeout bounds the release of a lease, which runs even when the
	// activity was cancelled.
	releaseTimeout = 5 * time.Second
)

// turnResult is how a wait for an app's limits ended.
type turnResult int

const (
	turnGranted   turnResult = iota // the POST may go; release the lease after it
	turnTooLate                     // the turn would come after the budget
	turnFailed                      // the database did not answer (err says why)
	turnCancelled                   // ctx ended
)

// waitTurn waits until the app's limits let one more POST go, for at most
// budget, heartbeating with hb while it waits. A token becoming available
// within the budget is reserved at once and slept for; a full in-flight
// allowance is polled, with a growing, jittered pause.
func (a *Activities) waitTurn(ctx context.Context, app string, timeout, budget time.Duration, hb any) (string, turnResult, error) {
	deadline := time.Now().Add(budget)
	pause := capacityPoll
	for {
		left := time.Until(deadline)
		if left <= 0 || (activity.IsActivity(ctx) && workerStopping(ctx)) {
			return "", turnTooLate, nil
		}
		g, err := a.Store.AcquireDelivery(ctx, app, timeout+leaseMargin, left)
		switch {
		case ctx.Err() != nil:
			if err == nil {
				a.release(ctx, app, g.Lease)
			}
			return "", turnCancelled, ctx.Err()
		case err != nil:
			return "", turnFailed, err
		case g.Granted:
			if g.Wait > 0 {
				if slept := sleepBeating(ctx, g.Wait, hb); slept != sleptFully {
					a.release(ctx, app, g.Lease)
					return "", slept.turn(), ctx.Err()
				}
			}
			return g.Lease, turnGranted, nil
		case !g.AtCapacity:
			// The next token comes after the budget. Spend the budget waiting
			// rather than end at once: the workflow starts the next execution
			// as soon as this one ends, so a key held back by the rate asks
			// again once per budget, not in a tight loop.
			if slept := sleepBeating(ctx, left, hb); slept == sleepCancelled {
				return "", turnCancelled, ctx.Err()
			}
			return "", turnTooLate, nil
		}
		d := min(pause/2+rand.N(pause), left)
		if slept := sleepBeating(ctx, d, hb); slept != sleptFully {
			return "", slept.turn(), ctx.Err()
		}
		pause = min(pause*3/2, maxCapacityPoll)
	}
}

// release ends an in-flight lease, even when ctx was cancelled; a lease that
// cannot be released expires by itself.
func (a *Activities) release(ctx context.Context, app, lease string) {
	if lease == "" {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := a.Store.ReleaseDelivery(rctx, app, lease); err != nil && a.Logger != nil {
		a.Logger.Warn("release an in-flight lease (it expires by itself)", zap.String("app", app), zap.Error(err))
	}
}

// sleepResult is how a sleep of a wait ended.
type sleepResult int

const (
	sleptFully sleepResult = iota
	sleepCancelled
	// sleepStopping: the worker is shutting down; the wait ends early, as
	// one that ran out of time, so that no attempt is spent on it.
	sleepStopping
)

func (r sleepResult) turn() turnResult {
	if r == sleepStopping {
		return turnTooLate
	}
	return turnCancelled
}

// sleepBeating sleeps for d, heartbeating every second (the SDK throttles
// what it sends), unless ctx ends or the worker stops first.
func sleepBeating(ctx context.Context, d time.Duration, hb any) sleepResult {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var stopping <-chan struct{}
	if activity.IsActivity(ctx) {
		stopping = activity.GetWorkerStopChannel(ctx)
	}
	recordHeartbeat(ctx, hb)
	for {
		select {
		case <-ctx.Done():
			return sleepCancelled
		case <-stopping:
			return sleepStopping
		case <-t.C:
			return sleptFully
		case <-tick.C:
			recordHeartbeat(ctx, hb)
		}
	}
}

// recordHeartbeat heartbeats when running as an activity (not in a plain
// unit test of the wait).
func recordHeartbeat(ctx context.Context, details any) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, details)
	}
}

package workflows

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"

	"herald/activities"
)

// expiryMargin keeps firstDelivery away from an event the run could expire
// rather than deliver: the run's clock (the workflow task's) is not the
// worker's, and the event stays for the run's own turn.
const expiryMargin = time.Minute

// firstDelivery is StartActivity's delivery for a fresh run that asked for
// it (DeliverInStartVersion): when the rows q say the key owes a head that
// such a run would deliver at once as a local first attempt — not paused,
// the head queued, never tried, far from its hold expiry, and nothing this
// run delivered before (its first attempt at the read) — it delivers the
// head's batch as that attempt would (deliverInput, batchOf, the run's
// deadline, and the read after it when the run ends quiet), and returns
// the result for the run to apply. Otherwise nil: the run delivers as
// before. w are the worker's settings as the run takes them, with its
// hints.
func firstDelivery(ctx context.Context, acts *activities.Activities, w Params, q activities.QueueResult,
	in StartInput, now time.Time) *FirstDelivery {
	if in.First == nil || in.First.Timeout <= 0 || activity.GetInfo(ctx).Attempt != 1 || q.Paused || len(q.Events) == 0 ||
		len(q.DeliveredHere) > 0 {
		return nil
	}
	queue := make([]QueueItem, 0, len(q.Events))
	for _, h := range q.Events {
		if h.Failed || h.Attempts > 0 {
			break // the batch ends before it
		}
		queue = append(queue, heldItem(h, now, false, 0)) // as the run's queue holds it
	}
	if len(queue) == 0 {
		return nil // the head was tried before: a regular activity's
	}
	w.SubscriptionID, w.SubscriberApp, w.SubjectKey = in.SubscriptionID, in.First.SubscriberApp, in.SubjectKey
	batch := batchOf(queue, w.MaxBatch)
	for _, it := range queue[:len(batch)] {
		if !now.Add(expiryMargin).Before(it.QueuedAt.Add(w.HoldExpiry)) {
			return nil
		}
	}
	din := deliverInput(w, &queue[0], batch)
	din.Local, din.Deadline = true, in.First.Deadline
	if (w.EndQuietKeys || w.Quiet) && !w.Busy && len(batch) == len(q.Events) {
		din.ThenRead = w.MaxQueue / 2 // as the run's readLimit
	}
	// Given up when a local attempt of the run would be (execute's
	// ScheduleToCloseTimeout); the run then goes on as after a local
	// attempt that ended without a result.
	dctx, cancel := context.WithTimeout(ctx, in.First.Timeout)
	defer cancel()
	res, err := acts.Deliver(dctx, din)
	first := &FirstDelivery{Events: batch, ThenRead: din.ThenRead, Result: res}
	if err != nil {
		first.Error = err.Error()
	}
	return first
}

// err is the Deliver execution's error, if it ended with one.
func (f *FirstDelivery) err() error {
	if f.Error == "" {
		return nil
	}
	return errors.New(f.Error)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"

	"herald/workflows"
)

// endRunsParallel is how many terminations endRuns has in flight.
const endRunsParallel = 32

// endRunsReason is the reason the runs' histories give for their end.
const endRunsReason = "bench: the measurement is over; ended so that its idle timer does not fire in a later one"

// endRuns terminates the runs of ph's keys that are still open once the
// measurement, its history samples included, is done: with Herald's
// default settings a key's run waits HERALD_IDLE_TIMEOUT (10 minutes)
// before it completes. Left running, a shape's idle timers fire during a
// later shape of the same server, whose fresh worker must fetch and replay
// each of those histories to complete it: in `make bench` at 4a1b168, A's,
// B's and C's 1,220 runs came due during E's measurement and D's 600
// during the neighbours'. Every event of these keys was delivered and its
// outcome recorded, so PostgreSQL owes them nothing and no relay re-drives
// them. A run already closed (a quiet run that ended at once) answers
// NotFound, which is not an error. It returns how many runs it ended.
//
// Terminations cost the server store requests and close records, counted
// in no measurement: the next one starts from a fresh reading of the
// server's counters (visibilityBefore).
func (b *bench) endRuns(ctx context.Context, ph *phase) (int, error) {
	b.visLast = nil
	ids := make(chan string)
	var (
		mu    sync.Mutex
		ended int
		errs  []error
		wg    sync.WaitGroup
	)
	for range endRunsParallel {
		wg.Go(func() {
			for id := range ids {
				err := b.temporal.TerminateWorkflow(ctx, id, "", endRunsReason)
				var notFound *serviceerror.NotFound
				mu.Lock()
				switch {
				case err == nil:
					ended++
				case errors.As(err, &notFound):
				default:
					errs = append(errs, fmt.Errorf("end run %s: %w", id, err))
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	for _, key := range ph.keys {
		for _, sub := range ph.subs {
			ids <- workflows.DeliveryID(sub, key)
		}
	}
	close(ids)
	wg.Wait()
	if len(errs) > 0 {
		return ended, fmt.Errorf("%d of the runs of %s on %s not ended (the next measurements would complete them): %w",
			len(errs), ph.shape.Name, ph.system, errs[0])
	}
	b.progress("%s %s: ended %d runs waiting idle in %.1fs", ph.system, ph.shape.Name, ended, time.Since(start).Seconds())
	if ended > 0 {
		time.Sleep(b.cfg.Grace) // for their close records, before the next measurement's first reading
	}
	return ended, nil
}

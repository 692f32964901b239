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

const (
	// endRunsParallel is how many terminations endRuns has in flight.
	endRunsParallel = 32
	// endRunsTries is how often endRuns tries to end one run.
	endRunsTries = 3
	// endRunsSettle bounds the wait for the server to write the ended runs'
	// close records.
	endRunsSettle = time.Minute
	// endRunsReason is the reason the runs' histories give for their end.
	endRunsReason = "bench: the measurement is over; ended so that its idle timer does not fire in a later one"
)

// endRuns terminates the runs of ph's keys that are still open once the
// measurement m, its history samples included, is done: with Herald's
// default settings a key's run waits HERALD_IDLE_TIMEOUT (10 minutes)
// before it completes. Left running, a shape's idle timers fire during a
// later shape on the same server, whose fresh worker must fetch and replay
// each of those histories to complete it: in `make bench` at 4a1b168, E's
// worker completed A's, B's and C's 1,220 runs while measured, and D's 600
// came due during the neighbours'. (The server still finds each ended
// run's timer task when it comes due, and drops it.)
//
// PostgreSQL decides which runs may go: none when the measurement lost an
// event, and never a key with an outcome row still queued or failed (an
// outcome whose write is being retried by the run's Record): those keep
// running. A run already closed (a quiet run that ended at once) answers
// NotFound, which is not an error. A run that cannot be ended is left and
// counted (RunsLeft), the measurement kept.
//
// The terminations, and the close records the server writes for them, are
// taken out of the next measurement's counts of the server's requests (the
// chain of visibility windows), once the server has written those records
// or endRunsSettle has passed.
func (b *bench) endRuns(ctx context.Context, ph *phase, m *Measurement) {
	if m.Lost > 0 {
		m.RunsLeft = len(ph.keys) * len(ph.subs)
		b.progress("%s %s: %d deliveries lost: its runs are left running", ph.system, ph.shape.Name, m.Lost)
		return
	}
	ids, owing, err := b.runsToEnd(ctx, ph)
	if err != nil {
		m.RunsLeft = len(ph.keys) * len(ph.subs)
		b.progress("%s %s: its runs are left running: %v", ph.system, ph.shape.Name, err)
		return
	}
	m.RunsLeft = owing
	before, beforeErr := b.readCounters(ctx)
	start := time.Now()
	ended, errs := b.terminate(ctx, ids)
	m.RunsEnded, m.RunsLeft = ended, m.RunsLeft+len(errs)
	b.progress("%s %s: ended %d runs waiting idle in %.1fs, left %d", ph.system, ph.shape.Name, ended,
		time.Since(start).Seconds(), m.RunsLeft)
	if len(errs) > 0 {
		b.progress("%s %s: %d runs not ended, which a later measurement may complete: %v",
			ph.system, ph.shape.Name, len(errs), errs[0])
	}
	if ended == 0 {
		return
	}
	after, afterErr := b.settle(ctx, before, ended)
	if afterErr != nil && b.cfg.TemporalMetrics != "" {
		b.progress("%s %s: the ended runs' records may count in the next measurement: %v", ph.system, ph.shape.Name, afterErr)
	}
	if b.visLast != nil && beforeErr == nil && afterErr == nil {
		shifted := b.visLast.Add(after.Sub(before))
		b.visLast = &shifted
	} else {
		b.visLast = nil // the next measurement starts from a fresh reading
	}
}

// runsToEnd are the workflow ids of ph's keys (at each subscription) that
// hold no event, PostgreSQL says (store.KeyHeads: no outcome row queued,
// or failed and waiting for an operator), and how many keys do.
func (b *bench) runsToEnd(ctx context.Context, ph *phase) (ids []string, owing int, err error) {
	var subs, subjects []string
	for _, key := range ph.keys {
		for _, sub := range ph.subs {
			subs, subjects = append(subs, sub), append(subjects, key)
		}
	}
	heads, err := b.store.KeyHeads(ctx, subs, subjects)
	if err != nil {
		return nil, 0, err
	}
	for _, key := range ph.keys {
		for _, sub := range ph.subs {
			if _, held := heads[[2]string{sub, key}]; held {
				owing++
				continue
			}
			ids = append(ids, workflows.DeliveryID(sub, key))
		}
	}
	return ids, owing, nil
}

// terminate ends the runs ids, endRunsParallel at once, trying each up to
// endRunsTries times; it returns how many it ended and why the others
// could not be.
func (b *bench) terminate(ctx context.Context, ids []string) (int, []error) {
	work := make(chan string)
	var (
		mu    sync.Mutex
		ended int
		errs  []error
		wg    sync.WaitGroup
	)
	for range endRunsParallel {
		wg.Go(func() {
			for id := range work {
				done, err := b.terminateOne(ctx, id)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if done {
					ended++
				}
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return ended, errs
}

// terminateOne ends the run id: done is false when it had closed already.
func (b *bench) terminateOne(ctx context.Context, id string) (done bool, err error) {
	for try := 1; ; try++ {
		err = b.temporal.TerminateWorkflow(ctx, id, "", endRunsReason)
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &notFound):
			return false, nil
		case try == endRunsTries || ctx.Err() != nil:
			return false, fmt.Errorf("end run %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try) * time.Second):
		}
	}
}

// readCounters reads the server's counters of its requests, when known.
func (b *bench) readCounters(ctx context.Context) (Visibility, error) {
	if b.cfg.TemporalMetrics == "" {
		return Visibility{}, errors.New("the server's metrics endpoint is not known")
	}
	v, found, err := readVisibility(ctx, b.cfg.TemporalMetrics)
	if err == nil && !found {
		err = fmt.Errorf("%s has no counter %s", b.cfg.TemporalMetrics, visibilityCounter)
	}
	return v, err
}

// settle waits until the server has written the close records of the
// ended runs (the counters read before them, before), or endRunsSettle has
// passed, and returns its last reading; without the server's counters it
// waits the grace.
func (b *bench) settle(ctx context.Context, before Visibility, ended int) (Visibility, error) {
	if b.cfg.TemporalMetrics == "" {
		time.Sleep(b.cfg.Grace)
		return Visibility{}, errors.New("the server's metrics endpoint is not known")
	}
	deadline := time.Now().Add(endRunsSettle)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := b.readCounters(ctx)
		if err == nil && v.Closed-before.Closed >= float64(ended) {
			return v, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("%v of %d close records written in %v", v.Closed-before.Closed, ended, endRunsSettle)
			}
			return v, err
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

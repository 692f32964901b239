package activities

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"herald/store"
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
// allowance is polled, with a growing, jittered pause. under are the
// limits the caller read with its batch: when the app's rate is raised or
// removed during a wait on it (limitWatch), a reserved turn is given back
// and the wait asks again under the new limits at once, so that a raise
// takes effect within about a second rather than when the tokens reserved
// under the old rate come due (up to the budget, 10 s, later).
func (a *Activities) waitTurn(ctx context.Context, app string, under store.Limits, timeout, budget time.Duration, hb any) (string, turnResult, error) {
	deadline := time.Now().Add(budget)
	pause := capacityPoll
	// w watches the app's rate while the wait sleeps on it (a turn reserved
	// ahead, or none within the budget); a full in-flight allowance is
	// polled anyway.
	var w *limitWaiter
	rateRaised := func() <-chan struct{} {
		if w == nil {
			w = a.limits.watch(a.Store, a.Logger, app, under)
		}
		return w.raised
	}
	defer func() {
		if w != nil {
			a.limits.forget(w)
		}
	}()
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
				switch slept := sleepBeating(ctx, g.Wait, hb, rateRaised()); slept {
				case sleptFully:
				case sleepRaised:
					a.returnTurn(ctx, app, g.Lease)
					w = a.limits.rewatch(a.Store, a.Logger, w)
					continue
				default:
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
			switch sleepBeating(ctx, left, hb, rateRaised()) {
			case sleepCancelled:
				return "", turnCancelled, ctx.Err()
			case sleepRaised:
				w = a.limits.rewatch(a.Store, a.Logger, w)
				continue
			}
			return "", turnTooLate, nil
		}
		d := min(pause/2+rand.N(pause), left)
		if slept := sleepBeating(ctx, d, hb, nil); slept != sleptFully {
			return "", slept.turn(), ctx.Err()
		}
		pause = min(pause*3/2, maxCapacityPoll)
	}
}

// returnTurn gives back a turn that was granted and not used (the app's
// limits were raised while it waited for it). A turn that cannot be given
// back is a token spent for nothing and a lease that expires by itself.
func (a *Activities) returnTurn(ctx context.Context, app, lease string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := a.Store.ReturnDelivery(rctx, app, lease); err != nil && a.Logger != nil {
		a.Logger.Warn("give back a turn after the app's limits were raised", zap.String("app", app), zap.Error(err))
	}
}

// limitWatchInterval is how often a worker reads the limits of the apps its
// waits are under: one query per process, only while a wait is under way.
const limitWatchInterval = time.Second

// limitWatch tells this process's waits on apps' rates when those were
// raised or removed: one goroutine reads the watched apps' limits every
// limitWatchInterval while any such wait is under way, one query for them
// all (a thousand waiting keys of one app cost that one query, not a
// thousand). The zero value is ready.
type limitWatch struct {
	mu      sync.Mutex
	waits   map[*limitWaiter]struct{}
	running bool
	warned  time.Time // when a failed read was last logged
}

// limitWatchWarnEvery spaces the warnings of reads that fail.
const limitWatchWarnEvery = time.Minute

// limitWaiter is one wait's watch: raised is closed once the app's rate
// lets more through than under's (Limits.RateRaised); now are its limits
// then.
type limitWaiter struct {
	app    string
	under  store.Limits
	raised chan struct{}
	now    store.Limits
}

// watch starts watching app's limits for a wait under under; forget ends
// it.
func (lw *limitWatch) watch(st Store, log *zap.Logger, app string, under store.Limits) *limitWaiter {
	w := &limitWaiter{app: app, under: under, raised: make(chan struct{})}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.waits == nil {
		lw.waits = map[*limitWaiter]struct{}{}
	}
	lw.waits[w] = struct{}{}
	if !lw.running {
		lw.running = true
		go lw.run(st, log)
	}
	return w
}

// rewatch replaces a watch that fired (run forgot it then) with one under
// the raised limits.
func (lw *limitWatch) rewatch(st Store, log *zap.Logger, w *limitWaiter) *limitWaiter {
	return lw.watch(st, log, w.app, w.now)
}

func (lw *limitWatch) forget(w *limitWaiter) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	delete(lw.waits, w)
}

// run reads the watched apps' limits every limitWatchInterval and fires
// the watches whose app's rate was raised, until none is left. A read that
// fails is tried again at the next tick (the waits go on meanwhile, as
// before a raise) and logged at most once every limitWatchWarnEvery.
func (lw *limitWatch) run(st Store, log *zap.Logger) {
	t := time.NewTicker(limitWatchInterval)
	defer t.Stop()
	for range t.C {
		lw.mu.Lock()
		if len(lw.waits) == 0 {
			lw.running = false
			lw.mu.Unlock()
			return
		}
		var apps []string
		for w := range lw.waits {
			if !slices.Contains(apps, w.app) {
				apps = append(apps, w.app)
			}
		}
		lw.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), limitWatchInterval)
		now, err := st.AppLimits(ctx, apps)
		cancel()
		if err != nil {
			lw.mu.Lock()
			warn := log != nil && time.Since(lw.warned) >= limitWatchWarnEvery
			if warn {
				lw.warned = time.Now()
			}
			lw.mu.Unlock()
			if warn {
				log.Warn("read the limits of apps whose keys wait (a raised limit reaches them when their wait ends)",
					zap.Strings("apps", apps), zap.Error(err))
			}
			continue
		}
		lw.mu.Lock()
		for w := range lw.waits {
			if l, ok := now[w.app]; ok && w.under.RateRaised(l) {
				w.now = l
				close(w.raised)
				delete(lw.waits, w)
			}
		}
		lw.mu.Unlock()
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
	// sleepRaised: the app's limits were raised (limitWatch).
	sleepRaised
)

func (r sleepResult) turn() turnResult {
	if r == sleepStopping {
		return turnTooLate
	}
	return turnCancelled
}

// sleepBeating sleeps for d, heartbeating every second (the SDK throttles
// what it sends), unless ctx ends, the worker stops or raised is closed
// first (a nil raised never is).
func sleepBeating(ctx context.Context, d time.Duration, hb any, raised <-chan struct{}) sleepResult {
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
		case <-raised:
			return sleepRaised
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

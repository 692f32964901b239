package relay

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"herald/workflows"
)

// Starter is the part of a Temporal client that starts workflows; a
// client.Client is one. With it (and StartNewKeys) the relay starts the
// workflow of a key it has not seen lately instead of signalling it.
type Starter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// A key with no running workflow is the commonest case (one event per key:
// an order, a user, a payment). SignalWithStart cannot start eagerly, so the
// new workflow's first task goes through Temporal's matching and a poller;
// a plain start with EnableEagerStart hands that task straight back to this
// worker in the start's answer. The started run carries no events: like a
// re-driven key's, it reads what its key owes from the queued outcome rows,
// which the relay wrote before any start or signal (RecordDispatch). A key
// whose workflow runs answers "already started", and gets its signal as
// before; the relay remembers the keys it started or signalled within the
// idle timeout, whose workflows most likely run, and signals them at once.
//
// A run the relay started quiet (Params.EndQuietKeys, or Params.Quiet once
// the runs it started to wait idle reach IdleRuns) ends once it has
// delivered, unless a signal came first. A key that comes back within
// HotWindow of such a start is taken to be a busy one (an order being
// paid, then shipped; a stream of updates): it is started again, eagerly,
// as busy (Params.Busy), and that run waits idle for the key's next
// events, which are signals; a run still running answers "already
// started", takes the signal and waits idle too. Without that every event
// of a busy key would be a start of its own, at most ParallelStarts in
// flight: beside such neighbours, a healthy subscription's p99 went from
// about 100 ms to seconds (CHANGELOG). SignalWithStart would also make the
// run wait idle, but it starts the run through the normal task queue,
// where first tasks waited 3-4 s beside busy neighbours. A key seen once
// in HotWindow (one event per key, or a burst of one key's events read in
// one round) stays a quiet start and its run ends as the floor's does.
// Busy starts are not held to IdleRuns: a busy key's run saves starts.

// maxRecentKeys bounds the keys the relay remembers as recently started or
// signalled; the oldest are forgotten first.
const maxRecentKeys = 100_000

// DefaultHotWindow is the default of Relay.HotWindow.
const DefaultHotWindow = time.Minute

// recentKeys are the workflow ids the relay started or signalled, with
// when and whether their runs wait idle, oldest first.
type recentKeys struct {
	mu    sync.Mutex
	at    map[string]recentKey
	order []string
}

// recentKey is when a key was last started or signalled, and whether its
// run waits idle: a signalled run does, a started one unless it is a
// quiet run (Params.EndQuietKeys) not started as busy.
type recentKey struct {
	at   time.Time
	idle bool
}

// last reports when id was last started or signalled, and whether its run
// waits idle; ok is false when the relay does not remember it.
func (k *recentKeys) last(id string) (at time.Time, idle, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.at[id]
	return t.at, t.idle, ok
}

// note remembers id as started or signalled at now.
func (k *recentKeys) note(id string, now time.Time, idle bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.at == nil {
		k.at = map[string]recentKey{}
	}
	if _, ok := k.at[id]; !ok {
		k.order = append(k.order, id)
	}
	k.at[id] = recentKey{at: now, idle: idle}
	for len(k.order) > maxRecentKeys {
		delete(k.at, k.order[0])
		k.order = k.order[1:]
	}
}

// An eager start's answer carries the new run's first workflow task, which
// the server records as started by this worker when it creates the run. If
// the answer is lost (the SDK gives up on the call after its 10 s RPC
// timeout, the stream is cancelled) while the server did create the run,
// no worker holds that task: the key waits for its 10 s start-to-close
// timeout, and on a server slow enough to lose answers, for the late
// timer and the retried task too (a neighbour's key waited 83 s in the
// noisy-neighbour comparison, issue 26). A start that Temporal did not
// answer therefore pauses eager starts for eagerPause: new keys get
// SignalWithStart, whose first task waits on the task queue for any poller
// however the call ends.
const eagerPause = time.Minute

// eagerGate is when eager starts may resume after a start went unanswered.
type eagerGate struct {
	mu    sync.Mutex
	until time.Time
}

// open reports whether eager starts are allowed at now.
func (g *eagerGate) open(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !now.Before(g.until)
}

// pause closes the gate until now+d; it reports whether it was open.
func (g *eagerGate) pause(now time.Time, d time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	wasOpen := !now.Before(g.until)
	g.until = now.Add(d)
	return wasOpen
}

// startsEagerly reports whether this round starts new keys eagerly: the
// relay starts new keys and no start went unanswered within eagerPause.
// A round decides once, so its keys are treated alike whatever order their
// calls end in.
func (r *Relay) startsEagerly() bool {
	_, ok := r.Temporal.(Starter)
	return ok && r.StartNewKeys && r.eager.open(time.Now())
}

// startHint is how a key the relay starts is to end when it owes nothing.
type startHint int

const (
	// startIdle: its run waits idle, unless the relay's quiet runs say
	// otherwise (Params.EndQuietKeys, or IdleRuns reached when it starts:
	// Params.Quiet).
	startIdle startHint = iota
	// startBusy: started within HotWindow of its last start, whose run
	// ended quiet: its run waits idle (Params.Busy).
	startBusy
)

// eagerStarter is the Starter to start g's key's workflow with, when the
// round starts new keys eagerly and the key's run is not taken to be
// running: the relay has not started or signalled the key within the idle
// timeout, or only started it for a run that ends once it has delivered.
// nil otherwise: the key is signalled. The hint says how the run is to end.
// A start carries the span a signal of the same events would (its trace
// reaches the new run): only a key whose events fit one signal is started,
// so that every event's trace has its relay signal span.
func (r *Relay) eagerStarter(g *group, eager bool) (Starter, startHint) {
	starter, ok := r.Temporal.(Starter)
	if !ok || !eager || len(g.events) > r.MaxEventsPerSignal {
		return nil, startIdle
	}
	at, idle, seen := r.recent.last(workflows.DeliveryID(g.key.sub.ID, g.key.subject))
	since, timeout := time.Since(at), r.Params.WithDefaults().IdleTimeout
	switch {
	case seen && idle && since < timeout:
		return nil, startIdle
	case seen && !idle && since < min(r.HotWindow, timeout):
		return starter, startBusy
	}
	return starter, startIdle
}

// idleStarts are when the relay last started runs that wait idle, oldest
// first: the newest IdleRuns at most.
type idleStarts struct {
	mu sync.Mutex
	at []time.Time
}

// add remembers a start of a run that waits idle, at now, keeping the
// newest n.
func (s *idleStarts) add(now time.Time, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = append(s.at, now)
	if len(s.at) > n {
		s.at = slices.Delete(s.at, 0, len(s.at)-n)
	}
}

// reserve takes a place for a start of a run that waits idle at now, and
// reports whether there was one: fewer than n such starts within window of
// now (each of those runs most likely still waits: a run waits its idle
// timeout out). A place taken for a start that then does not happen (the
// key's run was running) stays taken: the cap errs on the side of fewer
// runs waiting.
func (s *idleStarts) reserve(now time.Time, window time.Duration, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.at) > 0 && now.Sub(s.at[0]) >= window {
		s.at = s.at[1:]
	}
	if len(s.at) >= n {
		return false
	}
	s.at = append(s.at, now)
	return true
}

// startKey starts the workflow of a key the relay has not started or
// signalled lately (eagerStarter), eagerly, with no events (the run reads the
// rows). It reports whether it started one and, when it did not, why: nil
// when the key's workflow runs ("already started"), which the key's signal
// answers; the start's error otherwise.
//
// At most ParallelStarts run at once (takeSlots), within the Parallel
// signals in flight. On the default-settings dev server, 64 eager starts
// and signals in flight together made its store fall behind: a key's next
// workflow task (its signal came a second after the start) was recorded as
// started but reached no worker, and the key waited out the 10 s task
// timeout (shape B took 12 s instead of 6 in half the runs; its log: "Fail
// to process task ... context deadline exceeded"). Signals alone at 64, and
// starts capped at 16, never did.
func (r *Relay) startKey(ctx context.Context, starter Starter, id string, opts client.StartWorkflowOptions, params workflows.Params) (bool, error) {
	opts.EnableEagerStart = true
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	_, err := starter.ExecuteWorkflow(ctx, opts, workflows.DeliveryWorkflowType, params)
	if err == nil {
		now := time.Now()
		r.recent.note(id, now, params.Busy || !r.Params.EndQuietKeys && !params.Quiet)
		if params.Busy && r.IdleRuns > 0 {
			// Not held to the cap, but counted (a plain start reserved its
			// place in signalGroup).
			r.idleStarts.add(now, r.IdleRuns)
		}
		return true, nil
	}
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return false, nil
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The relay cut the call short (shutdown, or the partition lapsed):
		// nothing is wrong with Temporal, and the round records nothing. (A
		// caller's deadline that passed is Temporal not answering in time.)
		return false, err
	}
	r.Logger.Warn("start a key's workflow", zap.String("workflow", id), zap.Error(err))
	if outage(err) && r.eager.pause(time.Now(), eagerPause) {
		r.Logger.Warn("Temporal did not answer an eager start; new keys are signalled with SignalWithStart for a while",
			zap.String("workflow", id), zap.Duration("for", eagerPause), zap.Error(err))
	}
	return false, err
}

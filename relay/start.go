package relay

import (
	"context"
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

// maxRecentKeys bounds the keys the relay remembers as recently started or
// signalled; the oldest are forgotten first.
const maxRecentKeys = 100_000

// recentKeys are the workflow ids the relay started or signalled, with
// when, oldest first.
type recentKeys struct {
	mu    sync.Mutex
	at    map[string]time.Time
	order []string
}

// seen reports whether id was started or signalled within ttl of now.
func (k *recentKeys) seen(id string, now time.Time, ttl time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.at[id]
	return ok && now.Sub(t) < ttl
}

// note remembers id as started or signalled at now.
func (k *recentKeys) note(id string, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.at == nil {
		k.at = map[string]time.Time{}
	}
	if _, ok := k.at[id]; !ok {
		k.order = append(k.order, id)
	}
	k.at[id] = now
	for len(k.order) > maxRecentKeys {
		delete(k.at, k.order[0])
		k.order = k.order[1:]
	}
}

// recentFor is how long a started or signalled key's workflow is taken to
// be running: its idle timeout.
func (r *Relay) recentFor() time.Duration { return r.Params.WithDefaults().IdleTimeout }

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

// eagerStarter is the Starter to start g's key's workflow with, when the
// round starts new keys eagerly and the relay has not started or signalled
// the key lately; nil otherwise (the key is signalled). A start carries the
// span a signal of the same events would (its trace reaches the new run):
// only a key whose events fit one signal is started, so that every event's
// trace has its relay signal span.
func (r *Relay) eagerStarter(g *group, eager bool) Starter {
	starter, ok := r.Temporal.(Starter)
	id := workflows.DeliveryID(g.key.sub.ID, g.key.subject)
	if !ok || !eager || len(g.events) > r.MaxEventsPerSignal || r.recent.seen(id, time.Now(), r.recentFor()) {
		return nil
	}
	return starter
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
		if !r.Params.EndQuietKeys {
			// Otherwise the run most likely ends once it has delivered (it
			// takes no signal): the key's next event gets a start too, and
			// a signal only if the run still runs.
			r.recent.note(id, time.Now())
		}
		return true, nil
	}
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return false, nil
	}
	r.Logger.Warn("start a key's workflow", zap.String("workflow", id), zap.Error(err))
	if outage(err) && r.eager.pause(time.Now(), eagerPause) {
		r.Logger.Warn("Temporal did not answer an eager start; new keys are signalled with SignalWithStart for a while",
			zap.String("workflow", id), zap.Duration("for", eagerPause), zap.Error(err))
	}
	return false, err
}

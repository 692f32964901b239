// Package relay moves accepted events from the PostgreSQL outbox into
// Temporal: it fans each event out to the delivery workflow of every
// deliverable subscription and subject key with SignalWithStartWorkflow, and
// marks events dispatched only after Temporal accepted every signal.
package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// Signaler is the part of a Temporal client the relay uses.
type Signaler interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// DefaultIdlePoll is how long an idle relay leader waits for a wake-up
// before it looks for new events anyway: the most a PublishTx event waits
// for dispatch (HERALD_RELAY_POLL_INTERVAL).
const DefaultIdlePoll = 100 * time.Millisecond

// Relay is the outbox relay. The log's keys fall into store.RelayPartitions
// partitions, each led by one relay at a time through a lease row only
// Herald's roles may take (store.Member); the relays of one database share
// them out, so two worker replicas never dispatch one key concurrently and
// never reorder it, and dispatching grows with the workers.
type Relay struct {
	Store    *store.Store
	Temporal Signaler
	Logger   *zap.Logger
	// Params are given to the delivery workflows the relay starts.
	Params workflows.Params
	// BatchSize caps the events read per round (default DefaultBatchSize).
	BatchSize int
	// PollInterval is the pause after a failed round or lease attempt, and
	// the longest an idle leader goes without a round (default
	// DefaultPollInterval).
	PollInterval time.Duration
	// IdlePoll is how long the leader waits for a wake-up before it looks
	// for new events anyway (default DefaultIdlePoll;
	// HERALD_RELAY_POLL_INTERVAL). Publishing transactions do not notify
	// (store/wake.go): events committed by PublishTx, a publisher role or a
	// key workflow's operational event wait at most this long. Events
	// backing off are not looked for by it: they come due at their
	// partition's round of every PollInterval.
	IdlePoll time.Duration
	// Parallel caps the signals in flight at once, across the partitions
	// the relay leads (default DefaultParallel).
	Parallel int
	// MaxEventsPerSignal caps the events of one key in one signal (default
	// DefaultMaxEventsPerSignal).
	MaxEventsPerSignal int
	// SweepInterval is how often the leader of partition 0 looks for keys
	// of removed subscriptions that still hold events, and for keys to
	// re-drive (default DefaultSweepInterval).
	SweepInterval time.Duration
	// MaxAttempts is the failed signals after which an event is dead, code
	// relay_failed (default DefaultMaxAttempts; HERALD_RELAY_MAX_ATTEMPTS).
	MaxAttempts int
	// OnRound, when set, is called after every round (metrics, tests).
	OnRound func(r Round)
	// Observer, when set, counts the events the relay settles itself:
	// filtered ones, and those of removed subscriptions it cancels.
	Observer Observer
	// ParallelStarts caps the eager starts in flight at once, within
	// Parallel (default DefaultParallelStarts; start.go).
	ParallelStarts int
	// StartNewKeys starts the workflow of a key not started or signalled
	// within the idle timeout eagerly, without events, instead of
	// signalling it, when Temporal is a Starter (start.go;
	// HERALD_RELAY_SIGNAL_ONLY turns it off).
	StartNewKeys bool
	// HotWindow: a key the relay started within it for a run that ends
	// once it owes nothing (Params.EndQuietKeys, or IdleRuns reached) is
	// started again as busy: its run waits idle (start.go; default
	// DefaultHotWindow; negative: never).
	HotWindow time.Duration
	// IdleRuns caps the runs that wait idle the relay has started within
	// the idle timeout: past it, a key it starts gets a run that ends once
	// it owes nothing (Params.Quiet). The service sets the worker's
	// workflow cache size (HERALD_WORKFLOW_CACHE_SIZE): an idle run the
	// cache cannot hold costs its next signal a replay of its history.
	// 0: no cap.
	IdleRuns int
	// RecordParallel caps the rounds, across the partitions the relay
	// leads, that write their outcome rows at once (default
	// DefaultRecordParallel; negative: no cap).
	RecordParallel int
	// RoundBytes bounds the envelopes a round reads (default
	// DefaultRoundBytes): a round takes events while those before them
	// hold less, so it holds less than RoundBytes plus one event's.
	RoundBytes int64
	// BuildID is the build id this process's Temporal worker stamps its
	// workflow tasks with (the service sets it: worker.SetBinaryChecksum).
	// The runs the relay starts carry it in BuildIds
	// (workflows.WithBuildID): an eager start's first task goes to this
	// worker, which then changes nothing in Temporal's visibility store.
	// Empty: runs start without BuildIds.
	BuildID string

	// abandon makes the relay stop as a frozen worker would, giving back
	// nothing (tests).
	abandon bool
	// signalSlots caps the signals in flight across the partitions this
	// relay leads (Parallel).
	slotsOnce   sync.Once
	signalSlots chan struct{}
	// startSlots caps the eager starts among them (ParallelStarts).
	startSlots chan struct{}
	// recordSlots caps the rounds recording at once (RecordParallel; nil:
	// no cap).
	recordSlots chan struct{}

	mu     sync.Mutex
	led    []int // the partitions led
	cursor redriveCursor
	// recent are the keys started or signalled lately (startKey).
	recent recentKeys
	// idleStarts are the starts of runs that wait idle lately (IdleRuns).
	idleStarts idleStarts
	// eager closes for eagerPause when a start goes unanswered (start.go).
	eager eagerGate
	// buildIDsRefused: Temporal refused BuildIds in a start; runs start
	// without them from then on (buildids.go).
	buildIDsRefused atomic.Bool
	// filters caches compiled content filters by their text.
	filters map[string]compiledFilter
	// restUntil holds the filters that ran out of time or into their cost
	// limit too often, by subscription and text, until they are evaluated
	// again; streaks counts, by the same key, their evaluations in a row
	// that ran into the cost limit or the deadline.
	restUntil map[string]restingFilter
	streaks   map[string]int

	auditMu sync.Mutex
	// filterErrs are the filter errors of each subscription not yet in an
	// audit row; filterAudited is when its last row was written.
	filterErrs    map[string]*filterTally
	filterAudited map[string]time.Time
}

// Observer counts n events of a subscription settled with outcome.
type Observer interface {
	Settled(subscriptionID, outcome string, n int)
}

// Round describes one dispatch round.
type Round struct {
	// Partition is the partition the round read (-1: every partition, as
	// DispatchOnce reads them).
	Partition  int
	Events     int // events read
	Dispatched int // events marked dispatched
	Signals    int // signals sent, and keys' workflows started (StartNewKeys)
	Failed     int // signals that failed (their events back off)
	Filtered   int // (subscription, event) pairs a content filter did not let through, whose rows this round wrote
	BackingOff int // events that failed a signal and wait for their next try
	Dead       int // events that failed their last signal (code relay_failed)

	// FilterErrors are the pairs whose content filter failed (an error, the
	// cost limit, a timeout); they are delivered.
	FilterErrors int
	// Held are the (key, event) pairs not signalled because their key holds
	// on a failing head (skipHeld): their workflow reads them from the rows.
	Held int
	// Unavailable are those of Failed that failed because Temporal as a
	// whole did not answer or shed load (outage), not for their key.
	Unavailable int
}

// Defaults of the Relay's settings: the one place each is written (the
// benchmark's ceiling takes DefaultParallel from here).
const (
	// DefaultMaxAttempts is the default of Relay.MaxAttempts.
	DefaultMaxAttempts = 10
	// DefaultBatchSize is the default of Relay.BatchSize.
	DefaultBatchSize = 1000
	// DefaultPollInterval is the default of Relay.PollInterval.
	DefaultPollInterval = time.Second
	// DefaultParallel is the default of Relay.Parallel: signals in flight at once.
	DefaultParallel = 64
	// DefaultParallelStarts is the default of Relay.ParallelStarts: eager
	// starts in flight at once (start.go says why fewer than signals).
	DefaultParallelStarts = 16
	// DefaultRecordParallel is the default of Relay.RecordParallel: rounds
	// writing their outcome rows at once. One round writes up to BatchSize
	// rows in one statement, tens of milliseconds, so two at a time write
	// far more rows a second than the relay's signals take.
	DefaultRecordParallel = 2
	// DefaultRoundBytes is the default of Relay.RoundBytes: 4 MiB of
	// envelopes a round. A round of BatchSize events of the largest size
	// the publisher accepts (256 KiB) held 256 MiB, and every partition a
	// relay leads reads its round at once: a burst of large events took
	// gigabytes of a worker's memory. Events of a few kilobytes fill
	// BatchSize first.
	DefaultRoundBytes = 4 << 20
	// DefaultMaxEventsPerSignal is the default of Relay.MaxEventsPerSignal.
	DefaultMaxEventsPerSignal = 500
	// DefaultSweepInterval is the default of Relay.SweepInterval.
	DefaultSweepInterval = 20 * time.Second
)

func (r *Relay) defaults() {
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.PollInterval <= 0 {
		r.PollInterval = DefaultPollInterval
	}
	if r.IdlePoll <= 0 {
		r.IdlePoll = DefaultIdlePoll
	}
	if r.Parallel <= 0 {
		r.Parallel = DefaultParallel
	}
	if r.ParallelStarts <= 0 {
		r.ParallelStarts = DefaultParallelStarts
	}
	if r.RecordParallel == 0 {
		r.RecordParallel = DefaultRecordParallel
	}
	if r.HotWindow == 0 {
		r.HotWindow = DefaultHotWindow
	}
	if r.MaxEventsPerSignal <= 0 {
		r.MaxEventsPerSignal = DefaultMaxEventsPerSignal
	}
	if r.RoundBytes <= 0 {
		r.RoundBytes = DefaultRoundBytes
	}
	if r.SweepInterval <= 0 {
		r.SweepInterval = DefaultSweepInterval
	}
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.Logger == nil {
		r.Logger = zap.NewNop()
	}
}

// takeSlots waits for a signal slot (Parallel) and, for a key to be
// started eagerly, first for a start slot (ParallelStarts): a start
// waiting for its turn holds no signal slot, so it never holds back the
// signals of running keys. It returns what gives them back, or false when
// ctx ended first.
func (r *Relay) takeSlots(ctx context.Context, start bool) (release func(), ok bool) {
	r.makeSlots()
	drain := drainOf(ctx)
	if closed(drain) {
		return nil, false // handed over: no key more
	}
	if start {
		select {
		case r.startSlots <- struct{}{}:
		case <-ctx.Done():
			return nil, false
		case <-drain:
			return nil, false
		}
	}
	select {
	case r.signalSlots <- struct{}{}:
	case <-ctx.Done():
		if start {
			<-r.startSlots
		}
		return nil, false
	case <-drain:
		if start {
			<-r.startSlots
		}
		return nil, false
	}
	return func() {
		<-r.signalSlots
		if start {
			<-r.startSlots
		}
	}, true
}

// takeRecordSlot waits for a round's turn to write its outcome rows
// (RecordParallel), at most recordTurnWait: a round whose writes are stuck
// (waiting on a lock) delays the other partitions' rounds by that, never
// holds them. It returns what gives the turn back (nothing when the wait
// ran out), or false when ctx ended first.
func (r *Relay) takeRecordSlot(ctx context.Context) (release func(), ok bool) {
	r.makeSlots()
	if r.recordSlots == nil {
		return func() {}, true
	}
	t := time.NewTimer(recordTurnWait)
	defer t.Stop()
	select {
	case r.recordSlots <- struct{}{}:
		return func() { <-r.recordSlots }, true
	case <-t.C:
		return func() {}, true
	case <-ctx.Done():
		return nil, false
	}
}

// recordTurnWait is the longest a round waits for its turn to write
// (takeRecordSlot) before it writes anyway.
const recordTurnWait = time.Second

// makeSlots makes the relay's semaphores, once.
func (r *Relay) makeSlots() {
	r.slotsOnce.Do(func() {
		r.signalSlots = make(chan struct{}, max(1, r.Parallel))
		r.startSlots = make(chan struct{}, max(1, min(r.ParallelStarts, r.Parallel)))
		if r.RecordParallel >= 0 {
			r.recordSlots = make(chan struct{}, max(1, r.RecordParallel))
		}
	})
}

// IsLeader reports whether this relay currently leads at least one
// partition of the log (Partitions).
func (r *Relay) IsLeader() bool { return len(r.Partitions()) > 0 }

// Partitions lists the partitions of the log this relay currently leads,
// in ascending order (store.RelayPartitions in all, among every relay).
func (r *Relay) Partitions() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.led)
}

func (r *Relay) setLed(ps []int) {
	r.mu.Lock()
	r.led = ps
	r.mu.Unlock()
}

// Run relays until ctx ends. It survives database and Temporal outages,
// retrying with the poll interval.
func (r *Relay) Run(ctx context.Context) error {
	r.defaults()
	for ctx.Err() == nil {
		err := r.serve(ctx)
		r.setLed(nil)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			r.Logger.Warn("relay interrupted", zap.Error(err))
		}
		sleep(ctx, r.PollInterval)
	}
	return nil
}

// key is one delivery workflow: a subscription and a subject key.
type key struct {
	sub     store.Deliverable
	subject string
}

// group is the events of one key in this round, in sequence order.
type group struct {
	key    key
	events []store.PendingEvent
}

// DispatchOnce reads one batch of undispatched events, of every partition
// (at most BatchSize events and about RoundBytes of envelopes), and
// signals them.
func (r *Relay) DispatchOnce(ctx context.Context) (Round, error) {
	r.defaults()
	evs, err := r.Store.Undispatched(ctx, r.BatchSize, r.RoundBytes)
	if err != nil {
		return Round{Partition: -1}, err
	}
	round, err := r.dispatch(ctx, evs)
	round.Partition = -1
	return round, err
}

// dispatch signals the undispatched events evs (one batch, in sequence
// order) and marks them dispatched or backing off.
func (r *Relay) dispatch(ctx context.Context, evs []store.PendingEvent) (Round, error) {
	if len(evs) == 0 {
		return Round{}, nil
	}
	subs, err := r.Store.DeliverableSubscriptions(ctx)
	if err != nil {
		return Round{}, err
	}
	byType := map[string][]store.Deliverable{}
	for _, s := range subs {
		t := fmt.Sprintf("%s@%d", s.Type, s.Version)
		byType[t] = append(byType[t], s)
	}

	// Content filters are judged first, concurrently per subscription and
	// within bounded time (judge), so a slow filter never holds the round.
	// An operational event goes only to the app it is about (audience).
	targets := make([][]store.Deliverable, len(evs)) // per event, its subscriptions
	for i, ev := range evs {
		targets[i] = audience(ev, byType[fmt.Sprintf("%s@%d", ev.Type, ev.Version)])
	}
	filtered, filterErrors := r.judge(ctx, evs, targets)
	defer r.auditFilterErrors(ctx)

	// Every (subscription, event) gets its queued outcome row before any
	// signal; a pair already settled (a re-send after a crash, once the key
	// went idle) is not handed to its key again.
	var pairs []store.Dispatch
	for i, ev := range evs {
		for _, s := range targets[i] {
			d := store.Dispatch{SubscriptionID: s.ID, EventID: ev.ID, Seq: ev.Seq, Subject: ev.Subject}
			if code, ok := filtered[store.Dispatch{SubscriptionID: s.ID, EventID: ev.ID}]; ok {
				d.Filtered, d.Code = true, code
			}
			pairs = append(pairs, d)
		}
	}
	// The rounds of the partitions woken at once (a burst) take turns to
	// write: sharing PostgreSQL's CPUs, every round would finish its writes
	// at about the same time and no key would be signalled before the
	// slowest; in turns, the first round's keys go while the next writes.
	release, ok := r.takeRecordSlot(ctx)
	if !ok {
		return Round{}, ctx.Err()
	}
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	existing, err := r.Store.RecordDispatch(ctx, pairs)
	if err != nil {
		return Round{}, err
	}
	settled := map[store.Dispatch]bool{}
	for k, status := range existing {
		settled[k] = store.Settled(status)
	}
	// A filter's verdict counts where it wrote the pair's row. A pair an
	// earlier round wrote keeps that round's verdict: let through (the
	// filter rested or failed then) it is handed to its key, filtered it
	// was counted then.
	perSub := map[string]int{}
	newlyFiltered := 0
	for k := range filtered {
		if _, had := existing[k]; had {
			continue
		}
		settled[k] = true
		perSub[k.SubscriptionID]++
		newlyFiltered++
	}
	if r.Observer != nil {
		for id, n := range perSub {
			r.Observer.Settled(id, store.EventFiltered, n)
		}
	}
	groups := map[key]*group{}
	var order []*group
	for i, ev := range evs {
		for _, s := range targets[i] {
			if settled[store.Dispatch{SubscriptionID: s.ID, EventID: ev.ID}] {
				continue
			}
			k := key{sub: s, subject: ev.Subject}
			g := groups[k]
			if g == nil {
				g = &group{key: k}
				groups[k] = g
				order = append(order, g)
			}
			g.events = append(g.events, ev)
		}
	}

	round := Round{Events: len(evs), Filtered: newlyFiltered, FilterErrors: filterErrors}
	order, round.Held, err = r.skipHeld(ctx, order)
	release()
	released = true
	if err != nil {
		return Round{}, err
	}

	// Keys go out in parallel; one key's events go in sequence order, in as
	// few signals as MaxEventsPerSignal allows, stopping at a failure.
	failedSeq := map[int64]*failure{}
	handedOver := map[int64]bool{} // events of keys left to the partition's next leader
	var mu sync.Mutex
	settle := func(g *group, sent, failedAt int, err error) {
		mu.Lock()
		defer mu.Unlock()
		round.Signals += sent
		if failedAt < 0 {
			return
		}
		if errors.Is(err, errHandedOver) {
			for _, ev := range g.events[failedAt:] {
				handedOver[ev.Seq] = true
			}
			return
		}
		round.Failed++
		unavailable := outage(err)
		if unavailable {
			round.Unavailable++
		}
		for _, ev := range g.events[failedAt:] {
			f := failedSeq[ev.Seq]
			if f == nil {
				f = &failure{msg: err.Error()}
				failedSeq[ev.Seq] = f
			}
			f.keyFault = f.keyFault || !unavailable
		}
	}
	// A key's goroutine starts only once it holds its slots (send): a round
	// of thousands of new keys waiting for the start slots keeps two
	// goroutines waiting, not one per key, each with its stack (10,000 new
	// keys in one burst: a worker's goroutine stacks 55 MB, now 36). Starts
	// and signals wait in queues of their own, so a start waiting for its
	// turn never holds back the signals of running keys.
	type job struct {
		g       *group
		starter Starter // nil: the key is signalled
		hint    startHint
	}
	eager := r.startsEagerly()
	var starts, signals []job
	for _, g := range order {
		if starter, hint := r.eagerStarter(g, eager); starter != nil {
			starts = append(starts, job{g, starter, hint})
		} else {
			signals = append(signals, job{g, nil, startIdle})
		}
	}
	var wg sync.WaitGroup
	send := func(jobs []job, start bool) {
		for i, j := range jobs {
			release, ok := r.takeSlots(ctx, start)
			if !ok {
				err := ctx.Err()
				if err == nil {
					err = errHandedOver
				}
				for _, j := range jobs[i:] {
					settle(j.g, 0, 0, err)
				}
				return
			}
			wg.Go(func() {
				defer release()
				sent, failedAt, err := r.signalGroup(ctx, j.g, j.starter, j.hint)
				settle(j.g, sent, failedAt, err)
			})
		}
	}
	wg.Go(func() { send(starts, true) })
	send(signals, false)
	wg.Wait()

	var done []int64
	var failed []store.RelayFailure
	for _, ev := range evs {
		if handedOver[ev.Seq] {
			continue // neither dispatched nor failed: the next leader sends it
		}
		if f, ok := failedSeq[ev.Seq]; ok {
			// An outage counts only when Temporal accepted another signal.
			counted := f.keyFault || round.Signals > 0
			failed = append(failed, store.RelayFailure{Seq: ev.Seq, Error: f.msg, Counted: counted})
		} else {
			done = append(done, ev.Seq)
		}
	}
	if err := r.Store.MarkDispatched(ctx, done); err != nil {
		return round, err
	}
	round.Dispatched = len(done)
	if err := r.backOff(ctx, &round, failed); err != nil {
		return round, err
	}
	return round, nil
}

// errHandedOver is why a round left a key unsent: its partition was being
// handed over to another relay (partitions.go), which sends the key's
// events instead; no attempt is counted and nothing backs off.
var errHandedOver = errors.New("the partition was handed over before the key's turn")

type drainKey struct{}

// withDrain marks a round's context with drain, closed when the round's
// partition is handed over: from then on the round sends no key it has not
// begun (takeSlots), and ends once those under way have.
func withDrain(ctx context.Context, drain <-chan struct{}) context.Context {
	return context.WithValue(ctx, drainKey{}, drain)
}

// drainOf is the drain channel of a round's context; nil (never closed)
// for a round of DispatchOnce.
func drainOf(ctx context.Context) <-chan struct{} {
	drain, _ := ctx.Value(drainKey{}).(<-chan struct{})
	return drain
}

// failure is what became of an event's signals in one round: the first
// error, and whether any of its keys was refused for a reason of its own
// rather than an outage.
type failure struct {
	msg      string
	keyFault bool
}

// outage reports whether err says Temporal as a whole did not answer or
// shed load, rather than refusing this key (a busy workflow is the key's
// own). Such a failure counts as an attempt only in a round in which
// Temporal accepted another signal, so an outage never makes events dead.
func outage(err error) bool {
	var (
		unavailable   *serviceerror.Unavailable
		nsUnavailable *serviceerror.NamespaceUnavailable
		deadline      *serviceerror.DeadlineExceeded
		canceled      *serviceerror.Canceled
		exhausted     *serviceerror.ResourceExhausted
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &unavailable), errors.As(err, &nsUnavailable), errors.As(err, &deadline), errors.As(err, &canceled):
		return true
	case errors.As(err, &exhausted):
		return exhausted.Cause != enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW
	}
	return false
}

// backOff makes the events whose signal failed wait for their next try,
// so that neither they nor the later events of their keys fill the next
// rounds, and counts the attempts (RelayFailure.Counted). A round cut
// short by shutdown records nothing.
func (r *Relay) backOff(ctx context.Context, round *Round, failed []store.RelayFailure) error {
	if len(failed) == 0 || ctx.Err() != nil {
		return nil
	}
	changed, err := r.Store.RecordRelayFailures(ctx, failed, r.MaxAttempts)
	if err != nil {
		return err
	}
	for _, ev := range changed {
		if !ev.Dead {
			round.BackingOff++
			continue
		}
		round.Dead++
		r.Logger.Error("relay gave up on an event; it waits for starter events retry-relay",
			zap.String("event", ev.ID), zap.Int64("seq", ev.Seq), zap.String("type", ev.Type),
			zap.String("subject", ev.Subject), zap.Int("attempts", ev.Attempts),
			zap.String("code", store.CodeRelayFailed), zap.String("error", ev.Error))
	}
	return nil
}

// keyParams is the input of a key's run the relay starts: its settings, the
// key, and the version that spares the run its marker
// (workflows.NoMarkerVersion).
func (r *Relay) keyParams(subscriptionID, app, eventType, subject string) workflows.Params {
	p := r.Params
	p.SubscriptionID, p.SubscriberApp, p.EventType, p.SubjectKey = subscriptionID, app, eventType, subject
	p.Version = workflows.NoMarkerVersion
	return p
}

// signalGroup sends one key's events, starting its workflow eagerly instead
// with starter (eagerStarter; nil signals it); it returns the signals sent,
// and the index of the first event not accepted (-1 when all were) with the
// error.
func (r *Relay) signalGroup(ctx context.Context, g *group, starter Starter, hint startHint) (sent, failedAt int, err error) {
	params := r.keyParams(g.key.sub.ID, g.key.sub.App, g.key.sub.Type, g.key.subject)
	params.Busy = hint == startBusy
	if starter != nil && hint == startIdle && !r.Params.EndQuietKeys && r.IdleRuns > 0 {
		// Decided as the start goes out, under its start slot, so that the
		// rounds of every partition this relay leads share the cap.
		params.Quiet = !r.idleStarts.reserve(time.Now(), r.Params.WithDefaults().IdleTimeout, r.IdleRuns)
	}
	id := workflows.DeliveryID(g.key.sub.ID, g.key.subject)
	opts := client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue, StaticSummary: workflows.Summary(params)}
	base := workflows.StartAttributes(params)
	if len(g.events) == 1 {
		// The commonest new key: one event, which its first attempt takes
		// at once; it starts idle and writes no status (a start applies the
		// attributes only when it starts the workflow).
		base = workflows.OneEventStartAttributes(params)
	}
	if starter != nil {
		sctx, span := startSignalSpan(ctx, id, g, g.events)
		var started bool
		var err error
		if bareStart(params, r.Params.EndQuietKeys, len(g.events)) {
			// A quiet run for one event most likely delivers it and ends in
			// its first task: started with no search attributes, it writes
			// them only if it comes to wait (workflows.BareStartVersion),
			// and its start's read delivers the event when the rows allow
			// (workflows.DeliverInStartVersion).
			bare := params
			bare.Version = workflows.DeliverInStartVersion
			started, err = r.startKey(sctx, starter, id, opts, bare)
		} else {
			err = r.withBuildIDs(&opts, base, func() (err error) {
				started, err = r.startKey(sctx, starter, id, opts, params)
				return err
			})
		}
		endSignalSpan(span, err)
		switch {
		case started:
			return 1, -1, nil // the new run reads the key's queued rows
		case err != nil && outage(err):
			// Temporal did not answer the start: the signal would wait as
			// long again for the same answer, doubling every new key's
			// wait in an outage. The events back off as a failed signal's.
			return 0, 0, fmt.Errorf("start %s: %w", id, err)
		}
		// The key's workflow runs, or Temporal refused the start itself
		// (the signal may still go through): the key is signalled.
	}
	for start := 0; start < len(g.events); {
		// Signals carry ids and sequence numbers only (about 70 bytes an
		// event), so a count cap keeps them far under Temporal's 2 MB limit.
		end := min(start+r.MaxEventsPerSignal, len(g.events))
		sig := workflows.EventSignal{Events: make([]activities.Event, 0, end-start)}
		for _, ev := range g.events[start:end] {
			sig.Events = append(sig.Events, activities.Event{ID: ev.ID, Seq: ev.Seq})
		}
		sctx, span := startSignalSpan(ctx, id, g, g.events[start:end])
		// A start refused for its BuildIds signalled nothing: sent again.
		err := r.withBuildIDs(&opts, base, func() error {
			_, err := r.Temporal.SignalWithStartWorkflow(sctx, id, workflows.SignalEvent, sig, opts,
				workflows.DeliveryWorkflowType, params)
			return err
		})
		endSignalSpan(span, err)
		if err != nil {
			if !errors.Is(ctx.Err(), context.Canceled) { // not a round the relay cut short
				r.Logger.Warn("signal delivery workflow", zap.String("workflow", id), zap.Error(err))
			}
			return sent, start, fmt.Errorf("signal %s: %w", id, err)
		}
		sent++
		start = end
	}
	r.recent.note(id, time.Now(), true) // a run that took a signal waits idle
	return sent, -1, nil
}

// bareStart reports whether a key's eager start of n events, with params,
// is a bare one (workflows.BareStartVersion, as
// workflows.DeliverInStartVersion): one event, and a run that
// ends once it owes nothing (quiet: endQuiet, the worker's
// HERALD_END_QUIET_KEYS, or the hint Params.Quiet; not Params.Busy).
func bareStart(params workflows.Params, endQuiet bool, n int) bool {
	return n == 1 && !params.Busy && (endQuiet || params.Quiet)
}

func (r *Relay) sweepLoop(ctx context.Context) {
	for {
		if _, err := r.SweepRemoved(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("sweep keys of removed subscriptions", zap.Error(err))
		}
		if _, err := r.Redrive(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("re-drive keys whose workflow is gone", zap.Error(err))
		}
		sleep(ctx, r.SweepInterval)
		if ctx.Err() != nil {
			return
		}
	}
}

// sweepParallel and sweepCallTimeout bound the sweep's calls to Temporal.
const (
	sweepParallel    = 8
	sweepCallTimeout = 10 * time.Second
)

// SweepRemoved makes every key of a removed subscription that still holds
// events drop them: it tells the key's workflow (which cancels its queue,
// audits and completes), or, when no workflow runs for the key any more,
// cancels the held outcome rows itself with one audit row. It returns how
// many keys it handled.
func (r *Relay) SweepRemoved(ctx context.Context) (int, error) {
	r.defaults()
	keys, err := r.Store.RemovedKeys(ctx, 1000)
	if err != nil {
		return 0, err
	}
	var mu sync.Mutex
	var firstErr error
	handled := forEach(keys, sweepParallel, func(k store.HeldKey) bool {
		ok, err := r.sweepKey(ctx, k)
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
		return ok
	})
	return handled, firstErr
}

// sweepKey tells one key of a removed subscription, or cancels its held
// events itself when no workflow runs for it.
func (r *Relay) sweepKey(ctx context.Context, k store.HeldKey) (bool, error) {
	id := workflows.DeliveryID(k.SubscriptionID, k.Subject)
	cctx, cancel := context.WithTimeout(ctx, sweepCallTimeout)
	defer cancel()
	err := r.Temporal.SignalWorkflow(cctx, id, "", workflows.SignalSubscription,
		workflows.SubscriptionSignal{State: store.StateCancelled, Reason: activities.CodeSubscriptionRemoved})
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		return true, nil
	case !errors.As(err, &notFound):
		r.Logger.Warn("tell a key its subscription is removed", zap.String("workflow", id), zap.Error(err))
		return false, nil
	}
	n, err := r.Store.CancelHeld(ctx, k.SubscriptionID, k.Subject, activities.CodeSubscriptionRemoved, store.AuditEntry{
		Action: workflows.AuditDeliveryCancelled, TargetType: "delivery", TargetID: id,
		ErrorCode: activities.CodeSubscriptionRemoved,
		Metadata: map[string]any{"subscription": k.SubscriptionID, "subject": k.Subject,
			"reason": activities.CodeSubscriptionRemoved, "workflow": "not running"},
	})
	if err != nil {
		return false, err
	}
	if r.Observer != nil {
		r.Observer.Settled(k.SubscriptionID, store.EventCancelled, n)
	}
	return true, nil
}

// forEach runs fn on every item, at most parallel at a time, and returns
// for how many it reported true.
func forEach[T any](items []T, parallel int, fn func(T) bool) int {
	var mu sync.Mutex
	n := 0
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if fn(it) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

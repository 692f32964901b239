package workflows

import (
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
)

// FirstAttemptChange is the workflow.GetVersion change id of how a run makes
// first attempts. Version 1: the first attempt at a head runs as a local
// activity, within a budget (localBudget), and an idle key's HeraldStatus
// stays idle through it (a failure still shows as retrying or unreachable;
// the current details and the state query say delivering). Runs recorded
// before it (no marker: workflow.DefaultVersion) make every attempt a
// regular activity and write delivering, then idle, per event. Workers of
// both versions replay each other's runs during a rolling upgrade, except
// that an older worker cannot replay a version-1 run's local activity; that
// workflow task fails until an upgraded worker takes it.
//
// Version 2 (QueueFromLogVersion) makes PostgreSQL the state of record of
// the key: see queue.go.
const FirstAttemptChange = "first-attempt"

// QueueFromLogVersion is the FirstAttemptChange version from which a run
// takes what its key owes from the outcome rows, its settings from the
// worker, and refuses invalid operator signals (queue.go). Runs recorded at
// version 1 or before keep their behaviour on replay.
const QueueFromLogVersion = 2

// OneMarkerVersion is the FirstAttemptChange version from which a run
// records one version marker, not one per change: a run at it is at
// ErrorPolicyVersion and HeldKeysVersion without asking for their markers.
// Each marker also upserts TemporalChangeVersion, so a new key's first task
// records two history events fewer. Runs recorded at QueueFromLogVersion or
// before ask for ErrorPolicyChange and HeldKeysChange as they did. A worker
// built before it cannot replay a run at it: that workflow task fails until
// an upgraded worker takes it.
const OneMarkerVersion = 3

// NoMarkerVersion, as Params.Version in a run's input, makes the run behave
// as at OneMarkerVersion without recording the marker: the input is part of
// the run's history, so the run replays as it ran with no marker to say how.
// It saves a new key's first task two history events (the marker, and the
// SDK's upsert of TemporalChangeVersion that comes with it) and a write to
// Temporal's visibility store. The relay's starts (eager, signal-with-start,
// re-drive) and continue-as-new set it; a run without it (started by hand,
// by an operator's redeliver or replay, or by a worker built before it)
// asks GetVersion as before, and so does one whose input holds any other
// number.
//
// A worker built before it ignores the field: it runs such a run's first
// task at the newest version it knows and records that version's marker.
// Replaying, an upgraded worker asks GetVersion whatever the input says, so
// that marker decides; no marker means the run ran without one, as here.
// (Only a worker built before FirstAttemptChange recorded no marker at all;
// a run it took over from an upgraded relay does not replay here.) A worker
// built before it cannot replay a run that ran without the marker: that
// workflow task fails until an upgraded worker takes it. The replay's
// GetVersion leaves FirstAttemptChange at DefaultVersion in the SDK's
// memory: a later GetVersion of another change in such a run would write
// "first-attempt--1" into TemporalChangeVersion (visibility only).
//
// The number is the input's, not a FirstAttemptChange version: 4 means
// OneMarkerVersion's behaviour for good, and a later change of that
// behaviour needs a new input value beside it.
const NoMarkerVersion = 4

// BareStartVersion, as Params.Version in a run's input, is NoMarkerVersion
// for a run the relay started with no search attributes: a quiet key's run
// for one event (relay.Relay.signalGroup, which now starts such runs at
// DeliverInStartVersion, this and a delivery in the start), which most likely delivers it
// and completes in its first workflow task. Search attributes in a start
// cost Temporal's server work per run (it validates them, and reads their
// types for each visibility record that holds them; the dev server reads
// those from its store each time); such a run writes them only if it comes
// to show a status: the identity attributes (HeraldSubscription, HeraldApp,
// HeraldEventType) with its first status upsert (setStatus), before it
// waits for anything (wait, waitIdle: idle, a retry, a back-off, a failed
// head, an operator), makes an attempt as a regular activity
// (attemptStarts) or a Record (showBare). A run that delivers at once and
// completes writes none: Temporal's list does not find it by subscription, Herald's
// outcome rows do. Its marker behaviour is NoMarkerVersion's: a marker an
// older worker recorded decides on replay, and such a worker, which ignores
// the field (or, built with NoMarkerVersion, asks GetVersion for any other
// number), upserts the missing identity attributes at the run's start as
// before, which is what its replay expects. A worker built before it cannot
// replay a bare run that ran without the marker: that workflow task fails
// until an upgraded worker takes it.
const BareStartVersion = 5

// DeliverInStartVersion, as Params.Version in a run's input, is
// BareStartVersion with the run's first delivery made by its start's read:
// StartActivity reads the key's rows and, when they owe a head that a
// fresh run would deliver at once as a local first attempt, delivers its
// batch in the same local activity (firstDelivery) and returns the result
// with the rows it read before. The run applies that result where it
// would have applied its own local attempt's, in the workflow task of the
// read:
// a quiet key's run records one local activity marker instead of two
// (6 history events, the floor's) and spends one local activity's round
// less in its first task. The relay sets it for the runs it starts bare.
//
// The read asks for it only in a fresh run that no signal or Update has
// reached yet (an operator's signal or Update that came with the first
// task goes first); one that comes later waits for the delivery as for any
// local attempt. The delivery is made under the subscription's maxAttempts,
// as the run's own would be (withPolicy). The delivery is given up when a local attempt
// would be (FirstInput.Timeout), and the run then goes on as after a local
// attempt that ended without a result.
//
// The run decides by the read's recorded result, so a run replays as it
// ran: a result with a delivery says the POST happened, one without says
// it did not, whatever the input. A run at BareStartVersion never asks for
// it and replays as before. A worker built before it takes the number as
// unknown: it asks GetVersion and records its marker, which an upgraded
// worker then replays by; it cannot replay a run at it that ran without
// the marker, whether or not its read delivered: that workflow task fails
// until an upgraded worker takes it.
const DeliverInStartVersion = 6

// Delivery is the workflow of one subscription and subject key. It keeps the
// key's events in an ordered queue and delivers the head; a later event is
// never delivered while an earlier one is pending, retrying or failed.
func Delivery(ctx workflow.Context, p Params) error {
	d := newDelivery(ctx, p)
	if err := d.setup(ctx); err != nil || d.foreign {
		return err
	}
	return d.run(ctx)
}

// QueueItem is one queued event with the delivery state of its own attempts.
type QueueItem struct {
	Event activities.Event `json:"event"`
	// QueuedAt is when the key took it in; it expires HoldExpiry later.
	QueuedAt time.Time `json:"queuedAt"`
	// Attempts counts the attempts already spent on it.
	Attempts int `json:"attempts,omitempty"`
	// NotBefore is when its next attempt may start (retry after a partial batch).
	NotBefore time.Time `json:"notBefore,omitzero"`
	// Code is the head's outcome code (an attempt's, or attempts_exhausted);
	// LastCode and LastError describe its last failed attempt.
	Code      string `json:"code,omitempty"`
	LastCode  string `json:"lastCode,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// NextAttemptAt is what the state query shows while it is retrying.
	NextAttemptAt time.Time `json:"nextAttemptAt,omitzero"`
	// Failed holds the key: attempts are exhausted or the failure is terminal.
	Failed   bool      `json:"failed,omitempty"`
	FailedAt time.Time `json:"failedAt,omitzero"`
}

// Carry is the state a delivery workflow hands to its next run: ids and
// decisions only, never event bodies.
type Carry struct {
	Queue     []QueueItem `json:"queue"`
	Counters  Counters    `json:"counters"`
	Outcomes  []Outcome   `json:"outcomes"`
	KeyPaused bool        `json:"keyPaused,omitempty"`
	// Rearms counts consecutive automatic re-arms of a failed head.
	Rearms int `json:"rearms,omitempty"`
	// Wait: the key waits until WaitUntil because of WaitReason
	// (unreachable subscriber or inactive subscription).
	WaitUntil   time.Time `json:"waitUntil,omitzero"`
	WaitStatus  string    `json:"waitStatus,omitempty"`
	Unreachable int       `json:"unreachable,omitempty"`
	SubState    string    `json:"subState,omitempty"`
	// LookupFailures counts consecutive failed reads of the subscription.
	LookupFailures int    `json:"lookupFailures,omitempty"`
	SubReason      string `json:"subReason,omitempty"`
	// Backlog: more events are queued in PostgreSQL than the queue holds,
	// all with a seq above BacklogAfter.
	Backlog      bool  `json:"backlog,omitempty"`
	BacklogAfter int64 `json:"backlogAfter,omitempty"`
	// PrevRun is the run that continued as new into this one: a local
	// attempt of it may have delivered the head without learning so.
	PrevRun string `json:"prevRun,omitempty"`
}

// delivery is the state of one run of the Delivery workflow.
type delivery struct {
	p Params
	Carry

	status     string
	signals    int
	inActivity bool
	// idleTimer outlives the waits it serves: a key that gets an event every
	// few seconds starts one timer per idle period, not one per event.
	idleTimer workflow.Future
	// idleSince is when the queue last became empty (zero while busy).
	idleSince time.Time
	// cancelActivity interrupts the delivery in flight (operator signals).
	cancelActivity workflow.CancelFunc
	deferred       []*op
	// updates carries operator Updates to the main loop; updatesCame counts
	// the Updates accepted, whether or not the loop has taken them yet.
	updates     workflow.Channel
	updatesCame int
	// inflight is how many queue items the delivery in flight covers; new
	// events are never put in front of them.
	inflight int
	// firstAttempt: this run makes first attempts the FirstAttemptChange way
	// (local activity, no status write for an idle key).
	firstAttempt bool
	// fromLog: this run is at QueueFromLogVersion (queue.go). loaded: its
	// queue has been read from the outcome rows (last tried at loadTried).
	// foreign: its input names a key other than its workflow id's, so it
	// does nothing.
	fromLog, loaded, foreign bool
	loadTried                time.Time
	// oneMarker: this run is at OneMarkerVersion (the later changes are
	// implied, not asked for).
	oneMarker bool
	// unshown: a run started bare (BareStartVersion) whose search
	// attributes are not written yet; unwritten are the identity
	// attributes its first status upsert adds (setStatus).
	unshown   bool
	unwritten []temporal.SearchAttributeUpdate
	// carried: the input held a Carry (trusted only from a continue-as-new).
	carried bool
	// deliverInStart: the run's start read may make its first delivery
	// (DeliverInStartVersion); first is that delivery, until applyFirst.
	deliverInStart bool
	first          *FirstDelivery
	// hints are the relay's hints in the run's input (Params.Busy,
	// Params.Quiet), for StartActivity to hand back.
	hints StartInput
	// endQuiet: the run may still end as soon as it owes nothing (quiet).
	// owed is what the key owed after the last delivery, read by that
	// local activity (DeliverInput.ThenRead) in the workflow task whose
	// history length is owedTask.
	endQuiet bool
	owed     *activities.QueueResult
	owedTask int
	// errorPolicy: this run is at ErrorPolicyVersion; policy is its
	// subscription's, read at the run's start (errorpolicy.go).
	errorPolicy bool
	policy      ErrorPolicy
	// checkedHead is the failed head whose row this run has read.
	checkedHead string
	// claims are the signalled events not yet checked against the outcome
	// rows (at most maxClaims; unchecked counts those beyond).
	claims    []activities.Event
	unchecked int
	// localTried is the id of the head whose first attempt ran as a local
	// activity: its next execution is a regular activity. localSlow: a local
	// attempt ran out of its budget, so this run makes no more of them.
	localTried string
	localSlow  bool
	// taskHistory and taskStart: the history length and start of the
	// workflow task whose local attempts share one deadline.
	taskHistory int
	taskStart   time.Time
	// interrupted: an operator's action cancelled the delivery in flight.
	interrupted bool
	completed   bool
	// recent holds the ids of the last events this run delivered, oldest
	// first in recentOrder (not carried: a re-send after continue-as-new is
	// caught by its outcome row instead).
	recent      map[string]bool
	recentOrder []string
	// heldSeen: the key held on its head at an earlier turn (heldkeys.go).
	// rearmed is the head this run last re-armed.
	heldSeen bool
	rearmed  string
	// pauses counts the changes of KeyPaused this run made, so that a read
	// of the key's pause row applies only if none came while it was under
	// way; pauseLookAt is when a paused run with a queue next reads that
	// row (PauseRowChange).
	pauses      int
	pauseLookAt time.Time
	// pausesAtDeliver is pauses when the Deliver execution under way began.
	pausesAtDeliver int
	// shownDetails are the current details last set.
	shownDetails string
	// expiryAt caches nextExpiry while expiryKnown.
	expiryAt    time.Time
	expiryKnown bool
	logger      log.Logger
	channels    channels
	maxOutcomes int
}

type channels struct {
	event, redeliver, cancel, pause, resume, attempt, subscription, reachable workflow.ReceiveChannel
}

func newDelivery(ctx workflow.Context, p Params) *delivery {
	d := &delivery{p: p, logger: workflow.GetLogger(ctx), maxOutcomes: 20, endQuiet: true,
		hints: StartInput{Busy: p.Busy, Quiet: p.Quiet}}
	d.p.Busy, d.p.Quiet = false, false // the run takes them from StartActivity's result
	if p.Carry != nil {
		d.carried = true
		d.Carry = *p.Carry
		d.p.Carry = nil
	}
	d.channels = channels{
		event:     workflow.GetSignalChannel(ctx, SignalEvent),
		redeliver: workflow.GetSignalChannel(ctx, SignalRedeliver),
		cancel:    workflow.GetSignalChannel(ctx, SignalCancel),
		pause:     workflow.GetSignalChannel(ctx, SignalPause),
		resume:    workflow.GetSignalChannel(ctx, SignalResume),
		attempt:   workflow.GetSignalChannel(ctx, SignalAttempt),

		subscription: workflow.GetSignalChannel(ctx, SignalSubscription),
		reachable:    workflow.GetSignalChannel(ctx, SignalReachable),
	}
	d.updates = workflow.NewChannel(ctx)
	return d
}

func (d *delivery) setup(ctx workflow.Context) error {
	// Handlers first: an Update that came with the start (update-with-start)
	// is refused if its handler is not registered before the first block.
	if err := d.setUpdateHandlers(ctx); err != nil {
		return err
	}
	// Before any command: a run recorded without the marker replays the way
	// it was recorded.
	version := workflow.Version(OneMarkerVersion)
	unmarked := d.p.Version == NoMarkerVersion || d.p.Version == BareStartVersion || d.p.Version == DeliverInStartVersion
	bare := d.p.Version == BareStartVersion || d.p.Version == DeliverInStartVersion
	if !unmarked || workflow.IsReplaying(ctx) {
		// Replaying, GetVersion records nothing: a marker an older worker
		// recorded for a run whose input says NoMarkerVersion,
		// BareStartVersion or DeliverInStartVersion (it ignored the
		// field) says how that run ran;
		// none says it ran as an upgraded worker runs it.
		version = workflow.GetVersion(ctx, FirstAttemptChange, workflow.DefaultVersion, OneMarkerVersion)
		if unmarked && version == workflow.DefaultVersion {
			version = OneMarkerVersion
		} else {
			bare = false
		}
	}
	// Only a bare start may deliver in its read: the marker an older
	// worker recorded (bare is false then) says it did not.
	d.deliverInStart = bare && d.p.Version == DeliverInStartVersion
	d.firstAttempt = version >= 1
	d.fromLog = version >= QueueFromLogVersion
	d.oneMarker = version >= OneMarkerVersion
	d.errorPolicy = d.oneMarker ||
		workflow.GetVersion(ctx, ErrorPolicyChange, workflow.DefaultVersion, ErrorPolicyVersion) >= ErrorPolicyVersion
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (State, error) {
		return d.state(workflow.Now(ctx)), nil
	}); err != nil {
		return err
	}
	switch {
	case d.fromLog:
		if d.carried && workflow.GetInfo(ctx).ContinuedExecutionRunID == "" {
			// Only a continue-as-new carries state (the server sets the
			// run it continues, a client cannot): a carry in any other
			// start's input is ignored, the rows say what the key owes.
			d.logger.Warn("a Delivery workflow started with carried state it may not have; ignoring it")
			d.Carry = Carry{}
		}
		if id := workflow.GetInfo(ctx).WorkflowExecution.ID; id != DeliveryID(d.p.SubscriptionID, d.p.SubjectKey) {
			// Started by hand with another key's input: acting on it would
			// only be refused. Completing frees the id for the relay.
			d.logger.Warn("a Delivery workflow whose input names another key does nothing", "workflowId", id)
			d.foreign = true
			return nil
		}
		d.start(ctx)
	case len(d.p.RetrySchedule) == 0: // started by an operator's redeliver, not the relay
		d.p = d.workerSettings(ctx)
	}
	d.p = d.p.WithDefaults()
	// The relay sets the identity attributes and the first status when it
	// starts the workflow, and continue-as-new carries them: upsert only
	// what is missing, so a key's start costs no extra command.
	sa := workflow.GetTypedSearchAttributes(ctx)
	d.status, _ = sa.GetKeyword(SAStatus)
	var missing []temporal.SearchAttributeUpdate
	for _, kv := range []struct {
		key   temporal.SearchAttributeKeyKeyword
		value string
	}{{SASubscription, d.p.SubscriptionID}, {SAApp, d.p.SubscriberApp}, {SAEventType, d.p.EventType}} {
		if v, ok := sa.GetKeyword(kv.key); !ok || v != kv.value {
			missing = append(missing, kv.key.ValueSet(kv.value))
		}
	}
	if bare {
		// Written with the first status the run shows (BareStartVersion);
		// until then the key is idle, as a one-event start would say.
		d.unwritten = missing
		d.unshown = len(missing) > 0 || d.status == ""
		if d.status == "" {
			d.status = StatusIdle
		}
		d.applyFirst(ctx)
		return nil
	}
	if len(missing) > 0 {
		if err := workflow.UpsertTypedSearchAttributes(ctx, missing...); err != nil {
			return err
		}
	}
	d.applyFirst(ctx) // none: only a bare run asks its read to deliver
	return nil
}

// workerSettings asks the worker for its delivery settings; a setting the
// start gave wins. On failure the defaults apply.
func (d *delivery) workerSettings(ctx workflow.Context) Params {
	var w Params
	if err := workflow.ExecuteActivity(d.shortActivity(ctx), SettingsActivity).Get(ctx, &w); err != nil {
		d.logger.Warn("read the worker's delivery settings; using the defaults", "error", err)
		return d.p
	}
	p := d.p
	p.RetrySchedule = w.RetrySchedule
	orDuration(&p.DeliveryTimeout, w.DeliveryTimeout)
	orDuration(&p.RearmCooldown, w.RearmCooldown)
	orDuration(&p.IdleTimeout, w.IdleTimeout)
	orDuration(&p.RecheckInterval, w.RecheckInterval)
	orDuration(&p.HoldExpiry, w.HoldExpiry)
	if p.MaxRearms == 0 {
		p.MaxRearms = w.MaxRearms
	}
	if p.MaxBatch == 0 {
		p.MaxBatch = w.MaxBatch
	}
	if p.SignalsPerRun == 0 {
		p.SignalsPerRun = w.SignalsPerRun
	}
	// From the activity's recorded result: deterministic on replay.
	return p
}

func orDuration(v *time.Duration, def time.Duration) {
	if *v == 0 {
		*v = def
	}
}

// Summary is the static summary a key's workflow shows in the Temporal UI
// and in temporal workflow describe.
func Summary(p Params) string {
	return p.SubscriptionID + " · key " + p.SubjectKey
}

// StartAttributes are the search attributes the relay gives a delivery
// workflow it starts: identity and the status it starts in, delivering.
func StartAttributes(p Params) temporal.SearchAttributes {
	return startAttributes(p, StatusDelivering)
}

// OneEventStartAttributes are the search attributes of a key started for
// one event: it starts idle, as an idle key stays idle through a local
// first attempt at its next event (FirstAttemptChange), so a new key whose
// one event goes at once writes no status to Temporal's visibility store.
// An attempt that fails, or at OneMarkerVersion one that runs as a regular
// activity, upserts the status (attemptStarts); rows the key owes beyond
// the relay's one event are delivered as an idle key's are.
func OneEventStartAttributes(p Params) temporal.SearchAttributes {
	return startAttributes(p, StatusIdle)
}

func startAttributes(p Params, status string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		SASubscription.ValueSet(p.SubscriptionID),
		SAApp.ValueSet(p.SubscriberApp),
		SAEventType.ValueSet(p.EventType),
		SAStatus.ValueSet(status),
		SAQueued.ValueSet(0),
	)
}

// settleHandlers lets every Update in progress finish and takes in every
// signal already received, before the run completes or continues as new. It
// returns how many signals and Updates it handled.
func (d *delivery) settleHandlers(ctx workflow.Context) int {
	n := 0
	for {
		got := d.drain(ctx)
		_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		if got == 0 && d.drain(ctx) == 0 {
			return n
		}
		n += got
	}
}

// waitIdle waits, with nothing queued, for one signal or the end of the idle
// period, and reports whether the key has now been idle for IdleTimeout.
func (d *delivery) waitIdle(ctx workflow.Context) bool {
	d.showBare(ctx)
	now := workflow.Now(ctx)
	if d.idleSince.IsZero() {
		d.idleSince = now
	}
	deadline := d.idleSince.Add(d.p.IdleTimeout)
	if !now.Before(deadline) {
		return true
	}
	if d.idleTimer == nil {
		d.idleTimer = workflow.NewTimer(ctx, deadline.Sub(now))
	}
	sel := workflow.NewSelector(ctx)
	fired := false
	sel.AddFuture(d.idleTimer, func(workflow.Future) {
		d.idleTimer = nil
		fired = true
	})
	d.addSignals(ctx, sel)
	sel.Select(ctx)
	return fired && !workflow.Now(ctx).Before(deadline)
}

// wait blocks until one signal is handled or the deadline passes (no deadline
// when zero). It reports whether the deadline passed.
func (d *delivery) wait(ctx workflow.Context, deadline time.Time) bool {
	d.showBare(ctx)
	sel := workflow.NewSelector(ctx)
	timedOut := false
	var cancelTimer workflow.CancelFunc
	if !deadline.IsZero() {
		delay := deadline.Sub(workflow.Now(ctx))
		if delay <= 0 {
			return true
		}
		tctx, cancel := workflow.WithCancel(ctx)
		cancelTimer = cancel
		sel.AddFuture(workflow.NewTimer(tctx, delay), func(f workflow.Future) {
			if f.Get(tctx, nil) == nil {
				timedOut = true
			}
		})
	}
	d.addSignals(ctx, sel)
	sel.Select(ctx)
	if cancelTimer != nil && !timedOut {
		cancelTimer()
	}
	return timedOut
}

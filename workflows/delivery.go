package workflows

import (
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
)

// Delivery is the workflow of one subscription and subject key. It keeps the
// key's events in an ordered queue and delivers the head; a later event is
// never delivered while an earlier one is pending, retrying or failed.
func Delivery(ctx workflow.Context, p Params) error {
	d := newDelivery(ctx, p)
	if err := d.setup(ctx); err != nil {
		return err
	}
	return d.run(ctx)
}

// QueueItem is one queued event with the delivery state of its own attempts.
type QueueItem struct {
	Event activities.Event `json:"event"`
	// Redelivery marks an event put back in front of the queue by an operator.
	Redelivery bool `json:"redelivery,omitempty"`
	// Attempts counts the attempts already spent on it.
	Attempts int `json:"attempts,omitempty"`
	// NotBefore is when its next attempt may start (retry after a partial batch).
	NotBefore time.Time `json:"notBefore,omitempty"`
	Code      string    `json:"code,omitempty"`
	LastError string    `json:"lastError,omitempty"`
	// NextAttemptAt is what the state query shows while it is retrying.
	NextAttemptAt time.Time `json:"nextAttemptAt,omitempty"`
	// Failed holds the key: attempts are exhausted or the failure is terminal.
	Failed   bool      `json:"failed,omitempty"`
	FailedAt time.Time `json:"failedAt,omitempty"`
}

// Carry is the state a delivery workflow hands to its next run.
type Carry struct {
	Queue     []QueueItem `json:"queue"`
	LastSeq   int64       `json:"lastSeq"`
	Counters  Counters    `json:"counters"`
	Outcomes  []Outcome   `json:"outcomes"`
	KeyPaused bool        `json:"keyPaused,omitempty"`
	// Rearms counts consecutive automatic re-arms of a failed head.
	Rearms int `json:"rearms,omitempty"`
	// Wait: the key waits until WaitUntil because of WaitReason
	// (unreachable subscriber or inactive subscription).
	WaitUntil   time.Time `json:"waitUntil,omitempty"`
	WaitStatus  string    `json:"waitStatus,omitempty"`
	Unreachable int       `json:"unreachable,omitempty"`
	SubState    string    `json:"subState,omitempty"`
	// LookupFailures counts consecutive failed reads of the subscription.
	LookupFailures int    `json:"lookupFailures,omitempty"`
	SubReason      string `json:"subReason,omitempty"`
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
	deferred       []func(workflow.Context)
	completed      bool
	logger         log.Logger
	channels       channels
	maxOutcomes    int
}

type channels struct {
	event, redeliver, cancel, pause, resume, attempt workflow.ReceiveChannel
}

func newDelivery(ctx workflow.Context, p Params) *delivery {
	p = p.WithDefaults()
	d := &delivery{p: p, logger: workflow.GetLogger(ctx), maxOutcomes: 20}
	if p.Carry != nil {
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
	}
	return d
}

func (d *delivery) setup(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (State, error) {
		return d.state(workflow.Now(ctx)), nil
	}); err != nil {
		return err
	}
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
	if len(missing) == 0 {
		return nil
	}
	return workflow.UpsertTypedSearchAttributes(ctx, missing...)
}

// StartAttributes are the search attributes the relay gives a delivery
// workflow it starts: identity and the status it starts in.
func StartAttributes(p Params) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		SASubscription.ValueSet(p.SubscriptionID),
		SAApp.ValueSet(p.SubscriberApp),
		SAEventType.ValueSet(p.EventType),
		SAStatus.ValueSet(StatusDelivering),
		SAQueued.ValueSet(0),
	)
}

// run is the workflow's event loop: each turn either delivers the head or
// waits for a signal or a timer, according to the key's state.
func (d *delivery) run(ctx workflow.Context) error {
	for {
		// Take in whatever has arrived before deciding: the relay's first
		// signal comes with the start, and the key should not look idle first.
		d.drain(ctx)
		if d.completed {
			return nil
		}
		if d.shouldContinueAsNew(ctx) {
			d.drain(ctx)
			if !d.completed {
				d.setStatus(ctx, d.restingStatus())
				carry := d.Carry
				carry.Queue = carriedQueue(d.Queue)
				next := d.p
				next.Carry = &carry
				return workflow.NewContinueAsNewError(ctx, Delivery, next)
			}
			continue
		}
		now := workflow.Now(ctx)
		head := d.head()
		switch {
		case d.KeyPaused:
			d.setStatus(ctx, StatusPaused)
			d.wait(ctx, time.Time{})
		case head == nil:
			d.setStatus(ctx, StatusIdle)
			if d.waitIdle(ctx) && d.drain(ctx) == 0 && d.head() == nil && !d.KeyPaused {
				return nil
			}
		case head.Failed:
			d.setStatus(ctx, StatusFailed)
			var rearmAt time.Time
			if d.Rearms < d.p.MaxRearms {
				rearmAt = head.FailedAt.Add(d.p.RearmCooldown)
			}
			if d.wait(ctx, rearmAt) && d.head() == head && head.Failed {
				d.rearm(ctx, head)
			}
		case now.Before(d.WaitUntil):
			d.setStatus(ctx, d.WaitStatus)
			if d.wait(ctx, d.WaitUntil) {
				d.WaitUntil = time.Time{}
			}
		default:
			d.deliver(ctx)
		}
	}
}

// maxCarriedEnvelopes bounds the event bodies handed to the next run; past
// it the queue travels as ids and the deliver activity reads the bodies back
// from the event log, so a long held queue never exceeds Temporal's payload
// limit.
const maxCarriedEnvelopes = 256 << 10

func carriedQueue(q []QueueItem) []QueueItem {
	size := 0
	for _, it := range q {
		size += len(it.Event.Envelope)
	}
	if size <= maxCarriedEnvelopes {
		return q
	}
	out := make([]QueueItem, len(q))
	for i, it := range q {
		it.Event.Envelope = nil
		out[i] = it
	}
	return out
}

// restingStatus is the status shown between runs.
func (d *delivery) restingStatus() string {
	head := d.head()
	switch {
	case d.KeyPaused:
		return StatusPaused
	case head == nil:
		return StatusIdle
	case head.Failed:
		return StatusFailed
	case d.WaitStatus != "" && !d.WaitUntil.IsZero():
		return d.WaitStatus
	case head.Attempts > 0:
		return StatusRetrying
	}
	return StatusDelivering
}

func (d *delivery) head() *QueueItem {
	if len(d.Queue) == 0 {
		return nil
	}
	return &d.Queue[0]
}

func (d *delivery) shouldContinueAsNew(ctx workflow.Context) bool {
	return d.signals >= d.p.SignalsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// waitIdle waits, with nothing queued, for one signal or the end of the idle
// period, and reports whether the key has now been idle for IdleTimeout.
func (d *delivery) waitIdle(ctx workflow.Context) bool {
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

// Package workflows holds the Delivery workflow: one long-lived workflow per
// (subscription, subject key) that delivers that key's events strictly in order.
// This file is its public contract: names an operator types, ids, signal and
// query payloads, and the search attributes shown in the Temporal UI.
package workflows

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"herald/activities"
	"herald/reason"
	"herald/workflows/payload"
)

// TaskQueue is the task queue of the Delivery workflow and its activities.
const TaskQueue = "herald"

// DeliveryWorkflowType is the registered name of the Delivery workflow.
const DeliveryWorkflowType = "Delivery"

// Signal names (docs/design.md#the-delivery-workflow). Payloads are the *Signal types below.
const (
	// SignalEvent enqueues events; sent by the relay with an EventSignal.
	SignalEvent = "event"
	// SignalRedeliver retries the failed head with fresh attempts, or delivers a
	// named, already delivered or cancelled event again before the queue.
	SignalRedeliver = "redeliver"
	// SignalCancel drops the failed head, a named queued event, or everything queued.
	SignalCancel = "cancel"
	// SignalPause holds this key until SignalResume.
	SignalPause = "pause"
	// SignalResume releases a paused key and re-checks a blocked or paused subscription.
	SignalResume = "resume"
	// SignalAttempt is internal: the deliver activity reports each failed attempt
	// so the workflow's status, query and search attributes stay exact while
	// Temporal retries the activity.
	SignalAttempt = activities.SignalAttempt
	// SignalSubscription is internal: the worker tells a key that its
	// subscription was removed (a SubscriptionSignal), whatever the key is
	// doing, so it drops its queue.
	SignalSubscription = "subscription"
	// SignalReachable is internal: a delivery to the subscriber app has just
	// succeeded, so a key waiting because the app was unreachable tries again
	// now instead of at the end of its back-off.
	SignalReachable = "reachable"
)

// Workflow Updates for operators. They carry the same payloads, run the
// same handlers and write the same audit rows as the signals of the same
// names, and answer with an OpResult; a malformed request is rejected by
// the update's validator before it reaches the workflow's history.
const (
	UpdateRedeliver = SignalRedeliver
	UpdateCancel    = SignalCancel
	UpdatePause     = SignalPause
	UpdateResume    = SignalResume
)

// OpResult is what an operator action did to a key: the answer of an
// Update. Changed is false when there was nothing to do; Reason then says
// why, with the code the audit row carries.
type OpResult struct {
	Changed bool        `json:"changed"`
	Reason  reason.Code `json:"reason,omitempty"`
	// Requeued lists the events put back in the queue (redeliver), Cancelled
	// the events dropped (cancel), in order.
	Requeued  []string `json:"requeued,omitempty"`
	Cancelled []string `json:"cancelled,omitempty"`
	// Refused holds the named events that could not be requeued, with why.
	Refused map[string]reason.Code `json:"refused,omitempty"`
	// Status and Queued describe the key afterwards.
	Status string `json:"status"`
	Queued int    `json:"queued"`
}

// SettingsActivity is the activity, registered by the worker, that returns
// the worker's delivery settings as Params. A workflow started without
// settings (by an operator's redeliver, not by the relay) asks for them once.
const SettingsActivity = "DeliverySettings"

// StartActivity is the local activity, registered by Register, with which
// every run of a key's workflow begins (QueueFromLogVersion): it answers
// the worker's delivery settings and what the key owes, read from its
// outcome rows.
const StartActivity = "DeliveryStart"

// StartInput names the key whose run begins.
type StartInput struct {
	SubscriptionID string `json:"subscriptionId"`
	SubjectKey     string `json:"subjectKey"`
	// Busy and Quiet are the run's hints from its input (Params), which
	// StartActivity hands back in its settings: a run decides by its
	// recorded result, so a run whose start an older worker read (which
	// hands back no hints) replays on any worker as it ran.
	Busy  bool `json:"busy,omitempty"`
	Quiet bool `json:"quiet,omitempty"`
	// First asks the read to go on to the key's first delivery when the
	// rows allow it (DeliverInStartVersion, firstDelivery).
	First *FirstInput `json:"first,omitempty"`
}

// FirstInput is what StartActivity needs of the run to make its first
// delivery: the subscriber's app, the deadline of the workflow task's
// local attempts (localDeadline), and how long the delivery may take before
// it is given up, as a local attempt's timeout is (the deadline and
// localGrace from the run's clock: a duration, whatever the worker's clock
// says).
type FirstInput struct {
	SubscriberApp string        `json:"subscriberApp"`
	Deadline      time.Time     `json:"deadline"`
	Timeout       time.Duration `json:"timeout"`
}

// FirstDelivery is the first delivery StartActivity made after its read:
// the batch it delivered (the head and the events behind it, as the run's
// batch takes them), the read it asked for after it (DeliverInput.ThenRead),
// and the Deliver execution's result, or its error's message.
type FirstDelivery struct {
	Events   []activities.Event       `json:"events"`
	ThenRead int                      `json:"thenRead,omitempty"`
	Result   activities.DeliverResult `json:"result"`
	Error    string                   `json:"error,omitempty"`
}

// StartResult is the worker's settings (defaults filled in) and the first
// part of what the key owes.
type StartResult struct {
	Settings Params                 `json:"settings"`
	Queue    activities.QueueResult `json:"queue"`
	// Policy is the subscription's error policy (ErrorPolicyChange).
	Policy ErrorPolicy `json:"policy,omitzero"`
	// First is the delivery the read went on to (StartInput.First): Queue
	// is what the key owed before it.
	First *FirstDelivery `json:"first,omitempty"`
}

// QueryState is the query that returns a State as JSON.
const QueryState = "state"

// Search attributes, registered by the dev scripts and docker-compose.
var (
	SASubscription = temporal.NewSearchAttributeKeyKeyword("HeraldSubscription")
	SAApp          = temporal.NewSearchAttributeKeyKeyword("HeraldApp")
	SAEventType    = temporal.NewSearchAttributeKeyKeyword("HeraldEventType")
	SAStatus       = temporal.NewSearchAttributeKeyKeyword("HeraldStatus")
	SAQueued       = temporal.NewSearchAttributeKeyInt64("HeraldQueued")
)

// SABuildIDs is Temporal's own search attribute of the build ids whose
// workers completed a run's workflow tasks. It is not Herald's, and not in
// SearchAttributes: the server defines it and writes it (WithBuildID).
var SABuildIDs = temporal.NewSearchAttributeKeyKeywordList("BuildIds")

// WithBuildID is sa with BuildIds as the server writes it when an
// unversioned worker of buildID completes a run's workflow task:
// "unversioned", then "unversioned:" and the id. The server adds them at a
// run's first completed task, and when that changes BuildIds it writes the
// run's record to its visibility store again, unless the task also closes
// the run. A run that stays open (it waits idle for the key's next events)
// cost a second visibility write for that alone: on the default dev server,
// a sixth of its CPU in a burst of new keys (CHANGELOG). Started with the
// ids of the worker that takes its first task, the run changes nothing
// there. An empty buildID leaves sa as it is.
func WithBuildID(sa temporal.SearchAttributes, buildID string) temporal.SearchAttributes {
	if buildID == "" {
		return sa
	}
	return temporal.NewSearchAttributes(sa.Copy(), SABuildIDs.ValueSet([]string{"unversioned", "unversioned:" + buildID}))
}

// SearchAttributes lists every search attribute above: the one list that the
// tests, the benchmark and (checked by deploy's tests) the dev scripts and
// docker-compose register on a namespace.
var SearchAttributes = []temporal.SearchAttributeKey{SASubscription, SAApp, SAEventType, SAStatus, SAQueued}

// SearchAttributeTypes maps each search attribute's name to its type, the
// form the operator service's AddSearchAttributes takes.
func SearchAttributeTypes() map[string]enumspb.IndexedValueType {
	out := make(map[string]enumspb.IndexedValueType, len(SearchAttributes))
	for _, k := range SearchAttributes {
		out[k.GetName()] = k.GetValueType()
	}
	return out
}

// DeliveryID is the workflow id of the delivery workflow of one subscription and
// subject key: "deliver:<subscription-id>:<subject-key>".
func DeliveryID(subscriptionID, subjectKey string) string {
	return activities.DeliveryWorkflowID(subscriptionID, subjectKey)
}

// SplitDeliveryID is the subscription id and subject key of a delivery
// workflow id (payload.SplitDeliveryWorkflowID): the subscription id ends at
// the first ":" after its "@<version>"; the subject key may be empty.
func SplitDeliveryID(id string) (subscriptionID, subjectKey string, ok bool) {
	return payload.SplitDeliveryWorkflowID(id)
}

// IsDeliveryID reports whether id starts as a delivery workflow id does.
func IsDeliveryID(id string) bool { return payload.IsDeliveryWorkflowID(id) }

// Event is one event as it travels in a signal and is queued: its id and its
// sequence number in the event log. Bodies never travel through Temporal.
type Event = activities.Event

// EventSignal is the payload of SignalEvent.
type EventSignal struct {
	Events []Event `json:"events"`
}

// RedeliverSignal is the payload of SignalRedeliver. EventIDs (a replay
// window, in sequence order) are put back in front of the queue like EventID.
type RedeliverSignal struct {
	EventID  string   `json:"eventId,omitempty"`
	EventIDs []string `json:"eventIds,omitempty"`
	Actor    string   `json:"actor,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

// CancelSignal is the payload of SignalCancel.
type CancelSignal struct {
	EventID string `json:"eventId,omitempty"`
	All     bool   `json:"all,omitempty"`
	Actor   string `json:"actor,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// SubscriptionSignal is the payload of SignalSubscription.
type SubscriptionSignal struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// ControlSignal is the payload of SignalPause and SignalResume.
type ControlSignal struct {
	Actor  string `json:"actor,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Params configure a delivery workflow. The relay passes them when it starts
// the workflow; they are carried across continue-as-new.
type Params struct {
	SubscriptionID string `json:"subscriptionId"`
	SubscriberApp  string `json:"subscriberApp"`
	EventType      string `json:"eventType"`
	SubjectKey     string `json:"subjectKey"`

	// RetrySchedule holds the delay before each retry; len+1 attempts in all,
	// unless Attempts says fewer.
	RetrySchedule []time.Duration `json:"retrySchedule,omitempty"`
	// Attempts, when set, is the subscription's own attempt count
	// (manifest maxAttempts, ErrorPolicyChange), read from its row at each
	// run's start.
	Attempts int `json:"attempts,omitempty"`
	// DeliveryTimeout bounds one HTTP attempt.
	DeliveryTimeout time.Duration `json:"deliveryTimeout,omitempty"`
	// RearmCooldown is how long a failed key waits before re-arming itself.
	RearmCooldown time.Duration `json:"rearmCooldown,omitempty"`
	// MaxRearms caps consecutive automatic re-arms (0: the default, 3;
	// NoRearms: never re-arm by itself).
	MaxRearms int `json:"maxRearms,omitempty"`
	// IdleTimeout completes the workflow after this long with nothing queued.
	IdleTimeout time.Duration `json:"idleTimeout,omitempty"`
	// EndQuietKeys: a run that has taken no event signal completes as soon
	// as the rows say the key owes nothing, without the idle wait
	// (HERALD_END_QUIET_KEYS). Read from the worker at each run's start
	// (StartActivity's recorded result), so a run replays as it ran.
	EndQuietKeys bool `json:"endQuietKeys,omitempty"`
	// Busy: the relay started the key again within its hot window
	// (relay.Relay.HotWindow), so its next events most likely follow soon:
	// the run waits idle when it owes nothing, as a run that took a signal
	// does, and the key's next events are signals, not starts. A hint from
	// the start's input, which the run takes from StartActivity's recorded
	// result (StartInput): it decides only whether a run ending quiet ends
	// at once or after its idle wait, never what the key owes.
	Busy bool `json:"busy,omitempty"`
	// Quiet: the relay asks the run to end as soon as its rows say the key
	// owes nothing, as EndQuietKeys does, because the runs it started to
	// wait idle are at their cap (relay.Relay.IdleRuns). A hint from the
	// start's input, like Busy, which wins over it.
	Quiet bool `json:"quiet,omitempty"`
	// RecheckInterval is how often a blocked or paused subscription is re-checked.
	RecheckInterval time.Duration `json:"recheckInterval,omitempty"`
	// MaxBatch caps how many consecutive events one activity execution delivers.
	MaxBatch int `json:"maxBatch,omitempty"`
	// MaxQueue caps the events a key holds in memory (and carries across
	// continue-as-new); the rest stays in PostgreSQL as its backlog, read
	// back in order as the queue drains (default DefaultMaxQueue).
	MaxQueue int `json:"maxQueue,omitempty"`
	// BatchTime caps how long one execution keeps taking events
	// (activities.DefaultBatchTime when zero).
	BatchTime time.Duration `json:"batchTime,omitempty"`
	// SignalsPerRun triggers continue-as-new after this many signals in a run.
	SignalsPerRun int `json:"signalsPerRun,omitempty"`
	// HoldExpiry cancels (retention_expired) an event held longer than this.
	HoldExpiry time.Duration `json:"holdExpiry,omitempty"`

	// Carry is the state handed over by continue-as-new; nil on a fresh start.
	Carry *Carry `json:"carry,omitempty"`
	// Version, when NoMarkerVersion, makes a new run take OneMarkerVersion's
	// behaviour without recording FirstAttemptChange's marker and the search
	// attribute upsert that comes with it (delivery.go); replaying, a marker
	// an older worker recorded still decides. The relay and continue-as-new
	// set it; BareStartVersion does the same for a run the relay started
	// with no search attributes, which writes them when it first shows a
	// status, and DeliverInStartVersion what the relay now sets for such a
	// run: its start's read may make its first delivery. Any other number
	// is ignored, and the run asks GetVersion as before.
	Version int `json:"version,omitempty"`
}

// DefaultRetrySchedule is the schedule of docs/design.md#the-delivery-workflow: 8 attempts in all.
var DefaultRetrySchedule = []time.Duration{
	time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute,
	10 * time.Minute, 30 * time.Minute, time.Hour,
}

// NoRearms as Params.MaxRearms turns automatic re-arming off
// (HERALD_MAX_REARMS=0).
const NoRearms = -1

// Defaults of the delivery settings (docs/configuration.md): the one place
// each is written. The delivery timeout's is activities.DefaultPostTimeout,
// the batch time's activities.DefaultBatchTime.
const (
	// DefaultHoldExpiry is how long a key may hold an event (HERALD_HOLD_EXPIRY).
	DefaultHoldExpiry = 720 * time.Hour
	// DefaultRearmCooldown is how long a failed key waits before it re-arms
	// itself (HERALD_REARM_COOLDOWN).
	DefaultRearmCooldown = time.Hour
	// DefaultMaxRearms is how many times in a row a failed key re-arms itself
	// (HERALD_MAX_REARMS).
	DefaultMaxRearms = 3
	// DefaultIdleTimeout is how long a key's workflow waits with nothing
	// queued before it completes (HERALD_IDLE_TIMEOUT).
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultRecheckInterval is how often a blocked or paused subscription
	// is re-checked (Params.RecheckInterval).
	DefaultRecheckInterval = time.Minute
	// DefaultMaxQueue is how many events a key holds in memory
	// (Params.MaxQueue).
	DefaultMaxQueue = 5000
	// DefaultMaxBatch caps the events one activity execution delivers
	// (Params.MaxBatch).
	DefaultMaxBatch = 50
	// DefaultSignalsPerRun is the signals after which a run continues as
	// new (Params.SignalsPerRun).
	DefaultSignalsPerRun = 2000
)

// WithDefaults fills every zero setting with its default.
func (p Params) WithDefaults() Params {
	if len(p.RetrySchedule) == 0 {
		p.RetrySchedule = DefaultRetrySchedule
	}
	if p.DeliveryTimeout <= 0 {
		p.DeliveryTimeout = activities.DefaultPostTimeout
	}
	if p.RearmCooldown <= 0 {
		p.RearmCooldown = DefaultRearmCooldown
	}
	if p.MaxRearms == 0 {
		p.MaxRearms = DefaultMaxRearms
	}
	if p.IdleTimeout <= 0 {
		p.IdleTimeout = DefaultIdleTimeout
	}
	if p.RecheckInterval <= 0 {
		p.RecheckInterval = DefaultRecheckInterval
	}
	if p.MaxQueue <= 0 {
		p.MaxQueue = DefaultMaxQueue
	}
	if p.MaxBatch <= 0 {
		p.MaxBatch = DefaultMaxBatch
	}
	if p.SignalsPerRun <= 0 {
		p.SignalsPerRun = DefaultSignalsPerRun
	}
	if p.HoldExpiry <= 0 {
		p.HoldExpiry = DefaultHoldExpiry
	}
	return p
}

// MaxAttempts is the number of attempts a delivery gets: one more than retries.
func (p Params) MaxAttempts() int {
	if p.Attempts > 0 {
		return min(p.Attempts, len(p.RetrySchedule)+1)
	}
	return len(p.RetrySchedule) + 1
}

// State is the result of QueryState.
type State struct {
	Subscription string        `json:"subscription"`
	Subject      string        `json:"subject"`
	Status       string        `json:"status"`
	Head         *HeadState    `json:"head,omitempty"`
	Queued       []QueuedEvent `json:"queued"`
	Counters     Counters      `json:"counters"`
	Outcomes     []Outcome     `json:"outcomes"`
	KeyPaused    bool          `json:"keyPaused,omitempty"`
}

// HeadState describes the event at the head of the queue.
type HeadState struct {
	EventID       string     `json:"eventId"`
	Seq           int64      `json:"seq"`
	Type          string     `json:"type"`
	Attempt       int        `json:"attempt"`
	Code          string     `json:"code,omitempty"`
	LastCode      string     `json:"lastCode,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitzero"`
	MaxAttempts   int        `json:"maxAttempts,omitempty"`
}

// QueuedEvent is one queued event as the state query shows it.
type QueuedEvent struct {
	EventID string `json:"eventId"`
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	// HeldBy names the event id this one waits behind, when the head is stuck.
	HeldBy string `json:"heldBy,omitempty"`
}

// Counters count outcomes over the workflow's whole life (carried across runs).
type Counters struct {
	Delivered int `json:"delivered"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Rearms    int `json:"rearms"`
	// Skipped counts events settled as skipped_after_failure.
	Skipped int `json:"skipped,omitempty"`
}

// Outcome is one final outcome of one event (the last 20 are kept).
type Outcome struct {
	EventID  string    `json:"eventId"`
	Seq      int64     `json:"seq"`
	Result   string    `json:"result"` // delivered, failed, skipped, cancelled, expired, rejected
	Code     string    `json:"code,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	At       time.Time `json:"at"`
}

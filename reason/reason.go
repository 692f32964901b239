// Package reason holds the operator reason codes: why an operator action
// on a delivery key did nothing (workflows.OpResult.Reason, the audit row's
// error code), why a named event was not requeued (OpResult.Refused), and
// why a signal was rejected (the delivery.signal_rejected audit row).
// They are the one list of docs/design.md#operator-reason-codes (checked by
// a test), and travel in workflow histories, so a code is never renamed.
// The package imports nothing of Herald's: the workflow, the store (which
// answers the refusals) and the command line all use it.
package reason

// Code is an operator reason code.
type Code string

// Why an action did nothing.
const (
	// NothingToRedeliver: a redeliver without an event id, and the head is
	// not failed, retrying or waiting.
	NothingToRedeliver Code = "nothing_to_redeliver"
	// NoFailedHead: a cancel without an event id, and the head is not
	// failed, retrying or waiting.
	NoFailedHead Code = "no_failed_head"
	// EventNotQueued: a cancel named an event the key does not hold.
	EventNotQueued Code = "event_not_queued"
	// NothingQueued: a cancel --all, and the key holds nothing.
	NothingQueued Code = "nothing_queued"
	// AlreadyPaused: a pause of a paused key.
	AlreadyPaused Code = "already_paused"
	// NotPaused: a resume of a key that is not paused and whose
	// subscription is not waiting to be re-checked.
	NotPaused Code = "not_paused"
	// HeadChanged: an action about the head (no event id) found another
	// head when it applied: the one it was sent for was settled meanwhile.
	HeadChanged Code = "head_changed"
	// RequeueFailed: the workflow could not read the event log to requeue
	// the named events.
	RequeueFailed Code = "requeue_failed"
	// UnknownState: the internal subscription signal named a state the
	// workflow does not act on.
	UnknownState Code = "unknown_state"
	// SubscriptionNotCancelled: the internal subscription signal said the
	// subscription was removed, and the database says it is not.
	SubscriptionNotCancelled Code = "subscription_not_cancelled"
)

// Why a named event was not requeued (a redeliver by id or a replay window).
const (
	// EventNotFound: not a UUID, not in the event log, or removed by retention.
	EventNotFound Code = "event_not_found"
	// EventNotForKey: the event belongs to another subject key, event type
	// or version.
	EventNotForKey Code = "event_not_for_key"
	// NotDispatchedYet: the relay has yet to hand the event out; requeued
	// now, it would overtake older events.
	NotDispatchedYet Code = "not_dispatched_yet"
	// AlreadyQueued: the key holds the event already.
	AlreadyQueued Code = "already_queued"
	// Filtered: the subscription's content filter excluded the event.
	Filtered Code = "filtered"
)

// EventNotOwed is the reason of a delivery.signal_rejected audit row: the
// relay's event signal named events that are no outcome row of the key.
// No operator action answers it.
const EventNotOwed Code = "event_not_owed"

// Texts explain each code to an operator (the command line prints them).
var Texts = map[Code]string{
	NothingToRedeliver:       "the head is not failed, retrying or waiting",
	NoFailedHead:             "the head is not failed, retrying or waiting",
	EventNotQueued:           "that event is not queued for this key",
	NothingQueued:            "nothing is queued for this key",
	AlreadyPaused:            "the key is paused already",
	NotPaused:                "the key is not paused, and its subscription is not waiting to be re-checked",
	HeadChanged:              "the head it was sent for was settled meanwhile; look again",
	RequeueFailed:            "the workflow could not read the event log; try again",
	UnknownState:             "the subscription signal named a state the key does not act on",
	SubscriptionNotCancelled: "the subscription is not removed",
	EventNotFound:            "the event is not in the event log",
	EventNotForKey:           "the event belongs to another subject key or event type",
	NotDispatchedYet:         "the relay has not handed the event out yet; try again shortly",
	AlreadyQueued:            "the event is queued for this key already",
	Filtered:                 "the subscription's filter excluded the event",
	EventNotOwed:             "the signal named events that are not the key's",
}

// All lists every code, in the order of docs/design.md's list.
var All = []Code{
	NothingToRedeliver, NoFailedHead, EventNotQueued, NothingQueued, AlreadyPaused, NotPaused,
	HeadChanged, RequeueFailed, UnknownState, SubscriptionNotCancelled,
	EventNotFound, EventNotForKey, NotDispatchedYet, AlreadyQueued, Filtered,
	EventNotOwed,
}

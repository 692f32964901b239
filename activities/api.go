// Package activities holds everything that touches the network or the database
// on behalf of a workflow: the signed HTTP delivery, audit writes and event
// look-ups. Activities are methods on Activities, which holds their dependencies.
package activities

import (
	"time"

	"herald/reason"
	"herald/store"
	"herald/workflows/payload"
)

// SignalAttempt is the name of the internal signal by which the deliver
// activity reports each failed attempt to its own workflow.
const SignalAttempt = "attempt"

// Event is one queued event as Temporal carries it: its id and its sequence
// number in the event log, never its body. The deliver activity reads the
// body, and checks both, in PostgreSQL.
type Event struct {
	ID  string `json:"id"`
	Seq int64  `json:"seq"`
	// Again marks an operator's redelivery: it is delivered even though its
	// outcome for the subscription is already settled.
	Again bool `json:"again,omitempty"`
}

// DeliveryWorkflowID is the workflow id of the delivery workflow of one
// subscription and subject key: "deliver:<subscription-id>:<subject-key>"
// (store.DeliveryWorkflowID, which Herald's key events name).
func DeliveryWorkflowID(subscriptionID, subjectKey string) string {
	return store.DeliveryWorkflowID(subscriptionID, subjectKey)
}

// Error codes of a delivery attempt (docs/design.md#the-http-contract-of-a-delivery).
const (
	CodeSchemaMismatch          = "schema_mismatch"
	CodeSubscriptionUnavailable = "subscription_unavailable"
	CodeThrottled               = "throttled"
	CodeHandlerFailed           = "handler_failed"
	CodeHandlerTimeout          = "handler_timeout"
	CodeConnectionLost          = "connection_lost"
	CodeSubscriberUnreachable   = "subscriber_unreachable"
	CodeEndpointForbidden       = "endpoint_forbidden"
	// CodeAttemptsExhausted: every attempt of the schedule failed; the last
	// attempt's code stays beside it.
	CodeAttemptsExhausted = "attempts_exhausted"
	// CodeRetentionExpired: the event was held longer than the hold expiry.
	CodeRetentionExpired = store.CodeRetentionExpired
	// CodeSignalRejected: a signal named an event that is not accepted for
	// the key's subscription and subject, or with the wrong sequence number.
	CodeSignalRejected = "signal_rejected"
	// CodeSubscriptionRemoved: the subscription was removed while the key held events.
	CodeSubscriptionRemoved = store.CodeSubscriptionRemoved
	// CodeNotBefore marks an execution's first attempt that only waits for a
	// retry delay carried over from an earlier execution; it is not counted.
	CodeNotBefore = "not_before"
)

// IsTerminal reports whether a code ends the delivery at once, whatever the
// attempts left.
func IsTerminal(code string) bool {
	return code == CodeSchemaMismatch || code == CodeEndpointForbidden
}

// Outcomes of a Deliver execution that returns without error.
const (
	// OutcomeDelivered: every event the execution took (Done) is settled;
	// the rest of the input, past its BatchTime, stays queued for the next.
	OutcomeDelivered = "delivered"
	// OutcomePartial: Delivered events went through, then the next one failed
	// with a counted attempt (Attempt, Code, Error, RetryAfter). In a Local
	// execution Done may be empty: the head's own attempt failed.
	OutcomePartial = "partial"
	// OutcomeUnreachable: nothing reached the subscriber for the next event;
	// the attempt is not counted.
	OutcomeUnreachable = "unreachable"
	// OutcomeInactive: the subscription is not active (SubscriptionState says
	// why); nothing was sent for the next event.
	OutcomeInactive = "inactive"
	// OutcomeHandOver: a local execution stopped at its deadline: Done went
	// through, the next event was not sent (Code empty) or its POST was cut
	// short and is not counted (Code handler_timeout); a regular activity
	// takes it over at once.
	OutcomeHandOver = "handover"
	// OutcomeLimited: the subscriber app's limits (manifest "limits") held
	// the next event back for LimitHeadWait, or the worker holds back an app
	// whose POSTs time out (SlowAppPosts; RetryAfter then says how long to
	// wait); nothing was sent and no attempt is spent (Attempt is the one
	// the head would have made). The workflow starts the next execution at
	// once, or after RetryAfter.
	OutcomeLimited = "limited"
)

// Subscription states a Deliver execution reports (store's names).
const (
	SubscriptionCancelled = store.StateCancelled
	SubscriptionPaused    = store.StatePaused
)

// Statuses of an outcome row (store's names), for the workflow's own writes.
const (
	RowQueued    = store.EventQueued
	RowDelivered = store.EventDelivered
	RowFailed    = store.EventFailed
	RowCancelled = store.EventCancelled
	RowExpired   = store.EventExpired
)

// SubscriptionUnknown is the SubscriptionState of an inactive outcome when
// the subscription could not be read (the database did not answer).
const SubscriptionUnknown = "unknown"

// ReasonKeyPaused is the SubscriptionReason of an inactive outcome whose
// key an operator paused (DeliverResult.KeyPaused).
const ReasonKeyPaused = "key_paused"

// DeliverInput is the input of Activities.Deliver.
type DeliverInput struct {
	SubscriptionID string  `json:"subscriptionId"`
	SubscriberApp  string  `json:"subscriberApp"`
	SubjectKey     string  `json:"subjectKey"`
	Events         []Event `json:"events"`
	// PriorAttempts counts the attempts of Events[0] spent in earlier executions.
	PriorAttempts int `json:"priorAttempts,omitempty"`
	// NotBefore delays the first attempt of this execution (a retry delay
	// carried over from a partial batch); the wait is a retry, not an attempt.
	NotBefore time.Time `json:"notBefore,omitempty"`
	// RetrySchedule holds the delay before each retry; len+1 attempts in all,
	// unless MaxAttempts says fewer.
	RetrySchedule []time.Duration `json:"retrySchedule"`
	// MaxAttempts, when set, is the subscription's own attempt count
	// (manifest maxAttempts, at most len(RetrySchedule)+1).
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// Timeout bounds one HTTP attempt.
	Timeout time.Duration `json:"timeout"`
	// BatchTime is how long an execution keeps taking the next event of the
	// batch (default DefaultBatchTime): after it, it ends with what it
	// delivered, so an operator's action waits for no more than this and
	// one attempt.
	BatchTime time.Duration `json:"batchTime,omitempty"`
	// Local marks an execution as a local activity, run by the worker inside
	// the workflow task: a first attempt with no Temporal retries behind it,
	// which must end by Deadline. The head's failed attempt is then a result
	// (OutcomePartial), not an error; an app with limits is not waited for
	// (OutcomeLimited at once); a POST that the deadline would cut short is
	// not made or not counted (OutcomeHandOver). The workflow continues with
	// a regular activity.
	Local    bool      `json:"local,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
	// LocalHead names the head of this run's local execution for this
	// batch, which may have ended without a result: an event it delivered
	// (its outcome row names it) counts as this execution's delivery.
	// PrevRun is the run that continued as new into this one, whose local
	// executions count the same way.
	LocalHead string `json:"localHead,omitempty"`
	PrevRun   string `json:"prevRun,omitempty"`
	// ThenRead, when positive, asks a local execution that delivers the
	// whole batch and records every outcome row to read, last, what the key
	// still owes (KeyQueue with this limit) and return it as
	// DeliverResult.Owed. A run that ends quiet (HERALD_END_QUIET_KEYS)
	// completes on that read, in the same local activity, rather than one
	// of its own after it.
	ThenRead int `json:"thenRead,omitempty"`
	// WaitsOutLimits: the workflow waits out the RetryAfter of a limited
	// result, so the execution may hold the batch back for an app whose
	// POSTs time out (SlowAppPosts). Workflow code from before it loops at
	// once on a limited result; for it nothing is held back.
	WaitsOutLimits bool `json:"waitsOutLimits,omitempty"`
}

// DefaultBatchTime is DeliverInput.BatchTime's default.
const DefaultBatchTime = 5 * time.Second

// Results of one event settled by a Deliver execution without a POST that
// failed.
const (
	// ResultDelivered: the subscriber answered 2xx.
	ResultDelivered = "delivered"
	// ResultSkipped: its outcome for the subscription was already settled
	// (Reason is that outcome: delivered, cancelled, expired); nothing was
	// sent. A delivered one may have been delivered by an execution that died
	// before reporting it.
	ResultSkipped = "skipped"
	// ResultRejected: not an accepted event of this subscription and subject
	// key, or its sequence number disagrees with the event log; nothing was
	// sent. Reason says which.
	ResultRejected = "rejected"
)

// SkippedDeliveredEarlier is the Reason of a skipped event that an earlier
// attempt of the same execution delivered (its worker died before it could
// report): the workflow counts it as delivered, once.
const SkippedDeliveredEarlier = "delivered_earlier"

// Settled is one event of the batch that a Deliver execution is done with.
type Settled struct {
	ID       string `json:"id"`
	Seq      int64  `json:"seq"`
	Result   string `json:"result"`
	Reason   string `json:"reason,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}

// DeliverResult is the result of a Deliver execution that returns without error.
type DeliverResult struct {
	Outcome string `json:"outcome"`
	// Done lists, in queue order, the events at the front of the batch that
	// this execution settled.
	Done []Settled `json:"done,omitempty"`
	// For partial and unreachable: the first unsettled event's attempt
	// number, code and error text; for limited, the attempt number only.
	Attempt    int           `json:"attempt,omitempty"`
	Code       string        `json:"code,omitempty"`
	Error      string        `json:"error,omitempty"`
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	// FailedAt, for partial: when that attempt failed. The retry delay
	// counts from it, not from when the workflow learnt of it. For a
	// handover with a Code: when the cut POST started.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// For inactive: the subscription's state and reason.
	SubscriptionState  string `json:"subscriptionState,omitempty"`
	SubscriptionReason string `json:"subscriptionReason,omitempty"`
	// KeyPaused, for inactive: the key's paused_keys row says an operator
	// paused it (SubscriptionReason ReasonKeyPaused); nothing was POSTed.
	KeyPaused bool `json:"keyPaused,omitempty"`
	// Unrecorded holds the outcome rows the execution could not write (the
	// database did not answer); the workflow writes them with Record.
	Unrecorded []OutcomeUpdate `json:"unrecorded,omitempty"`
	// Owed is what the key owed once this execution's outcome rows were
	// written (DeliverInput.ThenRead); nil when not asked, not delivered,
	// or the read failed.
	Owed *QueueResult `json:"owed,omitempty"`
	// LeaseKept: the key's lease could not be given back (the database did
	// not answer); it lapses on its own, and only this run may deliver the
	// key until then, so the run does not end quiet.
	LeaseKept bool `json:"leaseKept,omitempty"`
}

// FailureDetails ride on the ApplicationError that Deliver returns when the
// head event's attempt fails; the error's type is the code.
type FailureDetails struct {
	EventID string `json:"eventId"`
	Attempt int    `json:"attempt"`
	// Code is the outcome's code: the attempt's, or attempts_exhausted.
	Code string `json:"code"`
	// LastCode is the failed attempt's own code.
	LastCode string `json:"lastCode,omitempty"`
	Error    string `json:"error"`
	// Exhausted is true when this was the last attempt.
	Exhausted bool `json:"exhausted,omitempty"`
}

// AttemptReport is the payload of SignalAttempt.
type AttemptReport struct {
	EventID       string    `json:"eventId"`
	Attempt       int       `json:"attempt"`
	Code          string    `json:"code"`
	Error         string    `json:"error"`
	NextAttemptAt time.Time `json:"nextAttemptAt,omitempty"`
}

// OutcomeUpdate is a change to one event's outcome row for a subscription.
// It travels in workflow histories, so its encoding is the workflows'
// (payload.OutcomeUpdate); storeOutcomes converts it for the store.
type OutcomeUpdate = payload.OutcomeUpdate

// storeOutcomes converts outcome updates from their history form to the
// store's. The conversion stops compiling when either side changes a field,
// which is the moment to decide how recorded histories read.
func storeOutcomes(us []OutcomeUpdate) []store.OutcomeUpdate {
	if us == nil {
		return nil
	}
	out := make([]store.OutcomeUpdate, len(us))
	for i, u := range us {
		out[i] = store.OutcomeUpdate(u)
	}
	return out
}

// RecordInput is the input of Activities.Record: outcome rows of one key and
// the audit rows that go with them.
type RecordInput struct {
	SubscriptionID string          `json:"subscriptionId"`
	SubjectKey     string          `json:"subjectKey"`
	Outcomes       []OutcomeUpdate `json:"outcomes,omitempty"`
	Audit          []AuditEntry    `json:"audit,omitempty"`
}

// RequeueInput is the input of Activities.Requeue.
type RequeueInput struct {
	SubscriptionID string   `json:"subscriptionId"`
	SubjectKey     string   `json:"subjectKey"`
	EventIDs       []string `json:"eventIds"`
}

// RequeueResult lists the events put back in the queue, in sequence order,
// and the ids refused with why.
type RequeueResult struct {
	Events  []Event                `json:"events,omitempty"`
	Refused map[string]reason.Code `json:"refused,omitempty"`
}

// AuditEntry is the input of Activities.Audit.
type AuditEntry struct {
	Action     string         `json:"action"`
	Outcome    string         `json:"outcome,omitempty"` // allowed (default) or failed
	Actor      string         `json:"actor,omitempty"`   // system (default) or an operator
	TargetType string         `json:"targetType"`
	TargetID   string         `json:"targetId"`
	ErrorCode  string         `json:"errorCode,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

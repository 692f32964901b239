// Package activities holds everything that touches the network or the database
// on behalf of a workflow: the signed HTTP delivery, audit writes and event
// look-ups. Activities are methods on Activities, which holds their dependencies.
package activities

import (
	"encoding/json"
	"time"
)

// SignalAttempt is the name of the internal signal by which the deliver
// activity reports each failed attempt to its own workflow.
const SignalAttempt = "attempt"

// Event is one event to deliver: its id, its sequence number in the event log,
// its type and the CloudEvent JSON that is POSTed byte for byte.
type Event struct {
	ID       string          `json:"id"`
	Seq      int64           `json:"seq"`
	Type     string          `json:"type,omitempty"`
	Envelope json.RawMessage `json:"envelope,omitempty"`
}

// Error codes of a delivery attempt (SPEC §6).
const (
	CodeSchemaMismatch          = "schema_mismatch"
	CodeSubscriptionUnavailable = "subscription_unavailable"
	CodeThrottled               = "throttled"
	CodeHandlerFailed           = "handler_failed"
	CodeHandlerTimeout          = "handler_timeout"
	CodeConnectionLost          = "connection_lost"
	CodeSubscriberUnreachable   = "subscriber_unreachable"
	CodeEndpointForbidden       = "endpoint_forbidden"
	// CodeEventMissing: a queued event's body is gone from the event log
	// (retention removed it while the key was held); terminal.
	CodeEventMissing = "event_missing"
	// CodeNotBefore marks an execution's first attempt that only waits for a
	// retry delay carried over from an earlier execution; it is not counted.
	CodeNotBefore = "not_before"
)

// IsTerminal reports whether a code ends the delivery at once, whatever the
// attempts left.
func IsTerminal(code string) bool {
	return code == CodeSchemaMismatch || code == CodeEndpointForbidden || code == CodeEventMissing
}

// Outcomes of a Deliver execution that returns without error.
const (
	// OutcomeDelivered: every event of the input was delivered.
	OutcomeDelivered = "delivered"
	// OutcomePartial: Delivered events went through, then the next one failed
	// with a counted, retryable attempt (Attempt, Code, Error, RetryAfter).
	OutcomePartial = "partial"
	// OutcomeUnreachable: nothing reached the subscriber for the next event;
	// the attempt is not counted.
	OutcomeUnreachable = "unreachable"
	// OutcomeInactive: the subscription is not active (SubscriptionState says
	// why); nothing was sent for the next event.
	OutcomeInactive = "inactive"
)

// SubscriptionUnknown is the SubscriptionState of an inactive outcome when
// the subscription could not be read (the database did not answer).
const SubscriptionUnknown = "unknown"

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
	// RetrySchedule holds the delay before each retry; len+1 attempts in all.
	RetrySchedule []time.Duration `json:"retrySchedule"`
	// Timeout bounds one HTTP attempt.
	Timeout time.Duration `json:"timeout"`
}

// DeliverResult is the result of a Deliver execution that returns without error.
type DeliverResult struct {
	Outcome   string `json:"outcome"`
	Delivered int    `json:"delivered"`
	// For partial and unreachable: the first undelivered event's attempt
	// number, code and error text.
	Attempt    int           `json:"attempt,omitempty"`
	Code       string        `json:"code,omitempty"`
	Error      string        `json:"error,omitempty"`
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	// For inactive: the subscription's state and reason.
	SubscriptionState  string `json:"subscriptionState,omitempty"`
	SubscriptionReason string `json:"subscriptionReason,omitempty"`
}

// FailureDetails ride on the ApplicationError that Deliver returns when the
// head event's attempt fails; the error's type is the code.
type FailureDetails struct {
	Delivered int    `json:"delivered"`
	EventID   string `json:"eventId"`
	Attempt   int    `json:"attempt"`
	Code      string `json:"code"`
	Error     string `json:"error"`
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

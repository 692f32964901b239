// Package payload holds the types and names that travel inside Delivery
// workflow histories but are read or written by the store: an outcome row's
// change, a subscription's error policy, the audit actions and metadata keys
// the workflow writes (audit.go) and the workflow's id. Recorded histories
// carry their JSON, so their encoding is part of the workflow's contract,
// not of the database schema: the workflows package owns them
// (payload_test.go pins their encoding against every recorded history), and
// activities converts them to and from store's types at the activity
// boundary. This package imports nothing of Herald's, so that activities,
// workflows and store can all use it.
package payload

// OutcomeUpdate is a change to one event's outcome row for a subscription:
// what the Delivery workflow asks Record to write, and what a Deliver
// execution hands back unwritten (activities.DeliverResult.Unrecorded).
type OutcomeUpdate struct {
	EventID string `json:"eventId"`
	Seq     int64  `json:"seq"`
	Status  string `json:"status"`
	// Attempts is the attempts spent so far (kept when zero).
	Attempts int `json:"attempts,omitempty"`
	// Code is the outcome's code (empty clears it).
	Code string `json:"code,omitempty"`
	// LastCode and LastError describe the last failed attempt (kept when empty).
	LastCode  string `json:"lastCode,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// DeliveredBy names the local execution that delivered it (a delivered
	// outcome only; see activities.DeliverInput.Local).
	DeliveredBy string `json:"deliveredBy,omitempty"`
	// Restart: an operator's redelivery of a queued status; the row starts
	// again with no attempts spent and a new hold clock.
	Restart bool `json:"restart,omitempty"`
}

// ErrorPolicy is a subscription's error policy (docs/design.md#error-policy)
// as the ErrorPolicy local activity answers it: what its keys do with an
// event that failed for good, and how many attempts an event gets.
type ErrorPolicy struct {
	// OnFailure is manifest.OnFailureHold or manifest.OnFailureSkip.
	OnFailure string `json:"onFailure"`
	// MaxAttempts is the subscription's attempt count, 0 for the
	// worker's retry schedule.
	MaxAttempts int `json:"maxAttempts,omitempty"`
}

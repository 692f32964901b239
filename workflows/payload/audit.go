package payload

import "strings"

// Audit actions the Delivery workflow writes (docs/design.md#audit-log),
// defined here once: workflows writes them, store reads and labels them,
// and cli and api filter by them. Their values travel in histories, so they
// never change.
const (
	AuditDeliveryFailed      = "delivery.failed"
	AuditDeliveryRedelivered = "delivery.redelivered"
	AuditDeliveryCancelled   = "delivery.cancelled"
	AuditDeliveryRearmed     = "delivery.rearmed"
	AuditDeliveryPaused      = "delivery.paused"
	AuditDeliveryResumed     = "delivery.resumed"
	// AuditDeliverySkipped: an event settled as skipped_after_failure
	// instead of holding its key (onFailure skip).
	AuditDeliverySkipped = "delivery.skipped"
	// AuditSignalRejected: a signal named an event that is not accepted for
	// the key (error code signal_rejected, the reason in the metadata).
	AuditSignalRejected = "delivery.signal_rejected"
)

// Keys of the metadata the Delivery workflow writes with its audit rows.
// Store builds key events from some of them (KeyEventFacts); the others are
// read by people. The keys travel in histories, so they never change.
const (
	MetaSubscription = "subscription"
	MetaSubject      = "subject"
	MetaEventID      = "eventId"
	MetaSeq          = "seq"
	MetaAttempts     = "attempts"
	MetaLastCode     = "lastCode"
	MetaError        = "error"
	MetaFailedCode   = "failedCode"
	MetaCount        = "count"
	MetaEventIDs     = "eventIds"
	MetaHoldExpiry   = "holdExpiry"
	MetaReason       = "reason"
	MetaAgain        = "again"
	MetaSignal       = "signal"
	MetaState        = "state"
	MetaRearm        = "rearm"
	MetaMax          = "max"
	MetaRefused      = "refused"
	MetaAll          = "all"
)

// KeyEventFacts are the metadata keys store reads to build a key event
// (docs/operational-events.md), by the audit row that carries them:
// delivery.failed (herald.key.failed), delivery.skipped (herald.key.skipped)
// and a retention delivery.cancelled (herald.key.expired). The workflow
// writes exactly these, besides MetaSubscription and MetaSubject (tests on
// both sides hold them to it).
var KeyEventFacts = map[string][]string{
	AuditDeliveryFailed:    {MetaEventID, MetaSeq, MetaAttempts, MetaLastCode, MetaError},
	AuditDeliverySkipped:   {MetaEventID, MetaSeq, MetaAttempts, MetaFailedCode, MetaLastCode, MetaError},
	AuditDeliveryCancelled: {MetaCount, MetaEventIDs, MetaHoldExpiry},
}

// deliveryWorkflowPrefix starts every Delivery workflow id.
const deliveryWorkflowPrefix = "deliver:"

// DeliveryWorkflowID is the id of the Delivery workflow of one subscription
// and subject key, "deliver:<subscription-id>:<subject-key>"
// (docs/design.md#identifiers): the one place that builds it.
func DeliveryWorkflowID(subscriptionID, subject string) string {
	return deliveryWorkflowPrefix + subscriptionID + ":" + subject
}

// IsDeliveryWorkflowID reports whether id has the Delivery workflow's prefix.
func IsDeliveryWorkflowID(id string) bool { return strings.HasPrefix(id, deliveryWorkflowPrefix) }

// SplitDeliveryWorkflowID splits a Delivery workflow id into its
// subscription id and subject key. The subscription id ends at the first
// ":" after "@<version>", because no part of it may hold a ":" or "@" of
// its own; the subject key, which may, is the rest (possibly empty: callers
// check what they need).
func SplitDeliveryWorkflowID(id string) (subscriptionID, subject string, ok bool) {
	rest, ok := strings.CutPrefix(id, deliveryWorkflowPrefix)
	at := strings.IndexByte(rest, '@')
	if !ok || at < 0 {
		return "", "", false
	}
	colon := strings.IndexByte(rest[at:], ':')
	if colon < 0 {
		return "", "", false
	}
	return rest[:at+colon], rest[at+colon+1:], true
}

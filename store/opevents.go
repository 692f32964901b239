package store

import (
	"time"

	"herald/workflows/payload"
)

// The data of each operational event (docs/operational-events.md), one Go
// type per event type, so that a field cannot be renamed or dropped without
// the compiler, and the test that reads the document's field tables
// (TestOperationalEventsMatchTheDoc), noticing. A field that is optional in
// the document is omitempty here; every other is always written.

// KeyFields are the fields every key event (herald.key.*) starts with: the
// subscription, its app, what it receives, and the key.
type KeyFields struct {
	SubscriptionID string `json:"subscriptionId"`
	SubscriberApp  string `json:"subscriberApp"`
	EventType      string `json:"eventType"`
	EventVersion   int    `json:"eventVersion"`
	SubjectKey     string `json:"subjectKey"`
	WorkflowID     string `json:"workflowId"`
}

// KeyFailed is the data of herald.key.failed.
type KeyFailed struct {
	KeyFields
	EventID   string  `json:"eventId"`
	Seq       int64   `json:"seq,omitempty"`
	Code      string  `json:"code"`
	LastCode  string  `json:"lastCode,omitempty"`
	LastError string  `json:"lastError,omitempty"`
	Attempts  int64   `json:"attempts"`
	FailedAt  UTCTime `json:"failedAt"`
}

// KeyRecovered is the data of herald.key.recovered.
type KeyRecovered struct {
	KeyFields
	FailedEventID string  `json:"failedEventId"`
	FailedCode    string  `json:"failedCode"`
	FailedAt      UTCTime `json:"failedAt"`
	RecoveredAt   UTCTime `json:"recoveredAt"`
	FailedSeconds float64 `json:"failedSeconds"`
}

// KeyExpired is the data of herald.key.expired.
type KeyExpired struct {
	KeyFields
	Count      int64    `json:"count"`
	EventIDs   []string `json:"eventIds,omitempty"`
	HoldExpiry string   `json:"holdExpiry,omitempty"`
	ExpiredAt  UTCTime  `json:"expiredAt"`
}

// KeySkipped is the data of herald.key.skipped.
type KeySkipped struct {
	KeyFields
	EventID    string  `json:"eventId"`
	Seq        int64   `json:"seq,omitempty"`
	Code       string  `json:"code"`
	FailedCode string  `json:"failedCode,omitempty"`
	LastCode   string  `json:"lastCode,omitempty"`
	LastError  string  `json:"lastError,omitempty"`
	Attempts   int64   `json:"attempts"`
	SkippedAt  UTCTime `json:"skippedAt"`
}

// SubscriptionStateChanged is the data of herald.subscription.state_changed.
// A reason is null when the state is active.
type SubscriptionStateChanged struct {
	SubscriptionID string  `json:"subscriptionId"`
	SubscriberApp  string  `json:"subscriberApp"`
	EventType      string  `json:"eventType"`
	EventVersion   int     `json:"eventVersion"`
	From           string  `json:"from"`
	FromReason     *string `json:"fromReason"`
	To             string  `json:"to"`
	ToReason       *string `json:"toReason"`
	Actor          string  `json:"actor"`
	Reason         string  `json:"reason,omitempty"`
	ChangedAt      UTCTime `json:"changedAt"`
}

// OperationalEventData maps each operational event type to a zero value of
// its data's type.
var OperationalEventData = map[string]any{
	TypeKeyFailed:                KeyFailed{},
	TypeKeyRecovered:             KeyRecovered{},
	TypeKeyExpired:               KeyExpired{},
	TypeKeySkipped:               KeySkipped{},
	TypeSubscriptionStateChanged: SubscriptionStateChanged{},
}

// UTCTime is a time written as RFC 3339 in UTC, with the fractional digits
// it needs (time.RFC3339Nano).
type UTCTime time.Time

// MarshalJSON writes the time as a JSON string.
func (t UTCTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(time.RFC3339Nano) + `"`), nil
}

// keyFields starts the data of a key event.
func keyFields(sub subInfo, subscriptionID, subject string) KeyFields {
	return KeyFields{SubscriptionID: subscriptionID, SubscriberApp: sub.App, EventType: sub.Type,
		EventVersion: sub.Version, SubjectKey: subject, WorkflowID: DeliveryWorkflowID(subscriptionID, subject)}
}

// deliveryFacts are the facts of an audit row's metadata, read in this one
// place (factReaders): after a trip through Temporal the metadata is
// untyped JSON (numbers are float64), before it Go values.
type deliveryFacts struct {
	EventID, LastCode, Error, FailedCode, HoldExpiry string
	Seq, Attempts, Count                             int64
	EventIDs                                         []string
}

// factReaders read each metadata key a key event is built from, under the
// name the Delivery workflow writes it (payload.KeyEventFacts lists them by
// audit action; a test holds the two to each other).
var factReaders = map[string]func(f *deliveryFacts, v any){
	payload.MetaEventID:    func(f *deliveryFacts, v any) { f.EventID, _ = v.(string) },
	payload.MetaSeq:        func(f *deliveryFacts, v any) { f.Seq = max(metaInt(v), 0) }, // written only when positive
	payload.MetaAttempts:   func(f *deliveryFacts, v any) { f.Attempts = metaInt(v) },
	payload.MetaLastCode:   func(f *deliveryFacts, v any) { f.LastCode, _ = v.(string) },
	payload.MetaError:      func(f *deliveryFacts, v any) { f.Error, _ = v.(string) },
	payload.MetaFailedCode: func(f *deliveryFacts, v any) { f.FailedCode, _ = v.(string) },
	payload.MetaCount:      func(f *deliveryFacts, v any) { f.Count = metaInt(v) },
	payload.MetaHoldExpiry: func(f *deliveryFacts, v any) { f.HoldExpiry, _ = v.(string) },
	payload.MetaEventIDs:   func(f *deliveryFacts, v any) { f.EventIDs = metaStrings(v) },
}

func readDeliveryFacts(meta map[string]any) deliveryFacts {
	var f deliveryFacts
	for key, read := range factReaders {
		read(&f, meta[key])
	}
	return f
}

// metaStrings reads a list of strings: []string before a trip through
// Temporal, []any after it.
func metaStrings(v any) []string {
	switch ids := v.(type) {
	case []string:
		return ids
	case []any:
		var out []string
		for _, id := range ids {
			if s, ok := id.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// lastError bounds an attempt's error text as the events carry it.
func lastError(s string) string { return truncateUTF8(s, maxLastErrorBytes) }

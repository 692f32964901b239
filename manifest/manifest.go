// Package manifest reads and validates app manifests (docs/design.md#identifiers and #manifests): the events an
// app publishes, with their JSON Schemas, and the events it subscribes to.
package manifest

import (
	"encoding/json"
	"fmt"
)

// DefaultDeliveryPath is appended to an app's endpoint when the manifest does
// not name its own deliveryPath.
const DefaultDeliveryPath = "/api/_internal/events/v1/deliver"

// Manifest is one app's declaration of what it publishes and subscribes to.
type Manifest struct {
	App          string         `json:"app"`
	Endpoint     string         `json:"endpoint"`
	DeliveryPath string         `json:"deliveryPath,omitempty"`
	Events       []Event        `json:"events"`
	Subscribes   []Subscription `json:"subscribes"`
	// Limits, when set, bound the deliveries to this app (as a subscriber),
	// across every worker process together.
	Limits *Limits `json:"limits,omitempty"`

	// Source names where the manifest was read from (a file path), for messages.
	Source string `json:"-"`
	// builtin marks Herald's own manifest, the only one that may use the
	// app id ReservedApp (ParseBuiltin).
	builtin bool
}

// Limits bound the deliveries (HTTP POSTs) to one subscriber app, to any of
// its subscriptions, summed over every worker replica. A zero field is no
// limit.
type Limits struct {
	// MaxPerSecond is the sustained rate of POSTs, a positive number; the
	// burst is one second's worth (at least one).
	MaxPerSecond float64 `json:"maxPerSecond,omitempty"`
	// MaxInFlight is how many POSTs may be under way at once.
	MaxInFlight int `json:"maxInFlight,omitempty"`
}

// IsZero reports whether l sets no limit.
func (l *Limits) IsZero() bool { return l == nil || (l.MaxPerSecond == 0 && l.MaxInFlight == 0) }

// ReservedApp is the app id of Herald's own operational events
// (herald.key.failed, ...). No user manifest may use it.
const ReservedApp = "herald"

// IsBuiltin reports whether m is Herald's own manifest (ParseBuiltin).
func (m *Manifest) IsBuiltin() bool { return m.builtin }

// Event declares one published event type at one version.
type Event struct {
	Name        string          `json:"name"`
	Version     int             `json:"version"`
	Subject     string          `json:"subject"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	Automation  *bool           `json:"automation,omitempty"`
	Place       json.RawMessage `json:"place,omitempty"`
	DataSchema  json.RawMessage `json:"dataSchema"`
	// Deprecated marks a version publishers should move off: publishing it
	// still works and says so, and the catalog lists who still subscribes.
	Deprecated bool `json:"deprecated,omitempty"`
}

// Subscription names an event type and version the app wants delivered.
type Subscription struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	// Filter, when set, is a CEL expression over the CloudEvent (package
	// filter); only events it matches are delivered to the subscription.
	Filter string `json:"filter,omitempty"`
	// OnFailure is what the subscription's keys do with an event that
	// failed for good: OnFailureHold (the default, "") holds the key on it,
	// OnFailureSkip settles it as skipped_after_failure and moves on.
	OnFailure string `json:"onFailure,omitempty"`
	// MaxAttempts, when set (1 to MaxAttemptsLimit), is how many attempts
	// an event gets instead of the worker's retry schedule.
	MaxAttempts int `json:"maxAttempts,omitempty"`
}

// Error policies of a subscription (docs/design.md#error-policy).
const (
	OnFailureHold = "hold"
	OnFailureSkip = "skip"
	// MaxAttemptsLimit bounds a subscription's maxAttempts.
	MaxAttemptsLimit = 20
)

// EventType is the full type of an event declared by app: "<app>.<name>".
func EventType(app, name string) string { return app + "." + name }

// SubscriptionID is the readable id "<subscriber-app>:<event-type>@<version>".
func SubscriptionID(app, eventType string, version int) string {
	return fmt.Sprintf("%s:%s@%d", app, eventType, version)
}

// IsAutomation reports the automation flag, which defaults to true.
func (e Event) IsAutomation() bool { return e.Automation == nil || *e.Automation }

// HasPlace reports whether the event is resource-scoped (a non-null place).
func (e Event) HasPlace() bool {
	return len(e.Place) > 0 && string(e.Place) != "null"
}

// Path is the delivery path: DeliveryPath or the default.
func (m *Manifest) Path() string {
	if m.DeliveryPath != "" {
		return m.DeliveryPath
	}
	return DefaultDeliveryPath
}

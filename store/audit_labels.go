package store

import (
	"maps"
	"slices"
)

// auditLabels gives every audit action Herald writes a label an operator
// reads at a glance (`starter audit` shows it; its JSON has it as
// `label`). An action added anywhere in the code gets its label here: a
// test finds every action constant of the source and wants one.
var auditLabels = map[string]string{
	ActionAppApplied:                "App manifest applied",
	ActionAppRemoved:                "App removed",
	ActionAppLimitsChanged:          "App delivery limits changed",
	ActionSecretCreated:             "Webhook secret created",
	ActionSecretShown:               "Webhook secret shown",
	ActionSecretRotated:             "Webhook secret rotated",
	ActionAPITokenCreated:           "API token created",
	ActionAPITokenRevoked:           "API token revoked",
	ActionPublisherGranted:          "Publisher role granted",
	ActionPublisherRevoked:          "Publisher role dropped (app applied again)",
	ActionDeclarationRetired:        "Event declaration retired",
	ActionDeclarationRestored:       "Event declaration declared again",
	ActionDeclarationBreakingChange: "Breaking schema change applied",
	ActionSubscriptionFirstSeen:     "Subscription first seen",
	ActionSubscriptionStateChanged:  "Subscription state changed",
	ActionSubscriptionFilterChanged: "Subscription filter changed",
	ActionSubscriptionFilterError:   "Subscription filter failed (events delivered)",
	ActionSubscriptionPolicyChanged: "Subscription error policy changed",
	ActionDeliverySkipped:           "Failed event skipped, key moved on",
	ActionDeliveryFailed:            "Delivery failed, key held",
	ActionDeliveryRedelivered:       "Delivery redelivered",
	ActionDeliveryCancelled:         "Delivery cancelled",
	ActionDeliveryRearmed:           "Failed key re-armed itself",
	ActionDeliveryRecovered:         "Failed key delivering again",
	ActionDeliveryPaused:            "Key paused",
	ActionDeliveryResumed:           "Key resumed",
	ActionDeliverySignalRejected:    "Relay signal refused by a key",
	ActionRetentionPurged:           "Retention purge ran",
	ActionEventRelayRetried:         "Event given back to the relay",
	ActionKeyStripesFineOnly:        "Publishers lock fine key stripes only",
}

// AuditLabel is the readable label of an audit action. An action without
// one (a row written by a newer release) is its own label.
func AuditLabel(action string) string {
	if l, ok := auditLabels[action]; ok {
		return l
	}
	return action
}

// AuditActions lists every audit action that has a label, sorted.
func AuditActions() []string {
	return slices.Sorted(maps.Keys(auditLabels))
}

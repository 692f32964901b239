package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"herald/manifest"
	"herald/workflows/payload"
)

// Audit actions of a subscription's error policy (docs/design.md#error-policy).
const (
	// ActionSubscriptionPolicyChanged records a changed onFailure or
	// maxAttempts (from, to).
	ActionSubscriptionPolicyChanged = "subscription.policy_changed"
	// ActionDeliverySkipped records an event a key settled as
	// skipped_after_failure instead of holding on it; it comes with a
	// herald.key.skipped event.
	ActionDeliverySkipped = payload.AuditDeliverySkipped
)

// CodeSkippedAfterFailure is the code of an outcome row (status
// cancelled) whose event failed for good under onFailure skip.
const CodeSkippedAfterFailure = "skipped_after_failure"

// TypeKeySkipped is the operational event of a skipped event.
const TypeKeySkipped = "herald.key.skipped"

// Policy is a subscription's error policy as its row has it.
type Policy struct {
	// OnFailure is manifest.OnFailureHold or manifest.OnFailureSkip.
	OnFailure string `json:"onFailure"`
	// MaxAttempts is the subscription's attempt count, 0 for the
	// worker's retry schedule.
	MaxAttempts int `json:"maxAttempts,omitempty"`
}

// policyQuery reads a subscription's error policy (SubscriptionPolicy,
// KeyStart).
const policyQuery = `SELECT on_failure, max_attempts FROM subscriptions WHERE id = $1`

// SubscriptionPolicy reads a subscription's error policy; a subscription
// that does not exist answers ErrNotFound.
func (s *Store) SubscriptionPolicy(ctx context.Context, subscriptionID string) (Policy, error) {
	var p Policy
	var maxAttempts *int32
	err := s.Pool.QueryRow(ctx, policyQuery, subscriptionID).Scan(&p.OnFailure, &maxAttempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return Policy{}, ErrNotFound
	}
	if err != nil {
		return Policy{}, fmt.Errorf("read the error policy of %s: %w", subscriptionID, err)
	}
	if maxAttempts != nil {
		p.MaxAttempts = int(*maxAttempts)
	}
	return p, nil
}

// syncPolicy sets a subscription's error policy when it changed, and
// audits the change.
func syncPolicy(ctx context.Context, tx pgx.Tx, id string, sub manifest.Subscription, actor string) error {
	onFailure := sub.OnFailure
	if onFailure == "" {
		onFailure = manifest.OnFailureHold
	}
	var maxAttempts *int
	if sub.MaxAttempts > 0 {
		maxAttempts = &sub.MaxAttempts
	}
	var prevOnFailure string
	var prevMax *int32
	err := tx.QueryRow(ctx, `
		UPDATE subscriptions s SET on_failure = $2, max_attempts = $3
		  FROM subscriptions prev
		 WHERE prev.id = s.id AND s.id = $1 AND (s.on_failure <> $2 OR s.max_attempts IS DISTINCT FROM $3::integer)
		RETURNING prev.on_failure, prev.max_attempts`, id, onFailure, maxAttempts).Scan(&prevOnFailure, &prevMax)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // unchanged
	}
	if err != nil {
		return fmt.Errorf("set the error policy of %s: %w", id, err)
	}
	from := map[string]any{"onFailure": prevOnFailure}
	if prevMax != nil {
		from["maxAttempts"] = *prevMax
	}
	to := map[string]any{"onFailure": onFailure}
	if maxAttempts != nil {
		to["maxAttempts"] = *maxAttempts
	}
	return AppendAudit(ctx, tx, AuditEntry{
		Action: ActionSubscriptionPolicyChanged, Actor: actor, TargetType: TargetSubscription, TargetID: id,
		Metadata: map[string]any{"from": from, "to": to},
	})
}

package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Subscription states (docs/design.md#manifests).
const (
	StateActive    = "active"
	StateBlocked   = "blocked"
	StatePaused    = "paused"
	StateCancelled = "cancelled"
)

// Reasons a subscription is not active (docs/design.md#manifests). An active subscription has
// no reason.
const (
	ReasonEventNotDeclared          = "event_not_declared"
	ReasonResourceEventsUnsupported = "resource_events_unsupported"
	ReasonPausedByOperator          = "paused_by_operator"
	ReasonSubscriptionRemoved       = "subscription_removed"
)

// Subscription is one app's subscription to an event type at one version.
type Subscription struct {
	ID      string `db:"id" json:"id"`
	App     string `db:"app" json:"app"`
	Type    string `db:"type" json:"type"`
	Version int    `db:"version" json:"version"`
	State   string `db:"state" json:"state"`
	// Reason is empty when the subscription is active.
	Reason    string    `db:"reason" json:"reason,omitempty"`
	CreatedAt time.Time `db:"created_at" json:"createdAt"`
	UpdatedAt time.Time `db:"updated_at" json:"updatedAt"`
}

// Target is what a delivery needs to know about a subscription: whether it
// may deliver (State, Reason) and where to (the subscriber's endpoint and
// delivery path).
type Target struct {
	SubscriptionID string `db:"id" json:"subscriptionId"`
	Type           string `db:"type" json:"type"`
	Version        int    `db:"version" json:"version"`
	State          string `db:"state" json:"state"`
	Reason         string `db:"reason" json:"reason,omitempty"`
	App            string `db:"app" json:"app"`
	Endpoint       string `db:"endpoint" json:"endpoint"`
	DeliveryPath   string `db:"delivery_path" json:"deliveryPath"`
}

// URL is the address deliveries are POSTed to: the endpoint followed by the
// delivery path, with exactly one slash between them.
func (t Target) URL() string {
	return strings.TrimRight(t.Endpoint, "/") + "/" + strings.TrimLeft(t.DeliveryPath, "/")
}

// StateError reports a pause or resume the subscription's state does not
// allow, such as resuming a subscription that is not paused.
type StateError struct {
	SubscriptionID string
	// Op is "pause" or "resume".
	Op    string
	State string
}

// Error names the subscription, the refused operation and the state.
func (e *StateError) Error() string {
	if e.Op == "resume" {
		return fmt.Sprintf("cannot resume subscription %s: it is %s, not paused", e.SubscriptionID, e.State)
	}
	return fmt.Sprintf("cannot %s subscription %s: it is %s", e.Op, e.SubscriptionID, e.State)
}

const subscriptionColumns = `id, app, type, version, state, COALESCE(reason, '') AS reason, created_at, updated_at`

// ListSubscriptions returns the subscriptions of app, or of every app when
// app is empty, ordered by id. Cancelled subscriptions are included.
func (s *Store) ListSubscriptions(ctx context.Context, app string) ([]Subscription, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions
		WHERE $1 = '' OR app = $1 ORDER BY id`, app)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Subscription])
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	return subs, nil
}

// SubscriptionsTo returns every subscription to eventType at version,
// cancelled ones included, ordered by id.
func (s *Store) SubscriptionsTo(ctx context.Context, eventType string, version int) ([]Subscription, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions
		WHERE type = $1 AND version = $2 ORDER BY id`, eventType, version)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions to %s@%d: %w", eventType, version, err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Subscription])
	if err != nil {
		return nil, fmt.Errorf("list subscriptions to %s@%d: %w", eventType, version, err)
	}
	return subs, nil
}

// GetSubscription returns one subscription, or an error wrapping ErrNotFound.
func (s *Store) GetSubscription(ctx context.Context, id string) (Subscription, error) {
	return getSubscription(ctx, s.Pool, id, false)
}

func getSubscription(ctx context.Context, q Querier, id string, forUpdate bool) (Subscription, error) {
	sql := `SELECT ` + subscriptionColumns + ` FROM subscriptions WHERE id = $1`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	rows, err := q.Query(ctx, sql, id)
	if err != nil {
		return Subscription{}, fmt.Errorf("get subscription %s: %w", id, err)
	}
	sub, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Subscription])
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscription{}, fmt.Errorf("subscription %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Subscription{}, fmt.Errorf("get subscription %s: %w", id, err)
	}
	return sub, nil
}

// DeliveryTarget returns the subscription's state and its subscriber's
// address, or an error wrapping ErrNotFound. The deliver activity calls it
// before each delivery, which is how cancelling or pausing a subscription
// stops its queued deliveries.
func (s *Store) DeliveryTarget(ctx context.Context, subscriptionID string) (Target, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT s.id, s.type, s.version, s.state, COALESCE(s.reason, '') AS reason,
		       s.app, a.endpoint, a.delivery_path
		  FROM subscriptions s JOIN apps a ON a.id = s.app
		 WHERE s.id = $1`, subscriptionID)
	if err != nil {
		return Target{}, fmt.Errorf("delivery target %s: %w", subscriptionID, err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Target])
	if errors.Is(err, pgx.ErrNoRows) {
		return Target{}, fmt.Errorf("subscription %s: %w", subscriptionID, ErrNotFound)
	}
	if err != nil {
		return Target{}, fmt.Errorf("delivery target %s: %w", subscriptionID, err)
	}
	return t, nil
}

// SetSubscriptionPaused pauses (paused true) or resumes a subscription on an
// operator's behalf and returns it as it is afterwards.
//
// Pausing sets any state but cancelled to paused / paused_by_operator;
// pausing a paused subscription changes nothing. Resuming a paused
// subscription gives it the state declaration sync computes for it (active or
// blocked). Pausing a cancelled or resuming an unpaused subscription fails
// with a *StateError; an unknown id fails with an error wrapping ErrNotFound.
// reason, when given, is recorded in the audit row's metadata.
func (s *Store) SetSubscriptionPaused(ctx context.Context, id string, paused bool, actor, reason string) (Subscription, error) {
	op := "resume"
	if paused {
		op = "pause"
	}
	var out Subscription
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		// Same lock as declaration sync, so a resume computes its state from
		// settled declarations and never interleaves with a recompute.
		if err := lockSubscriptionStates(ctx, tx); err != nil {
			return err
		}
		sub, err := getSubscription(ctx, tx, id, true)
		if errors.Is(err, ErrNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		var to, toReason string
		switch {
		case paused && sub.State == StatePaused:
			out = sub
			return nil
		case paused && sub.State == StateCancelled, !paused && sub.State != StatePaused:
			return &StateError{SubscriptionID: id, Op: op, State: sub.State}
		case paused:
			to, toReason = StatePaused, ReasonPausedByOperator
		default:
			to, toReason, err = derivedState(ctx, tx, sub.Type, sub.Version)
			if err != nil {
				return err
			}
		}
		extra := map[string]any{}
		if reason != "" {
			extra["reason"] = reason
		}
		change := StateChange{SubscriptionID: id, From: sub.State, FromReason: sub.Reason, To: to, ToReason: toReason}
		if err := writeStateChange(ctx, tx, change, actor, extra); err != nil {
			return err
		}
		out, err = getSubscription(ctx, tx, id, false)
		return err
	})
	var se *StateError
	if errors.As(err, &se) {
		return Subscription{}, se // already names the operation and subscription
	}
	if err != nil {
		return Subscription{}, fmt.Errorf("%s subscription %s: %w", op, id, err)
	}
	return out, nil
}

// derivedState is the state declaration sync gives a subscription that is
// neither paused nor cancelled (docs/design.md#manifests).
func derivedState(ctx context.Context, q Querier, eventType string, version int) (state, reason string, err error) {
	var hasPlace bool
	err = q.QueryRow(ctx, `
		SELECT d.place IS NOT NULL AND d.place <> 'null'::jsonb
		  FROM declarations d JOIN apps a ON a.id = d.app
		 WHERE d.type = $1 AND d.version = $2
		   AND d.app = split_part($1, '.', 1)
		   AND d.retired_at IS NULL AND a.removed_at IS NULL`,
		eventType, version).Scan(&hasPlace)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", "", fmt.Errorf("look up declaration %s@%d: %w", eventType, version, err)
	}
	state, reason = stateFor(err == nil, hasPlace)
	return state, reason, nil
}

// stateFor maps what is declared for a subscription's type and version to
// the state it should be in.
func stateFor(declared, hasPlace bool) (state, reason string) {
	switch {
	case !declared:
		return StateBlocked, ReasonEventNotDeclared
	case hasPlace:
		return StateBlocked, ReasonResourceEventsUnsupported
	default:
		return StateActive, ""
	}
}

// writeStateChange moves a subscription to c.To / c.ToReason and writes its
// one subscription.state_changed audit row; extra adds metadata.
//
// It also writes the change's herald.subscription.state_changed event in tx.
func writeStateChange(ctx context.Context, q pgx.Tx, c StateChange, actor string, extra map[string]any) error {
	if _, err := q.Exec(ctx, `UPDATE subscriptions SET state = $2, reason = NULLIF($3, ''), updated_at = now()
		WHERE id = $1`, c.SubscriptionID, c.To, c.ToReason); err != nil {
		return fmt.Errorf("set subscription %s %s: %w", c.SubscriptionID, c.To, err)
	}
	meta := map[string]any{
		"from":       c.From,
		"to":         c.To,
		"fromReason": nullable(c.FromReason),
		"toReason":   nullable(c.ToReason),
	}
	for k, v := range extra {
		meta[k] = v
	}
	if err := AppendAudit(ctx, q, AuditEntry{
		Action:     ActionSubscriptionStateChanged,
		Actor:      actor,
		TargetType: TargetSubscription,
		TargetID:   c.SubscriptionID,
		Metadata:   meta,
	}); err != nil {
		return err
	}
	reason, _ := extra["reason"].(string)
	return emitStateChange(ctx, q, c, actor, reason)
}

// nullable makes an empty reason a JSON null, as the column stores it.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

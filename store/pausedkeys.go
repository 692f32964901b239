package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PausedKey is a key an operator paused and has not resumed: its
// paused_keys row, which holds the key paused whether or not a run of it
// is running (a terminated run's key stays paused, and its next run reads
// the row).
type PausedKey struct {
	Subscription string
	Subject      string
	// App and Type are the subscription's subscriber app and event type.
	App, Type string
	Actor     string
	PausedAt  time.Time
}

// PausedKeys lists the paused keys of the subscriptions subs (every
// subscription's when subs is nil), ordered by subscription and subject,
// from just after the key (afterSub, afterSubject) when afterSub is not
// empty, at most limit. PostgreSQL, not Temporal's visibility, answers:
// the listing of paused keys includes those without a running run.
func (s *Store) PausedKeys(ctx context.Context, subs []string, afterSub, afterSubject string, limit int) ([]PausedKey, error) {
	if subs != nil && len(subs) == 0 || !queryableText(afterSub) || !queryableText(afterSubject) {
		return []PausedKey{}, nil
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT p.subscription_id, p.subject, COALESCE(s.app, ''), COALESCE(s.type, ''), p.actor, p.paused_at
		  FROM paused_keys p LEFT JOIN subscriptions s ON s.id = p.subscription_id
		 WHERE ($1::text[] IS NULL OR p.subscription_id = ANY($1))
		   AND (p.subscription_id, p.subject) > ($2, $3)
		 ORDER BY p.subscription_id, p.subject
		 LIMIT $4`, subs, afterSub, afterSubject, limit)
	if err != nil {
		return nil, fmt.Errorf("list paused keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PausedKey, error) {
		var k PausedKey
		err := row.Scan(&k.Subscription, &k.Subject, &k.App, &k.Type, &k.Actor, &k.PausedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list paused keys: %w", err)
	}
	return keys, nil
}

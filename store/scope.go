package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A scope is what an API token may see (docs/operations-api.md#scopes): ""
// for an operator token (everything), else an app id: the subscriptions of
// that app (as subscriber) and the subscriptions to the event types it
// publishes (as publisher), and the events of either.

// InScope reports whether the subscription with id is in scope (its id
// names its subscriber app and event type).
func InScope(scope, subscriptionID string) bool {
	if scope == "" {
		return true
	}
	app, rest, ok := strings.Cut(subscriptionID, ":")
	if !ok {
		return false
	}
	return app == scope || strings.HasPrefix(rest, scope+".")
}

// ScopedSubscriptions returns the subscriptions in scope, filtered by
// subscriber app and subscription id when not empty, ordered by id.
func (s *Store) ScopedSubscriptions(ctx context.Context, scope, app, id string) ([]Subscription, error) {
	if !queryableText(scope) || !queryableText(app) || !queryableText(id) {
		return []Subscription{}, nil
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions
		WHERE ($1 = '' OR app = $1 OR split_part(type, '.', 1) = $1)
		  AND ($2 = '' OR app = $2) AND ($3 = '' OR id = $3)
		ORDER BY id`, scope, app, id)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Subscription])
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	return subs, nil
}

// ScopedEvent returns the accepted or dispatched event with id that scope
// may see: its own event (as publisher), or one handed to one of its
// subscriptions; app, when not empty, is the event's source app. An event
// out of scope is ErrNotFound, as an unknown one; several events of
// different apps with the id fail with ErrAmbiguousEvent.
func (s *Store) ScopedEvent(ctx context.Context, scope, app, id string) (StoredEvent, error) {
	evs, err := s.eventsWithID(ctx, scope, app, id)
	switch {
	case err != nil:
		return StoredEvent{}, err
	case len(evs) > 1:
		return StoredEvent{}, fmt.Errorf("event id %s names events of several apps: %w", id, ErrAmbiguousEvent)
	}
	return evs[0], nil
}

// ScopedEvents returns the accepted or dispatched events with id that
// scope may see, of every source app, ordered by source app; none is
// ErrNotFound.
func (s *Store) ScopedEvents(ctx context.Context, scope, id string) ([]StoredEvent, error) {
	return s.eventsWithID(ctx, scope, "", id)
}

// KeyHead is the head of a delivery key as the log holds it: its oldest
// queued or failed outcome row.
type KeyHead struct {
	Subscription string `json:"subscription"`
	Subject      string `json:"subject"`
	EventID      string `json:"eventId"`
	Seq          int64  `json:"seq"`
	Status       string `json:"status"`
	Attempts     int    `json:"attempts"`
	Code         string `json:"code,omitempty"`
	LastCode     string `json:"lastCode,omitempty"`
	LastError    string `json:"lastError,omitempty"`
	// Held counts the key's queued and failed rows, the head included, up
	// to KeyHeldCap; HeldExact is false when there are more.
	Held      int  `json:"held"`
	HeldExact bool `json:"heldExact"`
}

// KeyHeldCap bounds the count of a key's held rows (KeyHead.Held): a key
// may hold millions, and a page of keys counted each whole read them all.
const KeyHeldCap = 1000

// KeyHeads returns the head of each given key (subscription, subject)
// that holds events, by key; keys holding none are absent.
func (s *Store) KeyHeads(ctx context.Context, subs, subjects []string) (map[[2]string]KeyHead, error) {
	out := map[[2]string]KeyHead{}
	if len(subs) == 0 {
		return out, nil
	}
	for i := range subs {
		if !queryableText(subs[i]) || !queryableText(subjects[i]) {
			subs[i], subjects[i] = "", ""
		}
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT k.sub, k.subject, h.event_id::text, h.event_seq, h.status, h.attempts,
		       COALESCE(h.code, ''), COALESCE(h.last_code, ''), COALESCE(h.last_error, ''),
		       (SELECT count(*)::int FROM (
		               SELECT 1 FROM outcomes c
		                WHERE c.subscription_id = k.sub AND c.subject = k.subject AND c.status IN ('queued', 'failed')
		                LIMIT $3) c)
		  FROM unnest($1::text[], $2::text[]) AS k(sub, subject)
		 CROSS JOIN LATERAL (
		       SELECT * FROM outcomes o
		        WHERE o.subscription_id = k.sub AND o.subject = k.subject AND o.status IN ('queued', 'failed')
		        ORDER BY o.event_seq LIMIT 1) h`, subs, subjects, KeyHeldCap+1)
	if err != nil {
		return nil, fmt.Errorf("read key heads: %w", err)
	}
	var h KeyHead
	_, err = pgx.ForEachRow(rows, []any{&h.Subscription, &h.Subject, &h.EventID, &h.Seq, &h.Status, &h.Attempts,
		&h.Code, &h.LastCode, &h.LastError, &h.Held}, func() error {
		h.HeldExact = h.Held <= KeyHeldCap
		h.Held = min(h.Held, KeyHeldCap)
		out[[2]string{h.Subscription, h.Subject}] = h
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read key heads: %w", err)
	}
	return out, nil
}

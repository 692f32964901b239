package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeliveryCounts counts one subscription's outcome rows per status: what
// became of each event handed to it.
type DeliveryCounts struct {
	Queued    int64 `db:"queued" json:"queued"`
	Delivered int64 `db:"delivered" json:"delivered"`
	Failed    int64 `db:"failed" json:"failed"`
	Cancelled int64 `db:"cancelled" json:"cancelled"`
	Expired   int64 `db:"expired" json:"expired"`
	Filtered  int64 `db:"filtered" json:"filtered"`
}

// Total is the number of events handed to the subscription.
func (c DeliveryCounts) Total() int64 {
	return c.Queued + c.Delivered + c.Failed + c.Cancelled + c.Expired + c.Filtered
}

// SubscriptionCounts returns the outcome counts per status of every
// subscription with at least one outcome row, by subscription id; with app
// set, only of that subscriber app's subscriptions. Outcome rows removed by
// retention are no longer counted.
func (s *Store) SubscriptionCounts(ctx context.Context, app string) (map[string]DeliveryCounts, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT o.subscription_id,
		       count(*) FILTER (WHERE o.status = 'queued')    AS queued,
		       count(*) FILTER (WHERE o.status = 'delivered') AS delivered,
		       count(*) FILTER (WHERE o.status = 'failed')    AS failed,
		       count(*) FILTER (WHERE o.status = 'cancelled') AS cancelled,
		       count(*) FILTER (WHERE o.status = 'expired')   AS expired,
		       count(*) FILTER (WHERE o.status = 'filtered')  AS filtered
		FROM outcomes o
		JOIN subscriptions s ON s.id = o.subscription_id
		WHERE $1 = '' OR s.app = $1
		GROUP BY o.subscription_id`, app)
	if err != nil {
		return nil, fmt.Errorf("count outcomes per subscription: %w", err)
	}
	type row struct {
		SubscriptionID string `db:"subscription_id"`
		DeliveryCounts
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	if err != nil {
		return nil, fmt.Errorf("count outcomes per subscription: %w", err)
	}
	counts := make(map[string]DeliveryCounts, len(list))
	for _, r := range list {
		counts[r.SubscriptionID] = r.DeliveryCounts
	}
	return counts, nil
}

// HeldCounts is what one subscription still holds, for the metrics: its
// queued events and its subject keys by status, read from the outcome rows.
type HeldCounts struct {
	SubscriptionID string
	App            string // the subscriber app
	Queued         int64  // events queued (waiting, being delivered or retried)
	// Keys holding events, by status, each key counted once, in this order:
	FailedKeys      int64 // its head failed terminally: it holds until redeliver or cancel
	PausedKeys      int64 // the subscription is paused
	BlockedKeys     int64 // the subscription is blocked
	UnreachableKeys int64 // the subscriber app is marked unreachable
	RetryingKeys    int64 // a queued event has failed attempts
	PendingKeys     int64 // the rest: queued events waiting for or in delivery
}

// HeldPerSubscription returns the HeldCounts of every subscription that is
// not cancelled or still holds events, in one query. It reads only held
// rows (queued or failed) through their partial index, so its cost follows
// the backlog, not the event log's size. A key's status is derived from
// what PostgreSQL holds (its outcome rows, the subscription's state, the
// app's reachability); it matches the workflow's HeraldStatus except that
// delivering and idle-with-queued keys are both "pending".
func (s *Store) HeldPerSubscription(ctx context.Context) ([]HeldCounts, error) {
	rows, err := s.Pool.Query(ctx, `
		WITH k AS (
			SELECT subscription_id, subject,
			       count(*) FILTER (WHERE status = 'queued')                 AS queued,
			       bool_or(status = 'failed')                                AS failed,
			       bool_or(status = 'queued' AND attempts > 0)               AS retrying
			  FROM outcomes
			 WHERE status IN ('queued', 'failed')
			 GROUP BY subscription_id, subject
		), c AS (
			SELECT s.id, s.app, k.subject, k.queued,
			       CASE WHEN k.subject IS NULL     THEN NULL
			            WHEN k.failed              THEN 'failed'
			            WHEN s.state = 'paused'    THEN 'paused'
			            WHEN s.state = 'blocked'   THEN 'blocked'
			            WHEN u.app IS NOT NULL     THEN 'unreachable'
			            WHEN k.retrying            THEN 'retrying'
			            ELSE 'pending' END AS status
			  FROM subscriptions s
			  LEFT JOIN k ON k.subscription_id = s.id
			  LEFT JOIN unreachable_apps u ON u.app = s.app
			 WHERE s.state <> 'cancelled' OR k.subscription_id IS NOT NULL
		)
		SELECT id, app, COALESCE(sum(queued), 0)::bigint,
		       count(*) FILTER (WHERE status = 'failed'),
		       count(*) FILTER (WHERE status = 'paused'),
		       count(*) FILTER (WHERE status = 'blocked'),
		       count(*) FILTER (WHERE status = 'unreachable'),
		       count(*) FILTER (WHERE status = 'retrying'),
		       count(*) FILTER (WHERE status = 'pending')
		  FROM c
		 GROUP BY id, app
		 ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("count held events per subscription: %w", err)
	}
	var out []HeldCounts
	var c HeldCounts
	_, err = pgx.ForEachRow(rows, []any{&c.SubscriptionID, &c.App, &c.Queued,
		&c.FailedKeys, &c.PausedKeys, &c.BlockedKeys, &c.UnreachableKeys, &c.RetryingKeys, &c.PendingKeys}, func() error {
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count held events per subscription: %w", err)
	}
	return out, nil
}

// UnreachableApp is an app that a delivery found unreachable, since when.
type UnreachableApp struct {
	App   string
	Since time.Time
}

// UnreachableApps lists the apps marked unreachable.
func (s *Store) UnreachableApps(ctx context.Context) ([]UnreachableApp, error) {
	rows, err := s.Pool.Query(ctx, `SELECT app, since FROM unreachable_apps ORDER BY app`)
	if err != nil {
		return nil, fmt.Errorf("list unreachable apps: %w", err)
	}
	var out []UnreachableApp
	var u UnreachableApp
	_, err = pgx.ForEachRow(rows, []any{&u.App, &u.Since}, func() error {
		out = append(out, u)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list unreachable apps: %w", err)
	}
	return out, nil
}

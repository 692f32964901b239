package store

import (
	"context"
	"fmt"

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

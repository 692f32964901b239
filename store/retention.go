package store

import (
	"context"
	"fmt"
	"time"
)

// PurgeCounts is what one PurgeEvents batch deleted.
type PurgeCounts struct {
	Events   int64
	Outcomes int64
}

// Full reports whether either delete filled its limit, so that more rows
// past retention may be left.
func (c PurgeCounts) Full(limit int) bool {
	return c.Events >= int64(limit) || c.Outcomes >= int64(limit)
}

// PurgeEvents deletes up to limit events, and up to limit settled outcome
// rows, that are past retention: events dispatched or rejected before
// cutoff, outcomes settled before cutoff. An event that a key still holds
// (an outcome queued or failed) is kept whatever its age, and so are
// undispatched events and the audit trail. It returns how many rows of each
// it deleted; call it again while the counts are Full.
func (s *Store) PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (PurgeCounts, error) {
	outcomes, err := s.Pool.Exec(ctx, `
		DELETE FROM outcomes WHERE (subscription_id, event_id) IN (
			SELECT subscription_id, event_id FROM outcomes
			WHERE status IN ('delivered', 'cancelled', 'expired', 'filtered') AND updated_at < $1
			LIMIT $2)`, cutoff, limit)
	if err != nil {
		return PurgeCounts{}, fmt.Errorf("purge outcomes: %w", err)
	}
	events, err := s.Pool.Exec(ctx, `
		DELETE FROM events WHERE seq IN (
			SELECT e.seq FROM events e
			WHERE ((e.state = 'dispatched' AND e.dispatched_at < $1)
			    OR (e.state = 'rejected' AND e.received_at < $1))
			  AND NOT EXISTS (SELECT 1 FROM outcomes o
			                   WHERE o.event_id = e.id AND o.status IN ('queued', 'failed'))
			LIMIT $2)`, cutoff, limit)
	if err != nil {
		return PurgeCounts{Outcomes: outcomes.RowsAffected()}, fmt.Errorf("purge events: %w", err)
	}
	return PurgeCounts{Events: events.RowsAffected(), Outcomes: outcomes.RowsAffected()}, nil
}

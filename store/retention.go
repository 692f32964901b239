package store

import (
	"context"
	"fmt"
	"time"
)

// PurgeEvents deletes up to limit events that are past retention: dispatched
// before cutoff, or rejected before cutoff. Undispatched events are never
// touched, and neither is the audit trail. It returns how many it deleted;
// call it again until it returns less than limit.
func (s *Store) PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	tag, err := s.Pool.Exec(ctx, `
		DELETE FROM events WHERE seq IN (
			SELECT seq FROM events
			WHERE (state = 'dispatched' AND dispatched_at < $1)
			   OR (state = 'rejected' AND received_at < $1)
			LIMIT $2)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("purge events: %w", err)
	}
	return tag.RowsAffected(), nil
}

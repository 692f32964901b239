package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
// undispatched events and the audit trail. Rows that a requeue (Requeue)
// has locked are left for a later batch. It returns how many rows of each
// it deleted; call it again while the counts are Full.
func (s *Store) PurgeEvents(ctx context.Context, cutoff time.Time, limit int) (PurgeCounts, error) {
	outcomes, err := purgeOutcomes(ctx, s.Pool, cutoff, limit)
	if err != nil {
		return PurgeCounts{}, err
	}
	var events int64
	// purgeEvents needs a fresh snapshot for its second statement, which
	// READ COMMITTED gives whatever the database's default isolation.
	err = pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		n, err := purgeEvents(ctx, tx, cutoff, limit)
		events = n
		return err
	})
	if err != nil {
		return PurgeCounts{Outcomes: outcomes}, err
	}
	return PurgeCounts{Events: events, Outcomes: outcomes}, nil
}

// settledStatuses are the outcome statuses retention deletes past cutoff.
const settledStatuses = `('delivered', 'cancelled', 'expired', 'filtered')`

// purgeOutcomes deletes up to limit outcome rows settled before cutoff.
//
// A requeue sets a settled row back to queued. The rows are picked locked,
// skipping those a requeue holds (the delete used to wait for it and then
// delete the requeued row, its status tested only in the subquery's scan
// of the old version). A row requeued and committed after this
// statement's snapshot is read again once locked and dropped as queued;
// the statuses are tested on the deleted row too, so that the delete's
// own re-check after a concurrent update says the same.
func purgeOutcomes(ctx context.Context, q Querier, cutoff time.Time, limit int) (int64, error) {
	tag, err := q.Exec(ctx, `
		DELETE FROM outcomes o
		 WHERE (o.subscription_id, o.event_id) IN (
		       SELECT subscription_id, event_id FROM outcomes
		        WHERE status IN `+settledStatuses+` AND updated_at < $1
		        LIMIT $2
		          FOR UPDATE SKIP LOCKED)
		   AND o.status IN `+settledStatuses+` AND o.updated_at < $1`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("purge outcomes: %w", err)
	}
	return tag.RowsAffected(), nil
}

// purgeEvents deletes, in tx (READ COMMITTED), up to limit events
// dispatched or rejected before cutoff that no key holds.
//
// A requeue queues an event that no key holds, so a statement's snapshot
// from before the requeue commits would see the event free and delete it
// under its queued row. Requeue locks the events it queues (FOR KEY
// SHARE) until it commits; this locks its candidates FOR UPDATE first,
// skipping those a requeue holds, and only then, in a second statement
// with a snapshot taken after the locks, checks that no key holds them.
// A requeue that locked an event before us has committed by then and its
// row is seen; one that comes after waits for us and finds the event
// deleted, or kept.
func purgeEvents(ctx context.Context, tx pgx.Tx, cutoff time.Time, limit int) (int64, error) {
	rows, err := tx.Query(ctx, `
		SELECT e.seq FROM events e
		 WHERE ((e.state = 'dispatched' AND e.dispatched_at < $1)
		     OR (e.state = 'rejected' AND e.received_at < $1))
		   AND NOT EXISTS (SELECT 1 FROM outcomes o
		                    WHERE o.event_id = e.id AND o.status IN ('queued', 'failed'))
		 LIMIT $2
		   FOR UPDATE SKIP LOCKED`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("purge events: %w", err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("purge events: %w", err)
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	tag, err := tx.Exec(ctx, `
		DELETE FROM events e
		 WHERE e.seq = ANY($1::bigint[])
		   AND NOT EXISTS (SELECT 1 FROM outcomes o
		                    WHERE o.event_id = e.id AND o.status IN ('queued', 'failed'))`, seqs)
	if err != nil {
		return 0, fmt.Errorf("purge events: %w", err)
	}
	return tag.RowsAffected(), nil
}

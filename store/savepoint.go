package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The statements of the savepoint that makes a publish in a caller's
// transaction all or nothing (InsertEventsAllTx). A savepoint of the same
// name the caller holds is shadowed only while the publish runs: each call
// releases its own before it returns.
const (
	publishSavepoint = `SAVEPOINT herald_publish`
	releasePublish   = `RELEASE SAVEPOINT herald_publish`
	// undoPublish is one round trip of two statements: pgx sends a
	// statement without arguments by the simple protocol.
	undoPublish = `ROLLBACK TO SAVEPOINT herald_publish; RELEASE SAVEPOINT herald_publish`
)

// InsertEventsAllTx is InsertEventsTx made all or nothing: after an error,
// or with a Conflict among its results, none of evs is written and tx goes
// on as it was before the call (rolled back to a savepoint), so the caller
// may still commit its own work. PublishTx calls it.
//
// The savepoint costs no round trip of its own: SAVEPOINT goes with the
// statements of the publish, and for one event RELEASE does too, so a
// publish of one event in a transaction is one round trip, as the plain
// INSERT of its row would be. Several events take a second round trip to
// release the savepoint or roll back to it.
func InsertEventsAllTx(ctx context.Context, tx pgx.Tx, evs []NewEvent) ([]InsertedEvent, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	out := make([]InsertedEvent, len(evs))
	var err error
	if len(evs) == 1 {
		err = insertOneAll(ctx, tx, evs[0], &out[0])
	} else {
		err = lockAndInsertBatch(ctx, tx, evs, out, true)
		err = endSavepoint(ctx, tx, err, anyConflict(out))
	}
	if err != nil {
		return nil, fmt.Errorf("insert events: %w", err)
	}
	return out, nil
}

// insertOneAll is InsertEventsAllTx for one event: the savepoint, the
// statement that locks the key and inserts (lockAndInsertOne) and the
// release, in one round trip. An event that is not inserted (an id already
// taken, a stripe row missing) wrote nothing; lockAndInsertSingle then
// tells why under a savepoint of its own, which its further statements
// need.
func insertOneAll(ctx context.Context, tx pgx.Tx, ev NewEvent, out *InsertedEvent) error {
	out.ID = ev.ID
	b := &pgx.Batch{}
	b.Queue(publishSavepoint)
	b.Queue(lockAndInsertOne, ev.ID, ev.SourceApp, ev.Type, ev.Version, ev.Subject, ev.Envelope,
		ev.ContentHash, ev.Via, ev.Token, ev.TraceContext.param(), keyStripe(ev.Subject))
	b.Queue(releasePublish)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		// No savepoint was made: tx had failed before the call, or the
		// batch was never sent.
		_ = br.Close()
		return fmt.Errorf("savepoint: %w", err)
	}
	insErr := br.QueryRow().Scan(&out.Seq)
	_, relErr := br.Exec()
	closeErr := br.Close()
	if errors.Is(insErr, pgx.ErrNoRows) {
		if relErr == nil && closeErr == nil {
			// Released: nothing was written.
			return underSavepoint(ctx, tx, func() error { return lockAndInsertSingle(ctx, tx, ev, out) })
		}
		insErr = nil
	}
	if err := cmp.Or(insErr, relErr, closeErr); err != nil {
		return endSavepoint(ctx, tx, fmt.Errorf("lock the ordering key of event %s and insert it: %w", ev.ID, err), true)
	}
	return nil
}

// underSavepoint runs f under the publish savepoint: after f's error, tx
// is as it was before.
func underSavepoint(ctx context.Context, tx pgx.Tx, f func() error) error {
	if _, err := tx.Exec(ctx, publishSavepoint); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	return endSavepoint(ctx, tx, f(), false)
}

// endSavepoint ends the publish savepoint: it releases it when err is nil
// and undo false, and otherwise rolls back to it, undoing what the publish
// wrote, and releases it. It returns err, joined with a failure to end the
// savepoint.
func endSavepoint(ctx context.Context, tx pgx.Tx, err error, undo bool) error {
	end := releasePublish
	if err != nil || undo {
		end = undoPublish
	}
	if _, endErr := tx.Exec(ctx, end); endErr != nil {
		return errors.Join(err, fmt.Errorf("end the publish savepoint: %w", endErr))
	}
	return err
}

// anyConflict reports whether an insert found an id taken by different
// content.
func anyConflict(out []InsertedEvent) bool {
	for _, ins := range out {
		if ins.Conflict {
			return true
		}
	}
	return false
}

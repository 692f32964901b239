package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/internal/testkit"
	"herald/store"
)

// The tests below force each order of a requeue (an operator's redelivery
// or a replay) and retention's purge of the same event: one side runs in a
// transaction the test holds open, the other runs meanwhile, and the test
// commits only once the other side has finished or waits on the open
// transaction's locks. Whatever the order, an event whose outcome row is
// queued must still be in the log, and a requeued row must not be purged.

// purgeCutoff is the cutoff the tests purge with: 30 days, and
// requeueFixture's old rows are 40 days old.
func purgeCutoff() time.Time { return time.Now().Add(-30 * 24 * time.Hour) }

// requeueFixture is outcomeFixture with evs[0] of key p1 handed to billing
// and delivered, every event dispatched 40 days ago, and evs[0]'s outcome
// row settled 40 days ago when oldOutcome (purgeable), just now otherwise.
func requeueFixture(t *testing.T, oldOutcome bool) (*store.Store, store.NewEvent) {
	t.Helper()
	s, evs := outcomeFixture(t)
	ctx := context.Background()
	if _, err := s.RecordDispatch(ctx, []store.Dispatch{
		{SubscriptionID: billingPersonSub, EventID: evs[0].ID, Seq: 1, Subject: "p1"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE events SET state = 'dispatched', dispatched_at = now() - interval '40 days'`); err != nil {
		t.Fatal(err)
	}
	if oldOutcome {
		if _, err := s.Pool.Exec(ctx, `UPDATE outcomes SET updated_at = now() - interval '40 days'`); err != nil {
			t.Fatal(err)
		}
	}
	return s, evs[0]
}

// holdOpen begins a transaction on a connection of its own and returns it
// with its backend's pid; it is rolled back at the test's end unless the
// test committed it.
func holdOpen(t *testing.T, s *store.Store) (pgx.Tx, uint32) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx, tx.Conn().PgConn().PID()
}

// finishedOrBlockedBy waits until done is closed or a session waits on a
// lock that the backend pid holds.
func finishedOrBlockedBy(t *testing.T, s *store.Store, pid uint32, done <-chan struct{}) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "the other side to finish or wait on the open transaction", func() bool {
		select {
		case <-done:
			return true
		default:
		}
		var blocked bool
		err := s.Pool.QueryRow(context.Background(), `
			SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid)))`,
			int(pid)).Scan(&blocked)
		return err == nil && blocked
	})
}

// outcomeStatus is the status of ev's outcome row for billing ("" without one).
func outcomeStatus(t *testing.T, s *store.Store, ev store.NewEvent) string {
	t.Helper()
	out, err := s.EventOutcomes(context.Background(), ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		return ""
	}
	return out[0].Status
}

// eventKept reports whether ev is still in the log.
func eventKept(t *testing.T, s *store.Store, ev store.NewEvent) bool {
	t.Helper()
	_, err := s.GetEvent(context.Background(), ev.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestRequeueHeldOpenKeepsItsRowsFromPurge: a requeue has set an old
// event's outcome back to queued and not committed yet when a purge runs.
// With the outcome row recent, the purge cannot see the queued row; it must
// leave the event alone all the same, or the key is left with a queued row
// whose event is gone. With the row settled past retention, the purge
// picked it while it was settled; it must not delete it once it is queued,
// nor the event, or the redelivery is lost.
func TestRequeueHeldOpenKeepsItsRowsFromPurge(t *testing.T) {
	t.Parallel()
	for _, oldOutcome := range []bool{false, true} {
		t.Run(fmt.Sprintf("outcome past retention %v", oldOutcome), func(t *testing.T) {
			t.Parallel()
			s, ev := requeueFixture(t, oldOutcome)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tx, pid := holdOpen(t, s)
			got, refused, err := store.RequeueIn(ctx, tx, billingPersonSub, "p1", []string{ev.ID})
			if err != nil || len(got) != 1 || len(refused) != 0 {
				t.Fatalf("requeue: %+v, refused %v, %v", got, refused, err)
			}
			done := make(chan struct{})
			var n store.PurgeCounts
			var purgeErr error
			go func() {
				defer close(done)
				n, purgeErr = s.PurgeEvents(ctx, purgeCutoff(), 100)
			}()
			finishedOrBlockedBy(t, s, pid, done)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			<-done
			if purgeErr != nil {
				t.Fatal(purgeErr)
			}
			if status := outcomeStatus(t, s, ev); status != store.EventQueued {
				t.Fatalf("outcome %q after the purge (%+v) and the requeue's commit, want the requeued row queued", status, n)
			}
			if !eventKept(t, s, ev) {
				t.Fatalf("the purge (%+v) deleted the event a requeue in progress had queued: a queued row without its event", n)
			}
		})
	}
}

// TestRequeueAfterPurgeFindsNoEvent: a purge has deleted an old event (and
// its outcome row, when that is past retention too) and not committed yet
// when a requeue of the event comes. Once the purge commits, the requeue
// must answer event_not_found and leave no queued row behind.
func TestRequeueAfterPurgeFindsNoEvent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		oldOutcome bool
	}{{"outcome purged too", true}, {"outcome kept", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, ev := requeueFixture(t, c.oldOutcome)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tx, pid := holdOpen(t, s)
			n, err := store.PurgeIn(ctx, tx, purgeCutoff(), 100)
			if err != nil {
				t.Fatal(err)
			}
			if n.Events != 4 {
				t.Fatalf("purged %+v, want the fixture's 4 old events", n)
			}
			done := make(chan struct{})
			var got []store.RequeuedEvent
			var refused map[string]string
			var requeueErr error
			go func() {
				defer close(done)
				got, refused, requeueErr = s.Requeue(ctx, billingPersonSub, "p1", []string{ev.ID})
			}()
			finishedOrBlockedBy(t, s, pid, done)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			<-done
			if requeueErr != nil {
				t.Fatal(requeueErr)
			}
			want := store.EventDelivered
			if c.oldOutcome {
				want = ""
			}
			status := outcomeStatus(t, s, ev)
			if len(got) != 0 || refused[ev.ID] != "event_not_found" {
				t.Fatalf("requeue of a purged event: requeued %+v, refused %v, its outcome now %q; want event_not_found",
					got, refused, status)
			}
			if status != want {
				t.Fatalf("outcome of the purged event %q, want %q", status, want)
			}
		})
	}
}

package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/store"
)

// subjectsOfTwoStripes returns two subjects whose ordering keys lock
// different stripe rows, so a transaction holding one does not hold up a
// publisher of the other.
func subjectsOfTwoStripes(t *testing.T) (string, string) {
	t.Helper()
	for i := 1; i < 100; i++ {
		a, b := "person-a", fmt.Sprintf("person-b%d", i)
		if store.KeyStripe(a) != store.KeyStripe(b) {
			return a, b
		}
	}
	t.Fatal("no two subjects of different stripes")
	return "", ""
}

// beginTx starts a transaction rolled back at the end of the test unless
// committed.
func beginTx(t *testing.T, ctx context.Context, s *store.Store) pgx.Tx {
	t.Helper()
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// requireNoPublishSavepoint fails the test when tx still holds the publish
// savepoint: every call must release its own. It ends tx's usefulness (the
// probe's failure aborts it), so it comes last.
func requireNoPublishSavepoint(t *testing.T, ctx context.Context, tx pgx.Tx) {
	t.Helper()
	_, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT herald_publish`)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "3B001" {
		t.Errorf("ROLLBACK TO SAVEPOINT herald_publish after the publishes = %v, want 3B001 (no such savepoint)", err)
	}
}

// TestInsertEventsAllTxErrorLeavesTransactionUsable: a publish that fails in
// the database (here its key's lock is held past the caller's lock_timeout)
// writes nothing and leaves the caller's transaction as it was, its own
// earlier writes kept, whether the publish had one event (the savepoint,
// insert and release sent together) or several.
func TestInsertEventsAllTxErrorLeavesTransactionUsable(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, free := subjectsOfTwoStripes(t)
	// The first publish of the type makes its stripe rows.
	if _, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", free, "h0")}); err != nil {
		t.Fatal(err)
	}
	holder := beginTx(t, ctx, s)
	if _, err := store.InsertEventsTx(ctx, holder, []store.NewEvent{newEvent("contacts.person.updated", held, "h1")}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d events", n), func(t *testing.T) {
			tx := beginTx(t, ctx, s)
			own := newEvent("contacts.person.updated", free, "own")
			if _, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{own}); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
				t.Fatal(err)
			}
			evs := []store.NewEvent{newEvent("contacts.person.updated", held, "h2")}
			if n == 2 {
				evs = append([]store.NewEvent{newEvent("contacts.person.updated", free, "h3")}, evs...)
			}
			got, err := store.InsertEventsAllTx(ctx, tx, evs)
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "55P03" {
				t.Fatalf("InsertEventsAllTx on a held key = %+v, %v; want lock_not_available (55P03)", got, err)
			}
			var mine, theirs int
			if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id = $1), count(*) FILTER (WHERE id = ANY($2::uuid[]))
			                              FROM events`, own.ID, []string{evs[0].ID, evs[n-1].ID}).Scan(&mine, &theirs); err != nil {
				t.Fatalf("the transaction is not usable after the failed publish: %v", err)
			}
			if mine != 1 || theirs != 0 {
				t.Errorf("in the transaction after the failed publish: its own earlier event %d times (want 1), the failed publish's %d (want 0)", mine, theirs)
			}
			requireNoPublishSavepoint(t, ctx, tx)
		})
	}
}

// TestInsertEventsAllTxIsAllOrNothing: a Conflict among several events takes
// the others back; one event's Conflict, Duplicate and missing stripe rows
// write nothing; a success is kept; every call releases its savepoint, and
// the transaction commits what it kept.
func TestInsertEventsAllTxIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	taken := newEvent("contacts.person.updated", "person-1", "h1")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{taken}); err != nil {
		t.Fatal(err)
	}
	reuse := newEvent("contacts.person.updated", "person-2", "other")
	reuse.ID = taken.ID
	same := taken
	same.Subject = "person-3" // the id and content hash of taken: a Duplicate

	tx := beginTx(t, ctx, s)
	kept := newEvent("contacts.person.updated", "person-4", "h4")
	got, err := store.InsertEventsAllTx(ctx, tx, []store.NewEvent{kept})
	if err != nil || got[0].Seq == 0 || got[0].Duplicate || got[0].Conflict {
		t.Fatalf("InsertEventsAllTx of a new event = %+v, %v", got, err)
	}
	takenBack := newEvent("contacts.person.updated", "person-5", "h5")
	got, err = store.InsertEventsAllTx(ctx, tx, []store.NewEvent{takenBack, reuse})
	if err != nil || got[0].Conflict || !got[1].Conflict {
		t.Fatalf("InsertEventsAllTx of a new event and a taken id = %+v, %v; want the second a Conflict", got, err)
	}
	got, err = store.InsertEventsAllTx(ctx, tx, []store.NewEvent{reuse})
	if err != nil || !got[0].Conflict {
		t.Fatalf("InsertEventsAllTx of a taken id = %+v, %v; want a Conflict", got, err)
	}
	got, err = store.InsertEventsAllTx(ctx, tx, []store.NewEvent{same})
	if err != nil || !got[0].Duplicate || got[0].Seq == 0 {
		t.Fatalf("InsertEventsAllTx of a published event again = %+v, %v; want a Duplicate with its seq", got, err)
	}
	for _, evs := range [][]store.NewEvent{
		{newEvent("contacts.never.declared", "k", "h")},
		{newEvent("contacts.never.declared", "k", "h"), newEvent("contacts.person.updated", "person-6", "h6")},
	} {
		if got, err := store.InsertEventsAllTx(ctx, tx, evs); !errors.Is(err, store.ErrNoKeyStripes) {
			t.Fatalf("InsertEventsAllTx of %d events of a type without stripe rows = %+v, %v; want ErrNoKeyStripes", len(evs), got, err)
		}
	}
	var published int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&published); err != nil {
		t.Fatalf("the transaction is not usable: %v", err)
	}
	if published != 2 {
		t.Errorf("%d events in the transaction, want 2 (the first publish's and the kept one)", published)
	}
	requireNoPublishSavepoint(t, ctx, tx)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A commit keeps what the calls kept.
	tx = beginTx(t, ctx, s)
	kept = newEvent("contacts.person.updated", "person-7", "h7")
	if _, err := store.InsertEventsAllTx(ctx, tx, []store.NewEvent{kept}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.InsertEventsAllTx(ctx, tx, []store.NewEvent{newEvent("contacts.person.updated", "person-8", "h8"), reuse}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool.Query(ctx, `SELECT subject FROM events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[person-1 person-7]" {
		t.Errorf("committed subjects %v, want [person-1 person-7]", ids)
	}
}

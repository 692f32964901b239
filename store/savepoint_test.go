package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/store"
)

// TestSeveralEventsAllOrNothing: several events published in a caller's
// transaction are written together or not at all, and the transaction goes
// on either way: an id taken by other content (stored before, or earlier in
// the same call) writes none of them and reports only the conflicts; the
// same id and content twice is a duplicate; a type without stripe rows
// writes none. A savepoint of the caller's with the name the call's own
// savepoint takes is left as it was.
func TestSeveralEventsAllOrNothing(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored := newEvent("contacts.person.updated", "person-0", "h0")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{stored}); err != nil {
		t.Fatal(err)
	}
	count := func(q pgx.Tx, ids ...string) int {
		t.Helper()
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM events WHERE id = ANY($1::uuid[])`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	taken := stored
	taken.ContentHash = "other content"
	first := newEvent("contacts.person.updated", "person-3", "h3")
	again := first
	again.Subject = "person-4" // the id and content hash are first's
	cases := []struct {
		name         string
		evs          []store.NewEvent
		wantConflict []bool // nil: accepted
		wantErr      error
	}{
		{"a stored id, other content", []store.NewEvent{newEvent("contacts.person.updated", "person-1", "h1"), taken}, []bool{false, true}, nil},
		{"an id of the call, other content", func() []store.NewEvent {
			a := newEvent("contacts.person.updated", "person-5", "h5")
			b := newEvent("contacts.person.updated", "person-6", "h6")
			b.ID = a.ID
			return []store.NewEvent{a, b}
		}(), []bool{false, true}, nil},
		{"an id of the call, same content", []store.NewEvent{first, again}, nil, nil},
		{"a type without stripe rows", []store.NewEvent{newEvent("contacts.person.updated", "person-7", "h7"), newEvent("u.x.happened", "k", "h")}, nil, store.ErrNoKeyStripes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx, before := callerWork(ctx, t, s)
			var ids []string // the call's ids but the one stored before
			for _, ev := range c.evs {
				if ev.ID != stored.ID {
					ids = append(ids, ev.ID)
				}
			}
			out, err := store.InsertEventsTx(ctx, tx, c.evs)
			switch {
			case c.wantErr != nil:
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("InsertEventsTx = %+v, %v; want %v", out, err, c.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case c.wantConflict != nil:
				for i, ins := range out {
					want := store.InsertedEvent{ID: c.evs[i].ID, Conflict: c.wantConflict[i]}
					if ins != want {
						t.Errorf("result %d = %+v, want %+v: with a conflict nothing is written", i, ins, want)
					}
				}
			default:
				if out[0].Seq == 0 || out[1] != (store.InsertedEvent{ID: first.ID, Seq: out[0].Seq, Duplicate: true}) {
					t.Errorf("InsertEventsTx = %+v, want the second a duplicate of the first", out)
				}
			}
			written := 0
			if c.wantConflict == nil && c.wantErr == nil {
				written = 1 // one row for the id
			}
			if got := count(tx, ids...); got != written {
				t.Errorf("%d of the call's rows in the transaction, want %d", got, written)
			}
			// The transaction goes on, with the caller's work and its
			// savepoint.
			if got := count(tx, before.ID); got != 1 {
				t.Fatalf("the caller's earlier event: %d rows, want 1", got)
			}
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT herald_publish`); err != nil {
				t.Fatalf("the caller's savepoint after the call: %v", err)
			}
			if got := count(tx, before.ID); got != 0 {
				t.Errorf("the caller's savepoint no longer takes back its work: %d rows", got)
			}
		})
	}
}

// TestSeveralEventsInAnAbortedTransaction: a call in a transaction a failed
// statement has aborted fails as any statement would, and takes back
// nothing of the caller's: its savepoint was never taken, so a savepoint of
// the caller's of the same name still takes back the caller's work.
func TestSeveralEventsInAnAbortedTransaction(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", "person-0", "h0")}); err != nil {
		t.Fatal(err)
	}
	tx, before := callerWork(ctx, t, s)
	if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("a division by zero did not fail")
	}
	_, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{
		newEvent("contacts.person.updated", "person-1", "h1"), newEvent("contacts.person.updated", "person-2", "h2")})
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "25P02" {
		t.Fatalf("InsertEventsTx in an aborted transaction: %v; want in_failed_sql_transaction (25P02)", err)
	}
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT herald_publish`); err != nil {
		t.Fatalf("the caller's savepoint after the call: %v", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE id = $1`, before.ID).Scan(&n); err != nil {
		t.Fatalf("the transaction after the caller's rollback to its savepoint: %v", err)
	}
	if n != 0 {
		t.Errorf("the caller's work under its savepoint: %d rows after its rollback, want 0", n)
	}
}

// callerWork begins a transaction, rolled back at the end of the test, with
// the caller's own work in it: a savepoint named as the one the store takes
// (herald_publish), then an event published under it, returned.
func callerWork(ctx context.Context, t *testing.T, s *store.Store) (pgx.Tx, store.NewEvent) {
	t.Helper()
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SAVEPOINT herald_publish`); err != nil {
		t.Fatal(err)
	}
	before := newEvent("contacts.person.updated", "person-before", "hb")
	if _, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{before}); err != nil {
		t.Fatal(err)
	}
	return tx, before
}

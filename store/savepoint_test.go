package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/internal/testkit"
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
		{"new events", []store.NewEvent{newEvent("contacts.person.updated", "person-8", "h8"), newEvent("contacts.person.updated", "person-9", "h9")}, nil, nil},
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
			case c.evs[0].ID == c.evs[1].ID:
				if out[0].Seq == 0 || out[1] != (store.InsertedEvent{ID: first.ID, Seq: out[0].Seq, Duplicate: true}) {
					t.Errorf("InsertEventsTx = %+v, want the second a duplicate of the first", out)
				}
			default:
				if out[0].Seq == 0 || out[1].Seq <= out[0].Seq || out[0].Duplicate || out[1].Duplicate {
					t.Errorf("InsertEventsTx = %+v, want both inserted in order", out)
				}
			}
			written := 0
			if c.wantConflict == nil && c.wantErr == nil {
				written = len(slices.Compact(slices.Clone(ids))) // one row an id
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
			if got := count(tx, append(ids, before.ID)...); got != 0 {
				t.Errorf("the caller's savepoint no longer takes back its work and the call's: %d rows", got)
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

// TestSeveralEventsWhileATableIsLocked: a publish whose statements cannot
// be prepared (a migration holds the events table past the caller's
// lock_timeout) fails, and the caller's transaction goes on, whatever the
// connection's query mode: the statements are prepared under the call's own
// savepoint. Once the table is free the same transaction publishes.
func TestSeveralEventsWhileATableIsLocked(t *testing.T) {
	t.Parallel()
	s, url := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", "person-0", "h0")}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			tx := connTx(ctx, t, url, func(cfg *pgx.ConnConfig) { cfg.DefaultQueryExecMode = mode })
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '200ms'`); err != nil {
				t.Fatal(err)
			}
			locker, err := s.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = locker.Rollback(context.Background()) }()
			if _, err := locker.Exec(ctx, `LOCK TABLE events IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			evs := func(round string) []store.NewEvent {
				return []store.NewEvent{newEvent("contacts.person.updated", "person-1-"+round, "h1"),
					newEvent("contacts.person.updated", "person-2-"+round, "h2")}
			}
			_, err = store.InsertEventsTx(ctx, tx, evs("locked"))
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "55P03" {
				t.Fatalf("InsertEventsTx while the events table is locked: %v; want lock_not_available (55P03)", err)
			}
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				t.Fatalf("the caller's transaction after the failed publish: %v", err)
			}
			if err := locker.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			for _, round := range []string{"free", "again"} {
				if out, err := store.InsertEventsTx(ctx, tx, evs(round)); err != nil || out[1].Seq == 0 {
					t.Fatalf("InsertEventsTx (%s) once the table is free: %+v, %v", round, out, err)
				}
			}
		})
	}
}

// TestSeveralEventsPreparedOnceAConnection: a connection's first publish of
// several events prepares their statements under its own savepoint; they
// outlive that savepoint's rollback (here an id taken), so the next publish
// sends its savepoint, statements and release in one batch.
func TestSeveralEventsPreparedOnceAConnection(t *testing.T) {
	t.Parallel()
	s, url := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	taken := newEvent("contacts.person.updated", "person-0", "h0")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{taken}); err != nil {
		t.Fatal(err)
	}
	counter := &testkit.Sent{}
	tx := connTx(ctx, t, url, func(cfg *pgx.ConnConfig) { cfg.Tracer = counter })
	other := taken
	other.ContentHash = "other content"
	out, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{newEvent("contacts.person.updated", "person-1", "h1"), other})
	if err != nil || !out[1].Conflict {
		t.Fatalf("the first publish, with an id taken: %+v, %v; want a conflict", out, err)
	}
	counter.Reset()
	out, err = store.InsertEventsTx(ctx, tx, []store.NewEvent{newEvent("contacts.person.updated", "person-2", "h2"),
		newEvent("contacts.person.updated", "person-3", "h3")})
	if err != nil || out[1].Seq == 0 {
		t.Fatalf("the second publish: %+v, %v", out, err)
	}
	if statements, batches := counter.Reset(); len(statements) != 0 || batches != 1 {
		t.Errorf("the second publish sent %q one by one and %d batches; want one batch", statements, batches)
	}
}

// connTx connects to url on a connection of its own, configured by config,
// and begins a transaction there; both end with the test.
func connTx(ctx context.Context, t *testing.T, url string, config func(*pgx.ConnConfig)) pgx.Tx {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	config(cfg)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

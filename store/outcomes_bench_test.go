package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/store"
)

// BenchmarkRecordOutcomesDelivered is the Deliver activity's write of one
// delivered event: the outcome upsert, with the failed_keys probe riding
// along.
func BenchmarkRecordOutcomesDelivered(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, testenv.NewSchema(b), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	if _, err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := s.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "bench"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.ApplyManifest(ctx, billingManifest(subTo("contacts.person.updated", 1)), "bench"); err != nil {
		b.Fatal(err)
	}
	evs := make([]store.NewEvent, 256)
	for i := range evs {
		evs[i] = newEvent("contacts.person.updated", "p1", "h")
	}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := evs[i%len(evs)]
		if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
			{EventID: ev.ID, Status: store.EventDelivered, Attempts: 1}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutcomeWritesListingIndexes is what the listings' indexes
// (outcomes_list, outcomes_list_key) cost the writes of outcome rows.
// Two logs of 200,000 rows, one with the indexes and one without; each
// operation, on each log in turn, dispatches 100 events of one key to a
// subscription (the relay's insert of queued rows) and records them
// delivered (the deliver activity's update). It reports per row (both its
// writes) the time and the WAL bytes of each log side by side. A status
// change moves the row out of outcomes_held's predicate, so the update is
// never HOT and writes an entry in every index. Commits do not wait for
// the WAL flush (synchronous_commit off), which would cost both the same.
// Run it with
//
//	go test ./store -run '^$' -bench BenchmarkOutcomeWritesListingIndexes -benchtime 300x -count 3
func BenchmarkOutcomeWritesListingIndexes(b *testing.B) {
	const preload, batch = 200_000, 100
	ctx := context.Background()
	type side struct {
		s   *store.Store
		sub string
		// took and wal add up the timed writes and their WAL bytes.
		took time.Duration
		wal  int64
	}
	open := func(drop bool) *side {
		s, err := store.Open(ctx, testenv.NewSchema(b)+"&synchronous_commit=off", store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		if _, err := s.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		sub := loadOutcomeLog(b, s, preload)[0]
		if drop {
			if _, err := s.Pool.Exec(ctx, `DROP INDEX outcomes_list, outcomes_list_key`); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.Pool.Exec(ctx, `VACUUM ANALYZE outcomes`); err != nil {
			b.Fatal(err)
		}
		return &side{s: s, sub: sub}
	}
	with, without := open(false), open(true)
	lsn := func(s *store.Store) int64 {
		var n int64
		if err := s.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	b.ResetTimer()
	for i := range b.N {
		for _, sd := range []*side{with, without} {
			subject := fmt.Sprintf("w-%d", i)
			evs := make([]store.NewEvent, batch)
			for j := range evs {
				evs[j] = newEvent("contacts.person.updated", subject, "h")
			}
			ins, err := sd.s.InsertEvents(ctx, evs)
			if err != nil {
				b.Fatal(err)
			}
			ds := make([]store.Dispatch, batch)
			us := make([]store.OutcomeUpdate, batch)
			for j, e := range ins {
				ds[j] = store.Dispatch{SubscriptionID: sd.sub, EventID: e.ID, Seq: e.Seq, Subject: subject}
				us[j] = store.OutcomeUpdate{EventID: e.ID, Status: store.EventDelivered, Attempts: 1}
			}
			before, start := lsn(sd.s), time.Now()
			if _, err := sd.s.RecordDispatch(ctx, ds); err != nil {
				b.Fatal(err)
			}
			if err := sd.s.RecordOutcomes(ctx, sd.sub, subject, us); err != nil {
				b.Fatal(err)
			}
			sd.took += time.Since(start)
			sd.wal += lsn(sd.s) - before
		}
	}
	rows := float64(b.N * batch)
	b.ReportMetric(float64(with.took.Nanoseconds())/rows, "ns/row-with")
	b.ReportMetric(float64(without.took.Nanoseconds())/rows, "ns/row-without")
	b.ReportMetric(float64(with.wal)/rows, "WAL-B/row-with")
	b.ReportMetric(float64(without.wal)/rows, "WAL-B/row-without")
}

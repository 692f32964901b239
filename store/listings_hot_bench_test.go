package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/manifest"
	"herald/store"
)

// BenchmarkListDeliveriesOthersHotSubject is a finding of the review of
// the operations API (not fixed): the listing of one subject key reads the
// key's rows of every app through outcomes_list_subject (subject,
// queued_at) and drops those out of scope afterwards. An app token asking
// for a subject key that other apps hold 1,000,000 rows of, and it none,
// costs a read of all of them (0.55 s here, against 13 ms for an
// operator token, which finds its page at once): the time of an empty
// answer grows with other apps' rows, and tells roughly how many they
// hold. It loads the rows (about 30 s) and reports each scope's time:
//
//	go test ./store -run '^$' -bench BenchmarkListDeliveriesOthersHotSubject -benchtime 5x
func BenchmarkListDeliveriesOthersHotSubject(b *testing.B) {
	ctx := context.Background()
	url := testenv.NewSchema(b)
	s, err := store.Open(ctx, url, store.Options{})
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
	var subs []string
	for i := range 20 {
		app := fmt.Sprintf("sub-%02d", i)
		m := &manifest.Manifest{App: app, Endpoint: "https://" + app + ".internal:8443",
			Subscribes: []manifest.Subscription{subTo("contacts.person.updated", 1)}}
		if _, err := s.ApplyManifest(ctx, m, "bench"); err != nil {
			b.Fatal(err)
		}
		subs = append(subs, app+":contacts.person.updated@1")
	}
	// 1,000,000 rows of the subject key "hot", of sub-01 to sub-19: none of sub-00.
	if _, err := s.Pool.Exec(ctx, `
		INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status, attempts, queued_at, updated_at)
		SELECT ($1::text[])[2 + i % 19], gen_random_uuid(), i, 'hot', 'delivered', 1, now() - i * interval '1 second', now()
		  FROM generate_series(0, 999999) AS i`, subs); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `VACUUM ANALYZE outcomes`); err != nil {
		b.Fatal(err)
	}
	// Each listing on a new connection: PostgreSQL plans the first five
	// runs of a prepared statement for their parameters (the plan in
	// question), later ones possibly with a generic plan.
	for _, scope := range []string{"", "sub-01", "sub-00"} {
		b.Run("scope="+scope, func(b *testing.B) {
			var spent time.Duration
			for range b.N {
				fresh, err := store.Open(ctx, url, store.Options{MaxConns: 1})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				_, err = fresh.ListDeliveries(ctx, store.DeliveryFilter{Scope: scope, Subject: "hot"})
				spent += time.Since(start)
				fresh.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(spent.Milliseconds())/float64(b.N), "ms/listing")
		})
	}
}

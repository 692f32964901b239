package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/manifest"
	"herald/store"
)

// Shape of the log BenchmarkListDeliveries loads.
const (
	benchOutcomeRows = 1_000_000
	benchSubscribers = 20
	benchSubjects    = 5_000
	// benchSpan is how far back the rows' queued_at go.
	benchSpan = 30 * 24 * time.Hour
)

// BenchmarkListDeliveries loads 1,000,000 outcome rows (50,000 events of
// 5,000 subject keys over 30 days, each to 20 subscriptions; 90% delivered, 3% failed, 3% queued, the
// rest cancelled, expired and filtered) and runs each listing of
// `starter deliveries --log` and GET /v1/ops/deliveries once per iteration
// (page and total); it prints each listing's p50 and p99 and reports the
// worst p99. It asserts no time: run it with
//
//	go test ./store -run '^$' -bench BenchmarkListDeliveries -benchtime 100x
//
// (docs/operations-api.md#speed; the goal is p99 <= 100 ms).
func BenchmarkListDeliveries(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, testenv.NewSchema(b), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	if _, err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	loadStart := time.Now()
	subs := loadOutcomeLog(b, s, benchOutcomeRows)
	b.Logf("loaded %d outcome rows in %s", benchOutcomeRows, time.Since(loadStart).Round(time.Millisecond))

	worst := measureListings(b, s, subs, b.N, b.ResetTimer, b.StopTimer)
	b.ReportMetric(ms(worst), "worst-p99-ms")
}

// measureListings runs each listing of BenchmarkListDeliveries n times over
// the log loadOutcomeLog loaded, prints each one's p50 and p99 and returns
// the worst p99; start and stop bracket the timed part.
func measureListings(tb testing.TB, s *store.Store, subs []string, n int, start, stop func()) time.Duration {
	tb.Helper()
	ctx := context.Background()
	now := time.Now()
	day := now.Add(-24 * time.Hour)
	week := now.Add(-7 * 24 * time.Hour)
	listings := []struct {
		name string
		f    store.DeliveryFilter
		// next lists the second page (with the first page's token).
		next bool
	}{
		{name: "everything", f: store.DeliveryFilter{}},
		{name: "everything, page 2", f: store.DeliveryFilter{}, next: true},
		{name: "operator, 1000 a page", f: store.DeliveryFilter{Limit: 1000}},
		{name: "app", f: store.DeliveryFilter{App: "sub-03"}},
		{name: "app scope (an app token)", f: store.DeliveryFilter{Scope: "sub-03"}},
		{name: "failed", f: store.DeliveryFilter{Statuses: []string{store.EventFailed}}},
		{name: "failed, expired, cancelled of an app since a week", f: store.DeliveryFilter{App: "sub-07",
			Statuses: []string{store.EventFailed, store.EventExpired, store.EventCancelled}, Since: week}},
		{name: "failed of an app since a day", f: store.DeliveryFilter{App: "sub-07",
			Statuses: []string{store.EventFailed}, Since: day}},
		{name: "delivered of an app since a day, page 2", f: store.DeliveryFilter{App: "sub-07",
			Statuses: []string{store.EventDelivered}, Since: day}, next: true},
		{name: "subscription, delivered, a day's window", f: store.DeliveryFilter{Subscription: subs[11],
			Statuses: []string{store.EventDelivered}, Since: week, Until: week.Add(24 * time.Hour)}},
		{name: "subject", f: store.DeliveryFilter{Subject: "p-4242"}},
		{name: "subscription and subject", f: store.DeliveryFilter{Subscription: subs[2], Subject: "p-4242"}},
		{name: "nothing matches", f: store.DeliveryFilter{App: "contacts"}},
	}
	// The token of each second page, read once.
	for i, l := range listings {
		if !l.next {
			continue
		}
		page, err := s.ListDeliveries(ctx, l.f)
		if err != nil || page.NextPageToken == "" {
			tb.Fatalf("%s: first page: %v (token %q)", l.name, err, page.NextPageToken)
		}
		listings[i].f.PageToken = page.NextPageToken
	}
	took := make([][]time.Duration, len(listings))
	start()
	for range n {
		for i, l := range listings {
			start := time.Now()
			page, err := s.ListDeliveries(ctx, l.f)
			took[i] = append(took[i], time.Since(start))
			if err != nil {
				tb.Fatalf("%s: %v", l.name, err)
			}
			if len(page.Deliveries) > max(l.f.Limit, store.DefaultDeliveryLimit) || page.Total < len(page.Deliveries) {
				tb.Fatalf("%s: %d rows, total %d", l.name, len(page.Deliveries), page.Total)
			}
		}
	}
	stop()
	var worst time.Duration
	for i, l := range listings {
		p50, p99 := percentile(took[i], 50), percentile(took[i], 99)
		worst = max(worst, p99)
		page, _ := s.ListDeliveries(ctx, l.f)
		total := fmt.Sprint(page.Total)
		if !page.TotalExact {
			total = "over " + total
		}
		fmt.Printf("ListDeliveries %-50s p50 %7.2f ms  p99 %7.2f ms  (total %s, %d samples)\n",
			l.name, ms(p50), ms(p99), total, len(took[i]))
	}
	return worst
}

// loadOutcomeLog loads the log BenchmarkListDeliveries lists into s (the
// subscriber apps and rows outcome rows) and returns the subscriptions' ids.
func loadOutcomeLog(tb testing.TB, s *store.Store, rows int) []string {
	tb.Helper()
	ctx := context.Background()
	if _, err := s.ApplyManifest(ctx, contactsManifest(decl("person.updated", 1)), "bench"); err != nil {
		tb.Fatal(err)
	}
	var subs []string
	for i := range benchSubscribers {
		app := fmt.Sprintf("sub-%02d", i)
		m := &manifest.Manifest{App: app, Endpoint: "https://" + app + ".internal:8443",
			Subscribes: []manifest.Subscription{subTo("contacts.person.updated", 1)}}
		if _, err := s.ApplyManifest(ctx, m, "bench"); err != nil {
			tb.Fatal(err)
		}
		subs = append(subs, app+":contacts.person.updated@1")
	}
	// Outcome rows need no event row (no foreign key): the listings read
	// outcomes and subscriptions only.
	// Row i is event i/20 (its subject, its time) for subscription i%20; the
	// status is drawn at random.
	if _, err := s.Pool.Exec(ctx, `
		INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status, attempts, code, last_error, queued_at, updated_at, delivered_at)
		SELECT ($1::text[])[1 + i % $2::int], gen_random_uuid(), i / $2::int, 'p-' || ((i / $2::int)::bigint * 7919 % $3::int), st,
		       CASE WHEN st = 'failed' THEN 8 ELSE 1 END,
		       CASE st WHEN 'failed' THEN 'attempts_exhausted' WHEN 'expired' THEN 'retention_expired'
		               WHEN 'filtered' THEN 'filter_no_match' END,
		       CASE WHEN st = 'failed' THEN 'HTTP 500: upstream timeout' END,
		       t, t, CASE WHEN st = 'delivered' THEN t END
		  FROM generate_series(0, $4::int - 1) AS i,
		       LATERAL (SELECT now() - (($4 - i)::float8 / $4) * $5::interval AS t, random() AS r) x,
		       LATERAL (SELECT CASE WHEN r < 0.90 THEN 'delivered' WHEN r < 0.93 THEN 'failed'
		                            WHEN r < 0.96 THEN 'queued' WHEN r < 0.98 THEN 'cancelled'
		                            WHEN r < 0.99 THEN 'expired' ELSE 'filtered' END AS st) y`,
		subs, benchSubscribers, benchSubjects, rows, benchSpan); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `VACUUM ANALYZE outcomes`); err != nil {
		tb.Fatal(err)
	}
	return subs
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank-1, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/store"
)

// Subscriptions of the subject listings' log: billing subscribes twice.
const (
	billingUpdatedSub = "billing:contacts.person.updated@1"
	billingDeletedSub = "billing:contacts.person.deleted@2"
	auditUpdatedSub   = "audit-log:contacts.person.updated@1"
)

// loadSubjectRows applies contacts (publishing person.updated@1 and
// person.deleted@2), billing subscribing to both, audit-log and idle
// subscribing to person.updated@1, and writes rows of the subject key "k":
// 40 of billing's, alternating between its two subscriptions, over five
// instants from at back (eight rows each, of both subscriptions: ties the
// pages must split by subscription, then event id), every fourth failed,
// every fourth after it queued, the rest delivered; 3,000 of audit-log's
// at the same instants; none of idle's. Billing also has 10 rows of the
// key "j". The table is analysed, as autovacuum would.
func loadSubjectRows(t *testing.T, s *store.Store, at time.Time) {
	t.Helper()
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.deleted", 2)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1), subTo("contacts.person.deleted", 2)))
	mustApply(t, s, mkManifest("audit-log", nil, subTo("contacts.person.updated", 1)))
	mustApply(t, s, mkManifest("idle", nil, subTo("contacts.person.updated", 1)))
	if _, err := s.Pool.Exec(ctx, `
		INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status, queued_at, updated_at)
		SELECT (ARRAY[$2, $3])[1 + i % 2], gen_random_uuid(), i, 'k',
		       CASE i % 4 WHEN 0 THEN 'failed' WHEN 1 THEN 'queued' ELSE 'delivered' END,
		       $1::timestamptz - (i % 5) * interval '1 second', $1
		  FROM generate_series(1, 40) AS i
		UNION ALL
		SELECT $4, gen_random_uuid(), i, 'k', 'delivered', $1::timestamptz - (i % 5) * interval '1 second', $1
		  FROM generate_series(1, 3000) AS i
		UNION ALL
		SELECT $2, gen_random_uuid(), i, 'j', 'delivered', $1, $1
		  FROM generate_series(1, 10) AS i`,
		at, billingUpdatedSub, billingDeletedSub, auditUpdatedSub); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `ANALYZE outcomes`); err != nil {
		t.Fatal(err)
	}
}

// TestListDeliveriesBySubjectPages: a subject key's listing, read per
// subscription in scope, lists in pages of any size exactly the rows of one
// sorted query, in its order (ties of one instant across an app's two
// subscriptions split by subscription, then event id; the cursor continues
// each subscription where the page ended), under the statuses and window
// filters, with the total of all pages; an app that sees none of the key's
// rows gets an empty page and a total of 0; the total stops at
// DeliveryTotalCap and is exact at it, a lower bound beyond it.
func TestListDeliveriesBySubjectPages(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	loadSubjectRows(t, s, at)
	ref := func(where string, args ...any) []string {
		t.Helper()
		rows, err := s.Pool.Query(ctx, `SELECT subscription_id || '|' || event_id FROM outcomes
			WHERE subject = 'k' AND `+where+`
			ORDER BY queued_at DESC, subscription_id COLLATE "C" DESC, event_id DESC`, args...)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	billing := `subscription_id IN ('` + billingUpdatedSub + `', '` + billingDeletedSub + `')`
	for _, c := range []struct {
		name  string
		f     store.DeliveryFilter
		want  []string
		sizes []int
	}{
		{"scope of an app subscribed twice", store.DeliveryFilter{Scope: "billing", Subject: "k"}, ref(billing), []int{1, 3, 8, 100}},
		{"an app, failed or queued", store.DeliveryFilter{App: "billing", Subject: "k", Statuses: []string{store.EventQueued, store.EventFailed}},
			ref(billing + ` AND status IN ('failed', 'queued')`), []int{1, 4, 100}},
		{"scope, a window without the latest instant", store.DeliveryFilter{Scope: "billing", Subject: "k",
			Since: at.Add(-3 * time.Second), Until: at}, ref(billing+` AND queued_at >= $1 AND queued_at < $2`, at.Add(-3*time.Second), at), []int{1, 5}},
		{"one subscription", store.DeliveryFilter{Subscription: billingDeletedSub, Subject: "k"},
			ref(`subscription_id = $1`, billingDeletedSub), []int{1, 3}},
		{"operator, every app", store.DeliveryFilter{Subject: "k", Statuses: []string{store.EventDelivered}},
			ref(`status = 'delivered'`), []int{77, 1000}},
		{"scope of an app with none of the key's rows", store.DeliveryFilter{Scope: "idle", Subject: "k"}, nil, []int{1, 100}},
	} {
		for _, size := range c.sizes {
			f := c.f
			f.Limit = size
			var got []string
			for n := 0; ; n++ {
				page, err := s.ListDeliveries(ctx, f)
				if err != nil {
					t.Fatalf("%s, pages of %d: %v", c.name, size, err)
				}
				if page.Total != len(c.want) || !page.TotalExact || page.Deliveries == nil {
					t.Fatalf("%s, pages of %d: total %d (exact %v, rows %v), want %d", c.name, size, page.Total, page.TotalExact,
						page.Deliveries, len(c.want))
				}
				for _, d := range page.Deliveries {
					if d.Subject != "k" || (c.f.Scope != "" && d.App != c.f.Scope) {
						t.Fatalf("%s: lists %+v", c.name, d)
					}
					got = append(got, d.Subscription+"|"+d.EventID)
				}
				if page.NextPageToken == "" || n > len(c.want) {
					break
				}
				f.PageToken = page.NextPageToken
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s, pages of %d: %d rows, not the %d of the sorted query in its order", c.name, size, len(got), len(c.want))
			}
		}
	}

	// The key "cap": 5,000 rows in each of billing's subscriptions, then
	// one more.
	capRows := func(sub string, n int) {
		t.Helper()
		if _, err := s.Pool.Exec(ctx, `
			INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status, queued_at, updated_at)
			SELECT $1, gen_random_uuid(), i, 'cap', 'delivered', $2, $2 FROM generate_series(1, $3::int) AS i`,
			sub, at, n); err != nil {
			t.Fatal(err)
		}
	}
	capRows(billingUpdatedSub, store.DeliveryTotalCap/2)
	capRows(billingDeletedSub, store.DeliveryTotalCap/2)
	for _, c := range []struct {
		name  string
		f     store.DeliveryFilter
		total int
		exact bool
	}{
		{"the cap, over two subscriptions", store.DeliveryFilter{Scope: "billing", Subject: "cap"}, store.DeliveryTotalCap, true},
		{"an app with none at the cap", store.DeliveryFilter{Scope: "audit-log", Subject: "cap"}, 0, true},
		{"a status with none", store.DeliveryFilter{Scope: "billing", Subject: "cap", Statuses: []string{store.EventFailed}}, 0, true},
	} {
		page, err := s.ListDeliveries(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if page.Total != c.total || page.TotalExact != c.exact || len(page.Deliveries) != min(c.total, store.DefaultDeliveryLimit) {
			t.Errorf("%s: total %d (exact %v), %d rows; want %d (exact %v)", c.name, page.Total, page.TotalExact,
				len(page.Deliveries), c.total, c.exact)
		}
	}
	capRows(billingDeletedSub, 1)
	page, err := s.ListDeliveries(ctx, store.DeliveryFilter{Scope: "billing", Subject: "cap"})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != store.DeliveryTotalCap || page.TotalExact || len(page.Deliveries) != store.DefaultDeliveryLimit || page.NextPageToken == "" {
		t.Errorf("beyond the cap: total %d (exact %v), %d rows, token %q; want %d, a lower bound, a full page and a token",
			page.Total, page.TotalExact, len(page.Deliveries), page.NextPageToken, store.DeliveryTotalCap)
	}
}

// TestListDeliveriesBySubjectReadsOnlyItsScope: a subject key's listing
// reads the rows and index entries of the subscriptions its scope keeps,
// never those of other apps: an app with none of the key's rows, which
// another app holds 3,000 of, reads no row or index entry of outcomes, and
// an app with 40 reads a few per row it lists. The counts are the
// statistics of the listing's transaction, not times.
func TestListDeliveriesBySubjectReadsOnlyItsScope(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	loadSubjectRows(t, s, time.Now().Add(-time.Hour).Truncate(time.Microsecond))
	vacuumAllVisible(t, s)
	for _, c := range []struct {
		f        store.DeliveryFilter
		rows     int
		maxReads int64
	}{
		{store.DeliveryFilter{Scope: "idle", Subject: "k"}, 0, 0},
		{store.DeliveryFilter{Scope: "idle", Subject: "k", Statuses: []string{store.EventDelivered}}, 0, 0},
		// The page's 40 index entries and rows, and the count's 40 entries.
		{store.DeliveryFilter{Scope: "billing", Subject: "k"}, 40, 3 * 40},
		// 6 index entries of each subscription, the 6 rows of the merge
		// and the count's 40 entries.
		{store.DeliveryFilter{Scope: "billing", Subject: "k", Limit: 5}, 5, 2*6 + 6 + 40},
	} {
		page, reads, err := s.ListDeliveriesOutcomeReads(ctx, c.f)
		if err != nil {
			t.Fatalf("%+v: %v", c.f, err)
		}
		if len(page.Deliveries) != c.rows || reads > c.maxReads {
			t.Errorf("scope %s: %d rows, read %d rows and index entries of outcomes; want %d rows and at most %d",
				c.f.Scope, len(page.Deliveries), reads, c.rows, c.maxReads)
		}
	}
}

// vacuumAllVisible vacuums outcomes until its every page is all-visible, as
// autovacuum keeps a settled log, so that the planner costs the listings'
// index-only reads as such. A page's rows become visible to all once no
// transaction of the cluster is older than them: another test's, or
// autovacuum's, may hold VACUUM back for a moment.
func vacuumAllVisible(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := s.Pool.Exec(ctx, `VACUUM ANALYZE outcomes`); err != nil {
			t.Fatal(err)
		}
		var visible, pages int
		if err := s.Pool.QueryRow(ctx, `SELECT relallvisible, relpages FROM pg_class WHERE oid = 'outcomes'::regclass`).Scan(&visible, &pages); err != nil {
			t.Fatal(err)
		}
		if visible >= pages {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("outcomes: %d of %d pages all-visible after 30 s of VACUUM", visible, pages)
		}
	}
}

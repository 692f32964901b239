package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/store"
)

// loadListingRows applies contacts (publishing person.updated@1) and billing
// and audit-log subscribing to it, and writes n outcome rows per
// subscription, all queued at the same instant (ties that pages must still
// split exactly): row i of a subscription has subject p-<i%3> and status
// failed when i%4 == 0, else delivered.
func loadListingRows(t *testing.T, s *store.Store, n int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	mustApply(t, s, mkManifest("audit-log", nil, subTo("contacts.person.updated", 1)))
	if _, err := s.Pool.Exec(ctx, `
		INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status, code, queued_at, updated_at)
		SELECT sub, gen_random_uuid(), i, 'p-' || (i % 3),
		       CASE WHEN i % 4 = 0 THEN 'failed' ELSE 'delivered' END,
		       CASE WHEN i % 4 = 0 THEN 'attempts_exhausted' END, $2, $2
		  FROM generate_series(1, $1::int) AS i,
		       unnest(ARRAY['billing:contacts.person.updated@1', 'audit-log:contacts.person.updated@1']) AS sub`,
		n, at); err != nil {
		t.Fatal(err)
	}
}

// TestListDeliveriesFiltersAndPages: filters and scopes select the right
// rows with a matching total; pages of any size list every row once, even
// when all rows share one queued_at; a token is refused with other filters;
// bad filters are errors naming them; an oversized limit is clamped.
func TestListDeliveriesFiltersAndPages(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	loadListingRows(t, s, 40, at)

	for _, c := range []struct {
		name string
		f    store.DeliveryFilter
		want int
	}{
		{"everything", store.DeliveryFilter{}, 80},
		{"subscriber app", store.DeliveryFilter{App: "billing"}, 40},
		{"scope of a subscriber", store.DeliveryFilter{Scope: "audit-log"}, 40},
		{"scope of the publisher", store.DeliveryFilter{Scope: "contacts"}, 80},
		{"scope of an app with nothing", store.DeliveryFilter{Scope: "nobody"}, 0},
		{"scope and another app", store.DeliveryFilter{Scope: "audit-log", App: "billing"}, 0},
		{"subscription", store.DeliveryFilter{Subscription: billingPersonSub}, 40},
		{"type", store.DeliveryFilter{EventType: "contacts.person.updated"}, 80},
		{"failed", store.DeliveryFilter{Statuses: []string{store.EventFailed}}, 20},
		{"failed or delivered", store.DeliveryFilter{Statuses: []string{store.EventFailed, store.EventDelivered}}, 80},
		{"subject", store.DeliveryFilter{Subject: "p-0"}, 26},
		{"subject and status of an app", store.DeliveryFilter{App: "billing", Subject: "p-0", Statuses: []string{store.EventFailed}}, 3},
		{"since", store.DeliveryFilter{Since: at}, 80},
		{"since after", store.DeliveryFilter{Since: at.Add(time.Microsecond)}, 0},
		{"until", store.DeliveryFilter{Until: at}, 0},
		{"until after", store.DeliveryFilter{Until: at.Add(time.Microsecond)}, 80},
	} {
		page, err := s.ListDeliveries(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if page.Total != c.want || !page.TotalExact || len(page.Deliveries) != min(c.want, store.DefaultDeliveryLimit) {
			t.Errorf("%s: total %d (exact %v), %d rows; want %d", c.name, page.Total, page.TotalExact, len(page.Deliveries), c.want)
		}
		for _, d := range page.Deliveries {
			if c.f.Scope != "" && c.f.Scope != "contacts" && d.App != c.f.Scope {
				t.Errorf("%s: lists %+v", c.name, d)
			}
		}
	}

	for _, size := range []int{1, 7, 80} {
		var seen []string
		f := store.DeliveryFilter{Limit: size}
		for n := 0; ; n++ {
			page, err := s.ListDeliveries(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if page.Total != 80 || n > 80 {
				t.Fatalf("pages of %d: page %d total %d", size, n, page.Total)
			}
			for _, d := range page.Deliveries {
				seen = append(seen, d.Subscription+"|"+d.EventID)
			}
			if page.NextPageToken == "" {
				break
			}
			f.PageToken = page.NextPageToken
		}
		if slices.Sort(seen); len(seen) != 80 || len(slices.Compact(seen)) != 80 {
			t.Errorf("pages of %d listed %d rows, %d distinct; want 80", size, len(seen), len(slices.Compact(seen)))
		}
	}

	first, err := s.ListDeliveries(ctx, store.DeliveryFilter{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListDeliveries(ctx, store.DeliveryFilter{Limit: 5, App: "billing", PageToken: first.NextPageToken}); !errors.Is(err, store.ErrBadPageToken) {
		t.Errorf("a token of other filters: %v, want ErrBadPageToken", err)
	}
	for _, tok := range []string{"x", "e30", "!!"} {
		if _, err := s.ListDeliveries(ctx, store.DeliveryFilter{PageToken: tok}); !errors.Is(err, store.ErrBadPageToken) {
			t.Errorf("token %q: %v, want ErrBadPageToken", tok, err)
		}
	}
	if _, err := s.ListDeliveries(ctx, store.DeliveryFilter{Statuses: []string{"stuck"}}); err == nil {
		t.Error("an unknown status was taken")
	}
	if _, err := s.ListDeliveries(ctx, store.DeliveryFilter{Since: at, Until: at}); err == nil {
		t.Error("an empty window was taken")
	}
	if _, err := s.ListDeliveries(ctx, store.DeliveryFilter{Subject: "p\x00"}); err == nil {
		t.Error("a NUL in a filter was taken")
	}
	if _, err := s.ListDeliveries(ctx, store.DeliveryFilter{Limit: 1 << 30}); err != nil {
		t.Errorf("an oversized limit: %v", err)
	}
}

// TestListDeliveriesMergesBranches: over 20 subscriptions (120 branches of
// subscription and status) where most rows are delivered and half of them
// share their day's instant with other subscriptions' rows, pages of any
// size list the rows in exactly the order of one sorted query, and a page
// of 100 reads a few hundred index entries, not a page's worth of each
// branch (over 3,000 here).
func TestListDeliveriesMergesBranches(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	loadOutcomeLog(t, s, 20_000)
	if _, err := s.Pool.Exec(ctx, `UPDATE outcomes SET queued_at = date_trunc('day', queued_at) WHERE event_seq % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	ref := func(where string, args ...any) []string {
		t.Helper()
		rows, err := s.Pool.Query(ctx, `SELECT subscription_id || '|' || event_id FROM outcomes `+where+`
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
	week := time.Now().Add(-7 * 24 * time.Hour)
	for _, c := range []struct {
		name  string
		f     store.DeliveryFilter
		want  []string
		sizes []int
	}{
		{"everything", store.DeliveryFilter{}, ref(``), []int{100, 1000}},
		{"failed and queued since a week", store.DeliveryFilter{Statuses: []string{store.EventFailed, store.EventQueued}, Since: week},
			ref(`WHERE status IN ('failed', 'queued') AND queued_at >= $1`, week), []int{7, 100}},
		{"an app", store.DeliveryFilter{App: "sub-04"}, ref(`WHERE subscription_id LIKE 'sub-04:%'`), []int{7, 1000}},
	} {
		for _, size := range c.sizes {
			f := c.f
			f.Limit = size
			var got []string
			for n := 0; ; n++ {
				page, read, err := s.ListDeliveriesRead(ctx, f)
				if err != nil {
					t.Fatalf("%s, pages of %d: %v", c.name, size, err)
				}
				if n == 0 && c.name == "everything" && size == 100 && read > 1000 {
					t.Errorf("%s: the first page of %d read %d index entries", c.name, size, read)
				}
				if want := min(len(c.want), store.DeliveryTotalCap); page.Total != want || page.TotalExact != (len(c.want) <= store.DeliveryTotalCap) {
					t.Fatalf("%s: total %d (exact %v), want %d of %d", c.name, page.Total, page.TotalExact, want, len(c.want))
				}
				for _, d := range page.Deliveries {
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
}

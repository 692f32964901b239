package store

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A listing without a subject key reads outcomes_list (subscription_id,
// status, queued_at, event_id): each (subscription, status) pair in scope is
// a branch whose rows the index gives newest first, and the page is the
// merge of the branches. Reading a page's worth of every branch would read
// branches × page entries (120,000 for a page of 1,000 over 20
// subscriptions); instead the merge reads every branch in batches that grow
// fourfold, and stops reading a branch once its next row cannot make the
// page. A listing dominated by a few busy branches reads little more than a
// page of them plus one short batch of each other branch.

// listKey is the sort key of a listing's row; listings run in descending
// order of it.
type listKey struct {
	QueuedAt     time.Time
	Subscription string
	EventID      string
}

// compareKeys orders keys as listings do: newest queued first, then by
// subscription and event id, descending, compared byte by byte (event ids
// in their canonical text, whose order is the uuid's).
func compareKeys(a, b listKey) int {
	return cmp.Or(b.QueuedAt.Compare(a.QueuedAt), cmp.Compare(b.Subscription, a.Subscription),
		cmp.Compare(b.EventID, a.EventID))
}

// branch is one (subscription, status) pair of a listing.
type branch struct {
	sub, status string
	// Its rows still to read are those whose (queued_at, event_id) is
	// below (t, e).
	t time.Time
	e string
	// batch is how many rows the next read asks for.
	batch int
	// done is set once a read reached the branch's end.
	done bool
}

// frontier is the key of the branch's last row read: its other rows sort
// after it.
func (b *branch) frontier() listKey {
	return listKey{QueuedAt: b.t, Subscription: b.sub, EventID: b.e}
}

// startAfter sets where the branch's rows start: all of them, or those that
// sort after the cursor c.
func (b *branch) startAfter(c *cursor) {
	nilID := uuid.Nil.String()
	switch {
	case c == nil:
		b.t, b.e = endOfTime, nilID
	case b.sub < c.Subscription:
		// (t, sub, e) after c: t <= c's time, any event id.
		b.t, b.e = c.QueuedAt.Add(time.Microsecond), nilID
	case b.sub > c.Subscription:
		b.t, b.e = c.QueuedAt, nilID
	default:
		b.t, b.e = c.QueuedAt, c.EventID
	}
}

// listByBranches lists the rows of the subscriptions in scope, up to
// f.Limit+1 of them, and counts them up to DeliveryTotalCap+1; read is how
// many index entries the merge read.
func listByBranches(ctx context.Context, tx pgx.Tx, f DeliveryFilter, w window, after *cursor) (page []Delivery, total, read int, err error) {
	q := withoutJIT()
	var subs []string
	q.Queue(`SELECT id FROM (`+scopedSubscriptions+`) s`, f.Scope, f.App, f.Subscription, f.EventType).Query(func(r pgx.Rows) (err error) {
		subs, err = pgx.CollectRows(r, pgx.RowTo[string])
		return err
	})
	if err := tx.SendBatch(ctx, q).Close(); err != nil || len(subs) == 0 {
		return nil, 0, 0, err
	}
	need := f.Limit + 1
	// The first batch reads about twice a page over all branches.
	first := min(need, max(2, 2*need/(len(subs)*len(f.Statuses))+1))
	var bs []*branch
	var branchSubs, branchStatuses []string
	for _, sub := range subs {
		for _, st := range f.Statuses {
			b := &branch{sub: sub, status: st, batch: first}
			b.startAfter(after)
			bs = append(bs, b)
			branchSubs, branchStatuses = append(branchSubs, sub), append(branchStatuses, st)
		}
	}
	var best []listKey
	for {
		// The branches whose next rows could still make the page.
		var active []*branch
		for _, b := range bs {
			if !b.done && (len(best) < need || compareKeys(b.frontier(), best[need-1]) < 0) {
				active = append(active, b)
			}
		}
		if len(active) == 0 {
			break
		}
		keys, err := readBranches(ctx, tx, active, w, need)
		if err != nil {
			return nil, 0, 0, err
		}
		read += len(keys)
		best = append(best, keys...)
		slices.SortFunc(best, compareKeys)
		best = best[:min(len(best), need)]
	}
	// The page's rows and the count in one round trip.
	q = &pgx.Batch{}
	queueFetch(q, best, &page)
	// Counting stops at the cap: a nested loop over the branches (OFFSET 0
	// keeps the planner from joining them any other way), each an index-only
	// range of outcomes_list.
	q.Queue(`SELECT count(*) FROM (
		SELECT 1 FROM unnest($1::text[], $2::text[]) AS b(sub, status)
		 CROSS JOIN LATERAL (SELECT 1 FROM outcomes o
		        WHERE o.subscription_id = b.sub AND o.status = b.status AND o.queued_at >= $3 AND o.queued_at < $4
		       OFFSET 0) o
		 LIMIT $5) c`, branchSubs, branchStatuses, w.since, w.until, DeliveryTotalCap+1).QueryRow(func(r pgx.Row) error {
		return r.Scan(&total)
	})
	if err := tx.SendBatch(ctx, q).Close(); err != nil {
		return nil, 0, 0, err
	}
	return page, total, read, nil
}

// readBranches reads the next batch of each branch's keys, moves each
// branch's start past what it read and grows its next batch fourfold (up to
// a page).
func readBranches(ctx context.Context, tx pgx.Tx, bs []*branch, w window, need int) ([]listKey, error) {
	subs, statuses := make([]string, len(bs)), make([]string, len(bs))
	ts, es, ns := make([]time.Time, len(bs)), make([]string, len(bs)), make([]int32, len(bs))
	for i, b := range bs {
		subs[i], statuses[i], ts[i], es[i], ns[i] = b.sub, b.status, b.t, b.e, int32(b.batch)
	}
	r, err := tx.Query(ctx, `SELECT b.i, o.queued_at, o.event_id::text
		  FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::uuid[], $5::int[]) WITH ORDINALITY AS b(sub, status, t, e, n, i)
		 CROSS JOIN LATERAL (
		       SELECT o.queued_at, o.event_id FROM outcomes o
		        WHERE o.subscription_id = b.sub AND o.status = b.status
		          AND o.queued_at >= $6 AND o.queued_at < $7 AND (o.queued_at, o.event_id) < (b.t, b.e)
		        ORDER BY o.queued_at DESC, o.event_id DESC
		        LIMIT b.n) o`, subs, statuses, ts, es, ns, w.since, w.until)
	if err != nil {
		return nil, err
	}
	got := make([]int, len(bs))
	var keys []listKey
	var i int64
	var k listKey
	_, err = pgx.ForEachRow(r, []any{&i, &k.QueuedAt, &k.EventID}, func() error {
		b := bs[i-1]
		k.Subscription = b.sub
		keys = append(keys, k)
		got[i-1]++
		// Rows of a branch come in its index order, newest first.
		b.t, b.e = k.QueuedAt, k.EventID
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, b := range bs {
		b.done = got[i] < b.batch
		b.batch = min(4*b.batch, need)
	}
	return keys, nil
}

// queueFetch queues the read of the rows of keys into *ds, in the keys'
// order.
func queueFetch(b *pgx.Batch, keys []listKey, ds *[]Delivery) {
	if len(keys) == 0 {
		return
	}
	subs, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		subs[i], ids[i] = k.Subscription, k.EventID
	}
	b.Queue(`SELECT `+deliveryColumns+`
		  FROM unnest($1::text[], $2::uuid[]) AS k(sub, id)
		  JOIN outcomes o ON o.subscription_id = k.sub AND o.event_id = k.id
		  JOIN subscriptions s ON s.id = o.subscription_id`, subs, ids).Query(func(r pgx.Rows) (err error) {
		if *ds, err = pgx.CollectRows(r, pgx.RowToStructByName[Delivery]); err != nil {
			return err
		}
		slices.SortFunc(*ds, func(a, b Delivery) int {
			return compareKeys(listKey{a.QueuedAt, a.Subscription, a.EventID}, listKey{b.QueuedAt, b.Subscription, b.EventID})
		})
		return nil
	})
}

package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Bounds of a listing of deliveries (docs/operations-api.md#listings).
const (
	DefaultDeliveryLimit = 100
	// MaxDeliveryLimit is the largest page; a bigger limit is clamped.
	MaxDeliveryLimit = 1000
	// DeliveryTotalCap bounds the count of a listing: beyond it the total
	// says "at least" (TotalExact false), so counting never reads more than
	// this many index entries.
	DeliveryTotalCap = 10000
)

// OutcomeStatuses are the statuses of outcome rows, in the order listings
// name them.
var OutcomeStatuses = []string{EventQueued, EventDelivered, EventFailed, EventCancelled, EventExpired, EventFiltered}

// ErrBadPageToken is returned for a page token that is not one a listing
// printed, or one printed for other filters.
var ErrBadPageToken = errors.New("not a page token of this listing")

// DeliveryFilter selects outcome rows (deliveries) from the log. Empty
// fields do not filter.
type DeliveryFilter struct {
	// Scope limits the listing to what an app's token may see: its
	// subscriptions and the subscriptions to the event types it publishes.
	Scope string
	// App is the subscriber app.
	App          string
	Subscription string
	EventType    string
	Subject      string
	// Statuses are outcome statuses (OutcomeStatuses); none means all.
	Statuses []string
	// Since and Until bound when the event was queued for the
	// subscription: Since <= queuedAt < Until; zero is unbounded.
	Since, Until time.Time
	// Limit is the page size: DefaultDeliveryLimit when zero or less,
	// clamped to MaxDeliveryLimit.
	Limit int
	// PageToken continues an earlier listing with the same filters.
	PageToken string
}

// Delivery is one outcome row of the log, with its subscription's app and
// event type.
type Delivery struct {
	Subscription string     `db:"subscription_id" json:"subscription"`
	App          string     `db:"app" json:"app"`
	EventType    string     `db:"type" json:"eventType"`
	Version      int        `db:"version" json:"version"`
	EventID      string     `db:"event_id" json:"eventId"`
	Seq          int64      `db:"event_seq" json:"seq"`
	Subject      string     `db:"subject" json:"subject"`
	Status       string     `db:"status" json:"status"`
	Attempts     int        `db:"attempts" json:"attempts"`
	Code         string     `db:"code" json:"code,omitempty"`
	LastCode     string     `db:"last_code" json:"lastCode,omitempty"`
	LastError    string     `db:"last_error" json:"lastError,omitempty"`
	QueuedAt     time.Time  `db:"queued_at" json:"queuedAt"`
	UpdatedAt    time.Time  `db:"updated_at" json:"updatedAt"`
	DeliveredAt  *time.Time `db:"delivered_at" json:"deliveredAt,omitempty"`
}

// DeliveryPage is one page of a listing.
type DeliveryPage struct {
	Deliveries []Delivery
	// Total counts every row the filters match (all pages), up to
	// DeliveryTotalCap; TotalExact is false when there are more.
	Total      int
	TotalExact bool
	// NextPageToken lists the next page; empty on the last one.
	NextPageToken string
}

// cursor is where a page ended: the last row's sort key.
type cursor struct {
	QueuedAt     time.Time `json:"t"`
	Subscription string    `json:"s"`
	EventID      string    `json:"e"`
	// Filters is the fingerprint of the listing's filters, so a token is
	// refused with other filters rather than giving a wrong page.
	Filters string `json:"f"`
}

// normalized checks the filter and fills in its defaults: an unknown status
// or a bad range is an error naming the field.
func (f DeliveryFilter) normalized() (DeliveryFilter, error) {
	for _, st := range f.Statuses {
		if !slices.Contains(OutcomeStatuses, st) {
			return f, fmt.Errorf("status %q is not one of %s", st, strings.Join(OutcomeStatuses, ", "))
		}
	}
	if len(f.Statuses) == 0 {
		f.Statuses = OutcomeStatuses
	}
	f.Statuses = slices.Clone(f.Statuses)
	slices.Sort(f.Statuses)
	f.Statuses = slices.Compact(f.Statuses)
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, fmt.Errorf("since %s is not before until %s", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	}
	if f.Limit <= 0 {
		f.Limit = DefaultDeliveryLimit
	}
	f.Limit = min(f.Limit, MaxDeliveryLimit)
	for _, s := range []string{f.Scope, f.App, f.Subscription, f.EventType, f.Subject} {
		if !queryableText(s) {
			return f, errors.New("a filter is not valid UTF-8 text")
		}
	}
	return f, nil
}

// fingerprint identifies the filters (not the page) of a listing.
func (f DeliveryFilter) fingerprint() string {
	b, _ := json.Marshal([]any{f.Scope, f.App, f.Subscription, f.EventType, f.Subject, f.Statuses,
		f.Since.UnixNano(), f.Until.UnixNano()})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// ValidatePageToken reports whether token could continue a listing (its
// form only; ListDeliveries also checks it was made for the same filters).
func ValidatePageToken(token string) error {
	_, err := decodeCursor(token)
	return err
}

func decodeCursor(token string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || json.Unmarshal(b, &c) != nil || c.Filters == "" || c.QueuedAt.IsZero() || !IsUUID(c.EventID) {
		return cursor{}, ErrBadPageToken
	}
	return c, nil
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// deliveryColumns are the columns of a Delivery, from outcomes o and
// subscriptions s.
const deliveryColumns = `o.subscription_id, s.app, s.type, s.version, o.event_id::text AS event_id, o.event_seq,
	o.subject, o.status, o.attempts, COALESCE(o.code, '') AS code, COALESCE(o.last_code, '') AS last_code,
	COALESCE(o.last_error, '') AS last_error, o.queued_at, o.updated_at, o.delivered_at`

// scopedSubscriptions selects the subscriptions a filter keeps ($1 scope,
// $2 app, $3 subscription, $4 event type).
const scopedSubscriptions = `SELECT id, app, type, version FROM subscriptions
	WHERE ($1 = '' OR app = $1 OR split_part(type, '.', 1) = $1)
	  AND ($2 = '' OR app = $2) AND ($3 = '' OR id = $3) AND ($4 = '' OR type = $4)`

// ListDeliveries lists the outcome rows matching f, newest queued first
// (ties by subscription and event id, compared byte by byte), one page at a
// time, with the total the filters match up to DeliveryTotalCap. It reads
// the log, so it finds deliveries whose key's workflow has long completed. A
// bad filter fails with a message naming it; a page token of another
// listing with an error wrapping ErrBadPageToken.
func (s *Store) ListDeliveries(ctx context.Context, f DeliveryFilter) (DeliveryPage, error) {
	page, _, err := s.listDeliveries(ctx, f, nil)
	return page, err
}

// listDeliveries is ListDeliveries, also returning how many index entries
// the page's merge read (not the count's), which bounds its cost. probe,
// unless nil, runs first and last in the listing's transaction (tests read
// the session's statistics there).
func (s *Store) listDeliveries(ctx context.Context, f DeliveryFilter, probe func(pgx.Tx) error) (DeliveryPage, int, error) {
	f, err := f.normalized()
	if err != nil {
		return DeliveryPage{}, 0, err
	}
	fp := f.fingerprint()
	var after *cursor
	if f.PageToken != "" {
		c, err := decodeCursor(f.PageToken)
		if err != nil {
			return DeliveryPage{}, 0, err
		}
		if c.Filters != fp {
			return DeliveryPage{}, 0, fmt.Errorf("page token of a listing with other filters: %w", ErrBadPageToken)
		}
		after = &c
	}
	w := window{since: f.Since, until: f.Until}
	if w.since.IsZero() {
		w.since = time.Unix(0, 0)
	}
	if w.until.IsZero() {
		w.until = endOfTime
	}
	var page DeliveryPage
	var read int
	// One snapshot, so the total and the page agree.
	err = pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if probe != nil {
			if err := probe(tx); err != nil {
				return err
			}
		}
		var err error
		if f.Subject != "" {
			page.Deliveries, page.Total, err = listBySubject(ctx, tx, f, w, after)
		} else {
			page.Deliveries, page.Total, read, err = listByBranches(ctx, tx, f, w, after)
		}
		if err != nil || probe == nil {
			return err
		}
		return probe(tx)
	})
	if err != nil {
		return DeliveryPage{}, 0, fmt.Errorf("list deliveries: %w", err)
	}
	page.TotalExact = page.Total <= DeliveryTotalCap
	page.Total = min(page.Total, DeliveryTotalCap)
	if len(page.Deliveries) > f.Limit {
		page.Deliveries = page.Deliveries[:f.Limit]
		last := page.Deliveries[f.Limit-1]
		page.NextPageToken = cursor{QueuedAt: last.QueuedAt, Subscription: last.Subscription, EventID: last.EventID, Filters: fp}.encode()
	}
	if page.Deliveries == nil {
		page.Deliveries = []Delivery{}
	}
	return page, read, nil
}

// endOfTime is later than any row's time.
var endOfTime = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// withoutJIT is a batch whose first statement turns JIT off for the
// listing's transaction: compiling costs tens of milliseconds, more than a
// listing's queries take, and the planner picks it on its estimates of the
// unnested arrays (and of a subscriptions table too small for autovacuum to
// analyse).
func withoutJIT() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(`SET LOCAL jit = off`)
	return b
}

// window bounds queued_at: since <= queued_at < until.
type window struct{ since, until time.Time }

// listBySubject lists a subject key's rows, up to f.Limit+1 of them, and
// counts them up to DeliveryTotalCap+1. It reads per subscription in scope:
// each one's rows of the key are a range of outcomes_list_key
// (subscription_id, subject, queued_at, event_id) INCLUDE (status), read
// newest first up to a page each and merged, so a listing reads only the
// rows of the subscriptions its scope keeps, never other apps' rows of the
// key (whose number its time would otherwise tell). The keys come from the
// index (alone, where the table's pages are all-visible) and only the
// page's rows from the table.
func listBySubject(ctx context.Context, tx pgx.Tx, f DeliveryFilter, w window, after *cursor) ([]Delivery, int, error) {
	c := cursor{QueuedAt: endOfTime, EventID: uuid.Max.String()}
	if after != nil {
		c = *after
	}
	// rows are a subscription's rows of the key that match the filters.
	// Both statements read them ordered as outcomes_list_key holds them, so
	// that no plan finds them by scanning outcomes (other apps' rows with
	// them): the index gives them in order, a scan would sort them all.
	const rows = `FROM outcomes o
		WHERE o.subscription_id = s.id AND o.subject = $5 AND o.status = ANY($6::text[])
		  AND o.queued_at >= $7 AND o.queued_at < $8`
	args := []any{f.Scope, f.App, f.Subscription, f.EventType, f.Subject, f.Statuses, w.since, w.until}
	// One round trip: a loaded server answers each one late.
	b := withoutJIT()
	var ds []Delivery
	var total int
	// Within a subscription the cursor's tie-break is (queued_at,
	// event_id); the subscription part of it picks, for rows queued at
	// the cursor's instant, all (a subscription sorting before the
	// cursor's), none (after it) or those after its event id (its own).
	// The page's rows are then read one by one by primary key (LIMIT 1
	// keeps it a lookup per row, never a join that reads outcomes whole).
	b.Queue(`SELECT `+deliveryColumns+`
		  FROM (SELECT s.app, s.type, s.version, k.subscription_id, k.event_id, k.queued_at
		          FROM (`+scopedSubscriptions+`) s
		         CROSS JOIN LATERAL (SELECT o.subscription_id, o.event_id, o.queued_at `+rows+`
		                  AND o.queued_at <= $9
		                  AND (o.queued_at, o.subscription_id COLLATE "C", o.event_id) < ($9, $10 COLLATE "C", $11::uuid)
		                ORDER BY o.queued_at DESC, o.event_id DESC
		                LIMIT $12) k
		         ORDER BY k.queued_at DESC, k.subscription_id COLLATE "C" DESC, k.event_id DESC
		         LIMIT $12) s
		 CROSS JOIN LATERAL (SELECT * FROM outcomes o
		        WHERE o.subscription_id = s.subscription_id AND o.event_id = s.event_id LIMIT 1) o
		 ORDER BY o.queued_at DESC, o.subscription_id COLLATE "C" DESC, o.event_id DESC`,
		append(args, c.QueuedAt, c.Subscription, c.EventID, f.Limit+1)...).Query(func(r pgx.Rows) (err error) {
		ds, err = pgx.CollectRows(r, pgx.RowToStructByName[Delivery])
		return err
	})
	// Counting stops at the cap, over the subscriptions in turn.
	b.Queue(`SELECT count(*) FROM (
		SELECT 1 FROM (`+scopedSubscriptions+`) s
		 CROSS JOIN LATERAL (SELECT 1 `+rows+` ORDER BY o.queued_at DESC, o.event_id DESC LIMIT $9) o
		 LIMIT $9) c`,
		append(args, DeliveryTotalCap+1)...).QueryRow(func(r pgx.Row) error { return r.Scan(&total) })
	err := tx.SendBatch(ctx, b).Close()
	return ds, total, err
}

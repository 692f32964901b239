package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the LISTEN/NOTIFY channel on which publishing wakes the relay.
const NotifyChannel = "herald_events"

// PendingEvent is an accepted event the relay has not dispatched yet.
type PendingEvent struct {
	Seq        int64     `db:"seq"`
	ID         string    `db:"id"`
	Type       string    `db:"type"`
	Version    int       `db:"version"`
	Subject    string    `db:"subject"`
	Envelope   []byte    `db:"envelope"`
	ReceivedAt time.Time `db:"received_at"`
	// TraceContext is the event's stored trace context (nil without one).
	TraceContext TraceContext `db:"trace_context"`
}

// Undispatched returns up to limit accepted, undispatched events in sequence
// order, leaving out every event that is held: backing off after a failed
// signal, dead, or later than such an event of the same type and subject (a
// key's events never overtake one another). Other keys' events fill the
// round in their place.
//
// Cost (EXPLAIN ANALYZE, 1,000,000 events, development PostgreSQL): with no event
// that failed a signal, the first NOT EXISTS is one probe of the empty
// partial index events_relay_held and the rest is not evaluated, so the
// read costs what it did before back-off (66 buffers, 0.4 ms). Otherwise
// each undispatched event read is checked with one probe of that index
// (type, subject, seq); OFFSET 0 keeps the check a per-row probe, which the
// planner would otherwise turn into a join with a scan of every held event
// per row (2.5 s with 5,101 held keys). The read then grows with the held
// events and those behind them that it passes: 105 ms passing 5,400.
//
// maxBytes bounds the envelopes read (the relay's memory): events are taken
// while the envelopes before them sum to less than maxBytes, so the first
// is always taken and a read holds less than maxBytes plus one envelope;
// zero or less reads up to limit whatever their size. A read that returns
// envelopes of maxBytes or more may have left events behind.
func (s *Store) Undispatched(ctx context.Context, limit int, maxBytes int64) ([]PendingEvent, error) {
	return s.undispatched(ctx, fmt.Sprintf(undispatched, "", "$1"), limit, byteCap(maxBytes))
}

// byteCap is maxBytes as the reads take it: no cap when zero or less.
func byteCap(maxBytes int64) int64 {
	if maxBytes <= 0 {
		return math.MaxInt64
	}
	return maxBytes
}

// EnvelopeBytes is what a read of undispatched events counts against its
// maxBytes: the sum of their envelopes' lengths.
func EnvelopeBytes(evs []PendingEvent) int64 {
	var n int64
	for _, ev := range evs {
		n += int64(len(ev.Envelope))
	}
	return n
}

// UndispatchedIn is Undispatched for the events of one relay partition
// (RelayPartitions): one range of the index events_relay_partition.
func (s *Store) UndispatchedIn(ctx context.Context, partition, limit int, maxBytes int64) ([]PendingEvent, error) {
	if partition < 0 || partition >= RelayPartitions {
		return nil, fmt.Errorf("read undispatched events: no relay partition %d", partition)
	}
	return s.undispatched(ctx, undispatchedIn, limit, byteCap(maxBytes), partition)
}

// undispatchedIn is UndispatchedIn's statement: $3 is the partition.
var undispatchedIn = fmt.Sprintf(undispatched, "AND "+eventsPartition+" = $3", "$1")

// eventsPartition is partitionOf of the subject of an event named e.
var eventsPartition = strings.ReplaceAll(partitionOf, "subject", "e.subject")

// undispatched reads the undispatched events; %[1]s narrows them to a
// partition, %[2]s is the limit's parameter, $2 the bytes' (maxBytes). The
// limit applies first, then the running sum of the envelopes' lengths
// (octet_length reads a stored value's length without decompressing it),
// so the sum never runs past the limit's rows, and an envelope left out is
// never sent to the client.
const undispatched = `
	SELECT seq, id, type, version, subject, envelope, received_at, trace_context FROM (
	SELECT l.*, sum(l.size) OVER (ORDER BY l.seq ROWS UNBOUNDED PRECEDING) - l.size AS before FROM (
	SELECT e.seq, e.id::text AS id, e.type, e.version, e.subject, e.envelope, e.received_at, e.trace_context,
	       COALESCE(octet_length(e.envelope), 0)::bigint AS size
	FROM events e
	WHERE e.state = 'accepted' %[1]s
	  AND (NOT EXISTS (SELECT 1 FROM events f WHERE f.state = 'accepted' AND f.relay_error IS NOT NULL)
	       OR NOT EXISTS (SELECT 1 FROM events h
	                      WHERE h.state = 'accepted' AND h.relay_error IS NOT NULL
	                        AND h.type = e.type AND h.subject = e.subject AND h.seq <= e.seq
	                        AND (h.relay_dead_at IS NOT NULL OR h.relay_next_try > now())
	                      OFFSET 0))
	ORDER BY e.seq LIMIT %[2]s) l) r
	WHERE r.before < $2 ORDER BY r.seq`

func (s *Store) undispatched(ctx context.Context, query string, args ...any) ([]PendingEvent, error) {
	rows, err := s.Pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read undispatched events: %w", err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[PendingEvent])
	if err != nil {
		return nil, fmt.Errorf("read undispatched events: %w", err)
	}
	return evs, nil
}

// MaxSeq is the highest sequence number of the event log (0 when empty):
// one probe of its primary key, which the idle relay leader reads every
// HERALD_RELAY_POLL_INTERVAL to see whether anything was published.
func (s *Store) MaxSeq(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.Pool.QueryRow(ctx, `SELECT COALESCE(max(seq), 0) FROM events`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read the event log's last sequence number: %w", err)
	}
	return seq, nil
}

// PartitionsAbove reads the relay partitions that hold undispatched
// events not tried yet (no relay_error: those backing off come due at the
// partition's next full round) with sequence numbers above after, in
// ascending order: one probe of events_relay_partition per partition,
// however many events wait, so the relay wakes only the partitions a
// publish reached rather than all of them.
func (s *Store) PartitionsAbove(ctx context.Context, after int64) ([]int, error) {
	var ps []int
	if err := s.Pool.QueryRow(ctx, partitionsAbove, after).Scan(&ps); err != nil {
		return nil, fmt.Errorf("read the relay partitions that new events are in: %w", err)
	}
	return ps, nil
}

// partitionsAbove is PartitionsAbove's statement: the LIMIT makes each
// partition one probe of the index, never a scan of its new events.
var partitionsAbove = fmt.Sprintf(`
	SELECT ARRAY(SELECT p::int FROM generate_series(0::bigint, %d) AS p,
	             LATERAL (SELECT 1 FROM events e
	                       WHERE e.state = 'accepted' AND %s = p AND e.seq > $1
	                         AND e.relay_error IS NULL
	                       LIMIT 1) AS x
	             ORDER BY p)`, RelayPartitions-1, eventsPartition)

// MarkDispatched records that the events with these sequence numbers were
// accepted by Temporal for every subscription.
func (s *Store) MarkDispatched(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	_, err := s.Pool.Exec(ctx, `
		UPDATE events SET state = 'dispatched', dispatched_at = now()
		WHERE seq = ANY($1) AND state = 'accepted'`, seqs)
	if err != nil {
		return fmt.Errorf("mark events dispatched: %w", err)
	}
	return nil
}

// Deliverable is a subscription that receives events at dispatch time
// (active or paused: a paused subscription's events wait in its workflows).
type Deliverable struct {
	ID      string `db:"id"`
	App     string `db:"app"`
	Type    string `db:"type"`
	Version int    `db:"version"`
	// Filter is the content filter in force ("" for none); FilterPrev the
	// one before FilterChangedAt, for events published before the change.
	Filter          string     `db:"filter"`
	FilterPrev      string     `db:"filter_prev"`
	FilterChangedAt *time.Time `db:"filter_changed_at"`
}

// FilterAt is the content filter in force for an event received at t.
func (d Deliverable) FilterAt(t time.Time) string {
	if d.FilterChangedAt != nil && t.Before(*d.FilterChangedAt) {
		return d.FilterPrev
	}
	return d.Filter
}

// DeliverableSubscriptions lists every active or paused subscription.
func (s *Store) DeliverableSubscriptions(ctx context.Context) ([]Deliverable, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT id, app, type, version, COALESCE(filter, '') AS filter, COALESCE(filter_prev, '') AS filter_prev,
		       filter_changed_at
		FROM subscriptions
		WHERE state IN ('active', 'paused') ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read deliverable subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Deliverable])
	if err != nil {
		return nil, fmt.Errorf("read deliverable subscriptions: %w", err)
	}
	return subs, nil
}

// Lag is how far the relay is behind.
type Lag struct {
	// Undispatched and OldestAge are about the events the relay still
	// tries; Dead counts those it gave up on (code relay_failed), which
	// wait for an operator.
	Undispatched int64         `json:"undispatched"`
	OldestAge    time.Duration `json:"oldestAge"`
	Dead         int64         `json:"dead"`
}

// RelayLag counts accepted, undispatched events that are not dead, the age
// of the oldest, and the dead ones.
func (s *Store) RelayLag(ctx context.Context) (Lag, error) {
	var l Lag
	var oldest *time.Time
	var now time.Time
	err := s.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE relay_dead_at IS NULL),
		       min(received_at) FILTER (WHERE relay_dead_at IS NULL),
		       count(*) FILTER (WHERE relay_dead_at IS NOT NULL), now()
		FROM events WHERE state = 'accepted'`).Scan(&l.Undispatched, &oldest, &l.Dead, &now)
	if err != nil {
		return Lag{}, fmt.Errorf("read relay lag: %w", err)
	}
	if oldest != nil {
		l.OldestAge = max(now.Sub(*oldest), 0)
	}
	return l, nil
}

// Envelopes returns the stored CloudEvent bodies of the given event ids of
// source app app; ids not found (purged by retention, another app's, or not
// UUIDs) are absent from the map. Ids are unique per source app only
// (migration 0018), so the app is part of every look-up: one app's id never
// fetches another app's body.
func (s *Store) Envelopes(ctx context.Context, app string, ids []string) (map[string][]byte, error) {
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !IsUUID(id) })
	rows, err := s.Pool.Query(ctx, `
		SELECT id::text, envelope FROM events
		 WHERE id = ANY($2::uuid[]) AND source_app = $1 AND state <> 'rejected'`, app, ids)
	if err != nil {
		return nil, fmt.Errorf("read envelopes of %s: %w", app, err)
	}
	defer rows.Close()
	out := make(map[string][]byte, len(ids))
	for rows.Next() {
		var id string
		var env []byte
		if err := rows.Scan(&id, &env); err != nil {
			return nil, fmt.Errorf("read envelopes of %s: %w", app, err)
		}
		out[id] = env
	}
	return out, rows.Err()
}

package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LeaderConn is the connection that holds l's lease, for tests that act on
// that session.
func LeaderConn(l *Leader) *pgxpool.Conn { return l.conn }

// TryLeadTTL is TryLead with a lease of ttl, for tests that wait for its
// renewals or expiry.
func (s *Store) TryLeadTTL(ctx context.Context, ttl time.Duration) (*Leader, error) {
	return s.tryLead(ctx, ttl)
}

// OlderLockAndInsertOne publishes ev in q as a publisher of a release
// before migration 0032 did: one statement locking the key's coarse stripe
// row alone, FNV-1a(subject) mod 256, inserting nothing without it. That
// statement's text is lockAndInsertOneFine's; only the row differs. It
// reports whether it inserted.
func OlderLockAndInsertOne(ctx context.Context, q Querier, ev NewEvent) (bool, error) {
	var seq int64
	err := q.QueryRow(ctx, lockAndInsertOneFine,
		ev.ID, ev.SourceApp, ev.Type, ev.Version, ev.Subject, ev.Envelope, ev.ContentHash, ev.Via, ev.Token,
		ev.TraceContext.param(), coarseStripe(keyStripe(ev.Subject))).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// KeyLockStatements are the statements that lock stripe rows, by name, with
// arguments for a publish of ev (lockStripes: ev's key alone).
func KeyLockStatements(ev NewEvent) map[string][]any {
	one := []any{ev.ID, ev.SourceApp, ev.Type, ev.Version, ev.Subject, ev.Envelope, ev.ContentHash, ev.Via, ev.Token,
		ev.TraceContext.param(), keyStripe(ev.Subject)}
	fine := []int32{keyStripe(ev.Subject)}
	return map[string][]any{
		lockAndInsertOne:     one,
		lockAndInsertOneFine: one,
		lockStripes:          {ev.Type, ev.Version, fine, coarseStripesOf(fine)},
	}
}

// MigrateTo applies the migrations up to version last.
func (s *Store) MigrateTo(ctx context.Context, last int) ([]int, error) { return s.migrate(ctx, last) }

// KeyStripe is the stripe of a subject's ordering key.
func KeyStripe(subject string) int32 { return keyStripe(subject) }

// KeyStripeCount is the number of fine stripes of one type and version,
// FineStripeBase the first one's row, CoarseStripeCount the number of
// coarse stripes.
const (
	KeyStripeCount    = fineStripes
	FineStripeBase    = fineStripeBase
	CoarseStripeCount = coarseStripes
)

// InsertEventsTxNotifying is InsertEventsTx as it was until issue 29: with
// a pg_notify inside tx when anything was inserted.
func InsertEventsTxNotifying(ctx context.Context, tx pgx.Tx, evs []NewEvent) ([]InsertedEvent, error) {
	out, err := InsertEventsTx(ctx, tx, evs)
	if err != nil {
		return nil, err
	}
	if anyInserted(out) {
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel)
	}
	return out, err
}

// InsertEventsTxUnderSavepoint is InsertEventsTx's way for several events
// (insertSeveralTx: the locks and the inserts that raise when an id is
// taken, under a savepoint, one round trip), whatever the number of events.
func InsertEventsTxUnderSavepoint(ctx context.Context, tx pgx.Tx, evs []NewEvent) ([]InsertedEvent, error) {
	out := make([]InsertedEvent, len(evs))
	if err := insertSeveralTx(ctx, tx, evs, out); err != nil {
		return nil, err
	}
	return out, nil
}

// InsertEventsTxTwoStatements is InsertEventsTx as it published one event
// until the one-statement way (lockAndInsertOne): the stripe's lock
// statement, then the insert, in one round trip.
func InsertEventsTxTwoStatements(ctx context.Context, tx pgx.Tx, evs []NewEvent) ([]InsertedEvent, error) {
	out := make([]InsertedEvent, len(evs))
	if err := lockAndInsertBatch(ctx, tx, evs, out); err != nil {
		return nil, err
	}
	return out, nil
}

// InsertEventRowsOnly inserts evs' rows with InsertEventsTx's statement,
// batched the same way, but neither locks their ordering keys nor notifies:
// plain INSERTs of the same rows, which BenchmarkConcurrentPublish measures
// publishing against. On a pool (no transaction) the batch is one implicit
// transaction.
func InsertEventRowsOnly(ctx context.Context, tx interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, evs []NewEvent) error {
	b := &pgx.Batch{}
	for _, ev := range evs {
		b.Queue(insertEvent, ev.ID, ev.SourceApp, ev.Type, ev.Version, ev.Subject, ev.Envelope, ev.ContentHash, ev.Via, ev.Token,
			ev.TraceContext.param())
	}
	return tx.SendBatch(ctx, b).Close()
}

// ListDeliveriesRead is ListDeliveries, also returning how many index
// entries the page's merge read.
func (s *Store) ListDeliveriesRead(ctx context.Context, f DeliveryFilter) (DeliveryPage, int, error) {
	return s.listDeliveries(ctx, f, nil)
}

// ListDeliveriesOutcomeReads is ListDeliveries, also returning how many
// rows and index entries of outcomes (table and indexes together) its
// statements read: the difference of the session's statistics before and
// after them, so a plan's reads are counted without timing it.
func (s *Store) ListDeliveriesOutcomeReads(ctx context.Context, f DeliveryFilter) (DeliveryPage, int64, error) {
	var reads []int64
	page, _, err := s.listDeliveries(ctx, f, func(tx pgx.Tx) error {
		var n int64
		err := tx.QueryRow(ctx, `SELECT sum(pg_stat_get_xact_tuples_returned(c.oid))::bigint FROM pg_class c
			WHERE c.oid = 'outcomes'::regclass
			   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'outcomes'::regclass)`).Scan(&n)
		reads = append(reads, n)
		return err
	})
	if err != nil {
		return page, 0, err
	}
	return page, reads[1] - reads[0], nil
}

// JoinRelayTTL is JoinRelay with leases of ttl (ticks of ttl/12), for tests
// that wait for rebalancing or expiry.
func (s *Store) JoinRelayTTL(ctx context.Context, ttl time.Duration) (*Member, error) {
	return s.joinRelay(ctx, ttl)
}

// MemberPID is the backend of m's connection.
func MemberPID(m *Member) uint32 { return m.conn.Conn().PgConn().PID() }

// UndispatchedInSQL is the statement UndispatchedIn runs.
func UndispatchedInSQL() string { return undispatchedIn }

// FactReaderKeys are the audit metadata keys key events are read from.
func FactReaderKeys() []string {
	keys := make([]string, 0, len(factReaders))
	for k := range factReaders {
		keys = append(keys, k)
	}
	return keys
}

// ReadsDeliveryFact reports whether meta gives any fact to a key event.
func ReadsDeliveryFact(meta map[string]any) bool {
	f := readDeliveryFacts(meta)
	return f.EventID != "" || f.LastCode != "" || f.Error != "" || f.FailedCode != "" || f.HoldExpiry != "" ||
		f.Seq != 0 || f.Attempts != 0 || f.Count != 0 || len(f.EventIDs) != 0
}

// InsertPublisherEventsTxApart is InsertPublisherEventsTx as it was until
// 2026-12-04: herald_publish under a savepoint of its own, taken and
// released in round trips of their own.
func InsertPublisherEventsTxApart(ctx context.Context, tx pgx.Tx, evs []NewEvent) ([]InsertedEvent, error) {
	a, err := eventArraysOf(evs)
	if err != nil {
		return nil, err
	}
	return publishSlowly(ctx, tx, a)
}

// The statements of one and of several outcome updates, whose plans
// TestOutcomeWriteFindsEventsByID checks.
var (
	OutcomeWriteOne  = outcomeWriteOne
	OutcomeWriteMany = outcomeWriteMany
)

// RequeueIn is Store.Requeue in q, so that a test can hold a requeue's
// transaction open across another session's work.
func RequeueIn(ctx context.Context, q Querier, subscriptionID, subject string, ids []string) ([]RequeuedEvent, map[string]string, error) {
	return requeue(ctx, q, subscriptionID, subject, ids)
}

// PurgeIn is one Store.PurgeEvents batch in tx, so that a test can hold
// the purge's transaction open across another session's work.
func PurgeIn(ctx context.Context, tx pgx.Tx, cutoff time.Time, limit int) (PurgeCounts, error) {
	outcomes, err := purgeOutcomes(ctx, tx, cutoff, limit)
	if err != nil {
		return PurgeCounts{}, err
	}
	events, err := purgeEvents(ctx, tx, cutoff, limit)
	return PurgeCounts{Events: events, Outcomes: outcomes}, err
}

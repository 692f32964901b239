package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxVersion is the largest event version (docs/design.md#identifiers).
const maxVersion = 1000000

// maxReasonRunes caps the stored reason of a rejection.
const maxReasonRunes = 1000

// maxRejectedFieldBytes caps the other text columns of a rejection row, which
// may come straight from a malformed request.
const maxRejectedFieldBytes = 400

// NewEvent is a validated event ready to be appended to the event log.
type NewEvent struct {
	ID          string // a UUID
	SourceApp   string
	Type        string
	Version     int
	Subject     string
	Envelope    []byte // the CloudEvent JSON delivered byte for byte
	ContentHash string // identifies the content for idempotent re-publishing
	// Via and Token record how the event reached Herald (events.published_via,
	// published_token); empty values are stored as NULL.
	Via, Token string
	// TraceContext is the W3C trace context of the publish span
	// ("traceparent", "tracestate"), stored in events.trace_context; empty
	// (no tracing) is stored as NULL.
	TraceContext TraceContext
}

// TraceContext is an event's stored W3C trace context: the "traceparent"
// and, when there is one, "tracestate" of its publish span. It is a
// propagation carrier: propagation.MapCarrier(tc) reads it.
type TraceContext map[string]string

// param is the value of a trace_context parameter: NULL when empty.
func (tc TraceContext) param() any {
	if len(tc) == 0 {
		return nil
	}
	return map[string]string(tc)
}

// InsertedEvent is the outcome of one NewEvent passed to InsertEvents.
type InsertedEvent struct {
	ID  string
	Seq int64
	// Duplicate: an event with this id and the same content hash was already
	// accepted; Seq is that event's sequence number and nothing was inserted.
	Duplicate bool
	// Conflict: an event with this id but different content exists; nothing
	// was inserted and Seq is zero.
	Conflict bool
}

// InsertEvents appends evs to the event log in a transaction of its own, in
// the order given, and returns one InsertedEvent per input, in the same order.
// It is InsertEventsTx in a transaction that commits when it succeeds; one
// event is one statement (lockAndInsertOne), its own transaction, with no
// BEGIN and COMMIT round trips. When it inserted anything it then wakes the
// relay (WakeRelay), outside the transaction.
func (s *Store) InsertEvents(ctx context.Context, evs []NewEvent) ([]InsertedEvent, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	out := make([]InsertedEvent, len(evs))
	insert := func() error {
		clear(out)
		if len(evs) == 1 {
			stmt := lockAndInsertOne
			if s.fineStripesOnly(ctx) {
				stmt = lockAndInsertOneFine
			}
			return lockAndInsertSingle(ctx, s.Pool, stmt, evs[0], &out[0])
		}
		err := s.WithTx(ctx, func(tx pgx.Tx) error { return lockAndInsertMany(ctx, tx, evs, out) })
		if raised(err, notAllInserted) {
			// An id is taken (a retried publish, mostly): that transaction
			// wrote nothing; this one tells duplicates from conflicts.
			clear(out)
			err = s.WithTx(ctx, func(tx pgx.Tx) error { return lockAndInsertBatch(ctx, tx, evs, out) })
		}
		return err
	}
	err := insert()
	if errors.Is(err, ErrNoKeyStripes) {
		// A type and version nobody declared (only tests write those): make
		// its stripe rows, then publish again.
		if err = s.WithTx(ctx, func(tx pgx.Tx) error { return makeKeyStripes(ctx, tx, evs) }); err == nil {
			err = insert()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("insert events: %w", err)
	}
	if anyInserted(out) {
		s.WakeRelay()
	}
	return out, nil
}

// anyInserted reports whether an insert added a row: neither a duplicate
// nor a conflict.
func anyInserted(out []InsertedEvent) bool {
	for _, ins := range out {
		if !ins.Duplicate && !ins.Conflict {
			return true
		}
	}
	return false
}

// InsertEventsTx appends evs to the event log inside tx, which the caller
// commits or rolls back: the events become visible to the relay only when tx
// commits, and a rollback leaves no trace of them. It returns one
// InsertedEvent per input, in the same order.
//
// It takes a pgx.Tx rather than a Querier because the ordering-key locks
// below are transaction-scoped: on a bare connection they would be released
// at once.
//
// Before inserting, it locks every distinct ordering key (type, version,
// subject) until tx ends. Sequence numbers come from a sequence, which hands
// them out at insert time, not at commit time: without the lock two
// publishers of one key could take seq 10 and 11 and commit 11 first, and a
// relay that had already moved past 11 would then see 10 appear behind it.
// Holding the key's lock from before the first insert until commit makes
// publishers of one key take their numbers one transaction after another, so
// within a key seq order is commit order and the relay may trust it.
//
// A key's lock is the row of its stripe in key_stripes, with the row of its
// coarse stripe while that is kept (keyStripe; lockAndInsert, which sends
// the locks and the inserts in one round trip, or for one event one
// statement that does both): a transaction holds at most fineStripes +
// coarseStripes row locks per type and version whatever the number of its
// keys, none of them in the server's shared lock table, and only Herald's
// roles may lock those rows. Stripes are locked in ascending order, type
// and version by type and version, coarse before fine, so two transactions
// sharing several keys cannot deadlock. The locks are held
// until tx ends, so a caller's long transaction holds up other publishers of
// the same stripes: of its own types and versions, never of another's.
//
// An id that already names an accepted or dispatched event of the same
// source app is not inserted again: the same content hash reports Duplicate
// with the stored seq (also within one call), a different one reports
// Conflict. Ids are unique per source app: another app's event with the id
// is no obstacle. It does not notify the relay: a NOTIFY would make the
// commit of tx wait for every other notifying transaction's (wake.go); the
// relay finds the events at its next poll, or sooner when a publish of
// InsertEvents wakes it.
//
// Several events are all or nothing, under a savepoint sent in the round
// trip that writes them: when any id is taken by other content, nothing is
// written and only the Conflict results say anything (the others carry
// their ID alone); when a statement fails (a lock not granted, a deadlock, a
// serialization failure) the error leaves tx as it was before the call.
// One event needs no savepoint: its one statement writes nothing when the
// id is taken, and its failure aborts tx as a failed statement of the
// caller's own would.
//
// A type and version without its stripe rows gives ErrNoKeyStripes and no
// event is written; tx stays usable (one event's statement inserts nothing).
func InsertEventsTx(ctx context.Context, tx pgx.Tx, evs []NewEvent) ([]InsertedEvent, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	out := make([]InsertedEvent, len(evs))
	if err := lockAndInsert(ctx, tx, evs, out); err != nil {
		return nil, fmt.Errorf("insert events: %w", err)
	}
	return out, nil
}

// A key's lock is the row of its fine stripe, fineStripeBase + FNV-1a of the
// subject mod fineStripes, and also, while the schema keeps coarse rows
// (key_stripe_scheme), the row of its coarse stripe, the same hash mod
// coarseStripes (the row publishers of releases before migration 0032
// lock; fineStripes is a multiple of coarseStripes, so
// the coarse stripe is the fine one mod coarseStripes). Keys of one type and
// version that share a stripe wait for each other's transactions; more
// stripes make that rarer and cost a row each. Changing a count or the hash
// while publishers run would let two of them lock one key under different
// rows: migration 0032 shows how (keep the old rows locked until no old
// publisher is left).
const (
	coarseStripes  = 256
	fineStripes    = 4096
	fineStripeBase = coarseStripes
)

// keyStripe is the row of subject's fine stripe: FNV-1a, fixed forever, so
// that every worker version maps a key to the same row.
func keyStripe(subject string) int32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(subject))
	return fineStripeBase + int32(h.Sum64()%fineStripes)
}

// coarseStripe is the row of the coarse stripe of the key whose fine stripe
// row is fine.
func coarseStripe(fine int32) int32 { return (fine - fineStripeBase) % coarseStripes }

// typeVersion is an event's type and version, whose stripes are locked
// together.
type typeVersion struct {
	typ     string
	version int
}

// stripeLocks are the ordering-key locks evs need: per type and version, in
// ascending order of both, the distinct stripes of its keys in ascending
// order.
func stripeLocks(evs []NewEvent) ([]typeVersion, map[typeVersion][]int32) {
	byType := map[typeVersion]map[int32]bool{}
	for _, ev := range evs {
		tv := typeVersion{ev.Type, ev.Version}
		if byType[tv] == nil {
			byType[tv] = map[int32]bool{}
		}
		byType[tv][keyStripe(ev.Subject)] = true
	}
	tvs := make([]typeVersion, 0, len(byType))
	for tv := range byType {
		tvs = append(tvs, tv)
	}
	sort.Slice(tvs, func(i, j int) bool {
		if tvs[i].typ != tvs[j].typ {
			return tvs[i].typ < tvs[j].typ
		}
		return tvs[i].version < tvs[j].version
	})
	stripes := make(map[typeVersion][]int32, len(tvs))
	for _, tv := range tvs {
		for s := range byType[tv] {
			stripes[tv] = append(stripes[tv], s)
		}
		slices.Sort(stripes[tv])
	}
	return tvs, stripes
}

// coarseStripesOf are the coarse stripe rows of fine stripe rows, in
// ascending order.
func coarseStripesOf(fine []int32) []int32 {
	coarse := make([]int32, 0, len(fine))
	for _, f := range fine {
		coarse = append(coarse, coarseStripe(f))
	}
	slices.Sort(coarse)
	return slices.Compact(coarse)
}

// ErrNoKeyStripes is returned by InsertEventsTx for events of a type and
// version that has no ordering-key stripe rows: one never declared, since a
// declaration makes them (migration 0014's trigger). Herald publishes only
// declared types; InsertEvents makes the rows and tries again, for tests
// that write the log directly.
var ErrNoKeyStripes = errors.New("the type and version lacks ordering-key stripe rows: never declared (apps apply), or rows deleted")

// stripesMissing starts the error of lockStripes when rows are missing.
const stripesMissing = "ordering-key stripe rows missing"

// The statements of a publish, sent together in one round trip
// (lockAndInsert). The stripes' rows are not made on the way: a separate
// INSERT for them, though it inserted nothing, cost about a third of the
// throughput of 64 concurrent publishers (BenchmarkConcurrentPublish).
const (
	// makeStripes makes the stripe rows of a type and version that has no
	// fine ones, in ascending order, as the trigger on declarations does:
	// the fine ones, and the coarse ones while they are kept (only events
	// of undeclared types, written by tests, need it). Rows another
	// transaction is making make it wait for that one, then do nothing.
	// The numbers are coarseStripes, fineStripes and fineStripeBase.
	makeStripes = `
		INSERT INTO key_stripes (type, version, stripe)
		SELECT $1, $2, s
		  FROM (SELECT s FROM generate_series(0, 255) AS s WHERE (SELECT coarse FROM key_stripe_scheme FOR SHARE)
		        UNION ALL
		        SELECT 256 + s FROM generate_series(0, 4095) AS s) AS rows
		 WHERE NOT EXISTS (SELECT 1 FROM key_stripes WHERE type = $1 AND version = $2 AND stripe >= 256)
		 ORDER BY s
		ON CONFLICT DO NOTHING`
	// lockStripes locks the given fine stripe rows ($3, ascending) and,
	// while the scheme keeps coarse rows, those of the coarse stripes ($4,
	// ascending) that are there, coarse first, one row at a time in that
	// order, until the transaction ends. If a fine row is missing it fails
	// (stripesMissing), which aborts the transaction before an event is
	// inserted without its key's lock. Each row is found by its whole key:
	// "stripe IN (...)" let the planner scan every row of the type and
	// filter when the table had no statistics yet (a new database), at
	// about a sixth of the rate for one event
	// (TestKeyLocksFindRowsByTheirWholeKey). (A publish of one event takes
	// lockAndInsertOne instead.)
	lockStripes = `
		SELECT CASE WHEN count(*) FILTER (WHERE k.stripe >= 256) = cardinality($3::integer[]) THEN 0
		            ELSE ('` + stripesMissing + `: ' || count(*) FILTER (WHERE k.stripe >= 256) || ' of ' ||
		                  cardinality($3::integer[]))::integer END
		  FROM unnest(CASE WHEN (SELECT coarse FROM key_stripe_scheme) THEN $4::integer[] || $3::integer[]
		                   ELSE $3::integer[] END) AS u(s)
		 CROSS JOIN LATERAL (SELECT stripe FROM key_stripes
		         WHERE type = $1 AND version = $2 AND stripe = u.s
		           FOR NO KEY UPDATE) AS k`
	// eventInsert, eventValues and eventOnConflict are the parts of an
	// event's INSERT that insertEvent and lockAndInsertOne share: the
	// columns, their values from $1-$10, and an id already taken.
	eventInsert = `
		INSERT INTO events (id, source_app, type, version, subject, envelope, content_hash, state,
		                    published_via, published_token, trace_context)`
	eventValues     = `$1, $2, $3, $4, $5, $6, $7, 'accepted', NULLIF($8, ''), NULLIF($9, ''), $10::jsonb`
	eventOnConflict = `
		ON CONFLICT (id, source_app) WHERE state <> 'rejected' DO NOTHING
		RETURNING seq`
	insertEvent = eventInsert + `
		VALUES (` + eventValues + `)` + eventOnConflict
	// insertEvents is insertEvent for several events in one statement, one
	// array a column ($1-$10, insertEventsArgs; insertChunks bounds them),
	// which returns their sequence numbers in the order of the arrays. A
	// statement costs PostgreSQL work that does not depend on its rows
	// (building the table's check and index expressions, starting the
	// executor): calls of 100 events took 24 µs an event, against 48 with
	// one statement an event (BenchmarkInsertEvents, at bb61d9e). The rows
	// are inserted in the order of the arrays (ORDER BY n: the sequence
	// hands out numbers as rows are inserted), so within a key seq order is
	// the order of the call, as with one statement an event. When an id is taken (before or
	// earlier in the call) it raises notAllInserted: the sequence numbers
	// of the rows it did insert no longer say which event is whose.
	insertEvents = `
		WITH ins AS (` + eventInsert + `
		SELECT u.id, u.source_app, u.type, u.version, u.subject, u.envelope, u.content_hash, 'accepted',
		       NULLIF(u.via, ''), NULLIF(u.token, ''), u.trace::jsonb
		  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bytea[],
		              $7::text[], $8::text[], $9::text[], $10::text[]) WITH ORDINALITY
		       AS u(id, source_app, type, version, subject, envelope, content_hash, via, token, trace, n)
		 ORDER BY u.n` + eventOnConflict + `)
		SELECT CASE WHEN count(*) = cardinality($1::uuid[]) THEN array_agg(seq ORDER BY seq)
		            ELSE ('` + notAllInserted + `: ' || count(*) || ' of ' || cardinality($1::uuid[]))::bigint[] END
		  FROM ins`
	// lockAndInsertOne is a publish of one event in one statement: it
	// locks the key's coarse row if the scheme keeps coarse rows and it is
	// there, then the key's fine stripe row ($11), then inserts the event
	// only if it got the fine row. Each lock is taken before what reads it
	// (the fine row's scan starts once the coarse count is known, the
	// insert reads the locked fine row), so the locks are held before the
	// sequence hands out the event's number, and a missing row inserts
	// nothing and returns nothing, like an id already taken
	// (lockAndInsertSingle tells the two apart). With 64 concurrent
	// publishers it published about 1.24 times as many events a second as
	// lockStripes and insertEvent in one round trip (measured at 4f26ce1),
	// and 1.05 times as many as the same statement also answering whether
	// the row was there (at b7cec63; BenchmarkConcurrentPublish). An id
	// already taken is found only after the lock, so a refused id_conflict
	// or a duplicate keeps the key's lock until the transaction ends, as
	// an accepted event would; PublishTx publishes one event without a
	// savepoint that could give it back. Probing the id before the lock
	// cost 3-15 % of the rate (six runs side by side at f5eb01d).
	lockAndInsertOne = `
		WITH coarse AS MATERIALIZED (
		  SELECT 1 FROM key_stripes
		   WHERE (SELECT coarse FROM key_stripe_scheme) AND type = $3 AND version = $4
		     AND stripe = ($11::integer - 256) % 256
		     FOR NO KEY UPDATE),
		locked AS MATERIALIZED (
		  SELECT 1 FROM key_stripes
		   WHERE (SELECT count(*) FROM coarse) >= 0 AND type = $3 AND version = $4 AND stripe = $11::integer
		     FOR NO KEY UPDATE)` +
		eventInsert + `
		SELECT ` + eventValues + ` FROM locked` + eventOnConflict
	// lockAndInsertOneFine is lockAndInsertOne once the coarse rows are
	// retired (Store.fineStripesOnly, fineStripesOnlyIn): the fine row's
	// lock alone. Reading the scheme and the coarse row cost
	// lockAndInsertOne about a fifth of its rate with 64 concurrent
	// publishers on separate stripes.
	lockAndInsertOneFine = `
		WITH locked AS MATERIALIZED (
		  SELECT 1 FROM key_stripes WHERE type = $3 AND version = $4 AND stripe = $11 FOR NO KEY UPDATE)` +
		eventInsert + `
		SELECT ` + eventValues + ` FROM locked` + eventOnConflict
)

// makeKeyStripes makes the stripe rows of evs' types and versions that have
// none (makeStripes), type by type in ascending order.
func makeKeyStripes(ctx context.Context, tx pgx.Tx, evs []NewEvent) error {
	tvs, _ := stripeLocks(evs)
	for _, tv := range tvs {
		if _, err := tx.Exec(ctx, makeStripes, tv.typ, tv.version); err != nil {
			return fmt.Errorf("make the key stripes of %s@%d: %w", tv.typ, tv.version, err)
		}
	}
	return nil
}

// lockAndInsert locks the stripe rows of every distinct ordering key of evs
// (type by type in ascending order, each type's stripes in ascending order;
// ErrNoKeyStripes when a type's rows are missing), then inserts evs in
// order, filling out; all in one round trip, statements in that order, for
// several events under a savepoint (insertSeveralTx). Ids that already exist
// are then resolved against the stored content hash. A transaction that
// shares several keys with another cannot deadlock with it: both lock in the
// same order.
func lockAndInsert(ctx context.Context, tx pgx.Tx, evs []NewEvent, out []InsertedEvent) error {
	if len(evs) == 1 {
		stmt := lockAndInsertOne
		fine, err := fineStripesOnlyIn(ctx, tx)
		if err != nil {
			return err
		}
		if fine {
			stmt = lockAndInsertOneFine
		}
		return lockAndInsertSingle(ctx, tx, stmt, evs[0], &out[0])
	}
	return insertSeveralTx(ctx, tx, evs, out)
}

// lockAndInsertMany is InsertEvents' way for several events in a
// transaction of their own: the lock statements, then insertEvents, in one
// round trip. When an id is taken insertEvents raises notAllInserted, and
// tx must be rolled back (the caller then runs lockAndInsertBatch, which
// tells each taken id's duplicate from its conflict).
func lockAndInsertMany(ctx context.Context, tx pgx.Tx, evs []NewEvent, out []InsertedEvent) error {
	tvs, stripes := stripeLocks(evs)
	chunks, err := insertChunks(evs)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	queueLocks(b, lockStripes, tvs, stripes)
	queueChunks(b, insertEvents, chunks)
	br := tx.SendBatch(ctx, b)
	err = readLocks(br, tvs)
	if err == nil {
		err = readChunks(br, chunks, out)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// One insertEvents statement takes at most insertChunkEvents events and,
// unless one event alone is larger, insertChunkBytes of envelopes: each of
// its arrays is one value of the protocol, which PostgreSQL bounds (1 GB),
// and a caller's transaction may publish any number of events. Several
// statements run one after another in the round trip, in the call's order.
const (
	insertChunkEvents = 1000
	insertChunkBytes  = 64 << 20
)

// eventChunk is a run of a call's events for one insertEvents statement:
// evs, from index at of the call, and the statement's parameters.
type eventChunk struct {
	at   int
	evs  []NewEvent
	args []any
}

// insertChunks splits evs into eventChunks, in order.
func insertChunks(evs []NewEvent) ([]eventChunk, error) {
	var chunks []eventChunk
	start, bytes := 0, 0
	cut := func(end int) error {
		args, err := insertEventsArgs(evs[start:end])
		if err != nil {
			return err
		}
		chunks = append(chunks, eventChunk{at: start, evs: evs[start:end], args: args})
		start, bytes = end, 0
		return nil
	}
	for i, ev := range evs {
		if i > start && (i-start == insertChunkEvents || bytes+len(ev.Envelope) > insertChunkBytes) {
			if err := cut(i); err != nil {
				return nil, err
			}
		}
		bytes += len(ev.Envelope)
	}
	if err := cut(len(evs)); err != nil {
		return nil, err
	}
	return chunks, nil
}

// queueChunks queues on b stmt (insertEvents, or its prepared name) for
// each chunk, in order.
func queueChunks(b *pgx.Batch, stmt string, chunks []eventChunk) {
	for _, c := range chunks {
		b.Queue(stmt, c.args...)
	}
}

// readChunks reads queueChunks' results from br into out, which holds one
// InsertedEvent for each event of the call, stopping at the first failure.
func readChunks(br pgx.BatchResults, chunks []eventChunk, out []InsertedEvent) error {
	for _, c := range chunks {
		var seqs []int64
		if err := br.QueryRow().Scan(&seqs); err != nil {
			return fmt.Errorf("insert %d events: %w", len(c.evs), err)
		}
		if len(seqs) != len(c.evs) {
			return fmt.Errorf("insert %d events: %d sequence numbers back", len(c.evs), len(seqs))
		}
		for i, ev := range c.evs {
			out[c.at+i] = InsertedEvent{ID: ev.ID, Seq: seqs[i]}
		}
	}
	return nil
}

// insertEventsArgs are insertEvents' parameters for evs: one array a
// column, in the order of evs.
func insertEventsArgs(evs []NewEvent) ([]any, error) {
	a, err := eventColumns(evs)
	if err != nil {
		return nil, err
	}
	return []any{a.ids, a.apps, a.types, a.versions, a.subjects, a.envelopes, a.hashes, a.vias, a.tokens, a.traces}, nil
}

// lockAndInsertBatch is lockAndInsert's way for several events: the lock
// statements, then one insert per event, in one round trip. Ids that already
// exist are then resolved (resolveExisting).
func lockAndInsertBatch(ctx context.Context, tx pgx.Tx, evs []NewEvent, out []InsertedEvent) error {
	tvs, stripes := stripeLocks(evs)
	b := &pgx.Batch{}
	queueLocks(b, lockStripes, tvs, stripes)
	queueInserts(b, evs)
	br := tx.SendBatch(ctx, b)
	err := readLocks(br, tvs)
	var existing []int
	for i := 0; err == nil && i < len(evs); i++ {
		out[i].ID = evs[i].ID
		switch serr := br.QueryRow().Scan(&out[i].Seq); {
		case errors.Is(serr, pgx.ErrNoRows):
			existing = append(existing, i)
		case serr != nil:
			err = fmt.Errorf("insert event %s: %w", evs[i].ID, serr)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, i := range existing {
		found, err := resolveExisting(ctx, tx, evs[i], &out[i])
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("look up event %s: %w", evs[i].ID, pgx.ErrNoRows)
		}
	}
	return nil
}

// queueLocks queues on b stmt (lockStripes, or its prepared name) for each
// type and version tvs, in lock order, with its stripes.
func queueLocks(b *pgx.Batch, stmt string, tvs []typeVersion, stripes map[typeVersion][]int32) {
	for _, tv := range tvs {
		b.Queue(stmt, tv.typ, tv.version, stripes[tv], coarseStripesOf(stripes[tv]))
	}
}

// queueInserts queues on b insertEvent for each event of evs, in order.
func queueInserts(b *pgx.Batch, evs []NewEvent) {
	for _, ev := range evs {
		b.Queue(insertEvent, ev.ID, ev.SourceApp, ev.Type, ev.Version, ev.Subject, ev.Envelope, ev.ContentHash, ev.Via, ev.Token,
			ev.TraceContext.param())
	}
}

// readLocks reads the results of queueLocks' statements for tvs from br: a
// missing stripe row is ErrNoKeyStripes.
func readLocks(br pgx.BatchResults, tvs []typeVersion) error {
	for _, tv := range tvs {
		if _, err := br.Exec(); err != nil {
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
				if i := strings.Index(pgErr.Message, `"`+stripesMissing); i >= 0 {
					err = fmt.Errorf("%w (%s)", ErrNoKeyStripes, strings.Trim(pgErr.Message[i:], `"`))
				}
			}
			return fmt.Errorf("lock ordering keys of %s@%d: %w", tv.typ, tv.version, err)
		}
	}
	return nil
}

// Several events published in a caller's transaction are all or nothing,
// and a failure leaves the transaction usable, through a savepoint; its
// statements travel in the round trip that writes the events
// (underSavepoint). A savepoint in round trips of its own costs a publish
// two round trips more, which keep the caller's transaction, and its key
// locks, that much longer over a network; on loopback they cost 64
// concurrent publishers little (BenchmarkConcurrentPublish: savepoint
// against savepoint-apart, docs/performance.md).
const (
	takeSavepoint    = `SAVEPOINT herald_publish`
	releaseSavepoint = `RELEASE SAVEPOINT herald_publish`
	// undoSavepoint takes back what the call wrote, the key locks it took
	// included, and ends the savepoint: the caller's transaction is as it
	// was before the call.
	undoSavepoint = `ROLLBACK TO SAVEPOINT herald_publish; RELEASE SAVEPOINT herald_publish`
	// notAllInserted is the error a call's statement raises when an event
	// of the call was not inserted, its id being taken (by an event stored
	// before or earlier in the call, with the same content or not): the
	// savepoint is then undone and the call runs again the slow way to
	// tell duplicates from conflicts. The statements that raise it build
	// the message from what they counted: a constant cast is evaluated
	// when the statement is prepared.
	notAllInserted = "herald: not every event of the call was inserted"
)

// raised reports whether err is a statement of a call raising msg
// (notAllInserted, stripesMissing).
func raised(err error, msg string) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && strings.Contains(pgErr.Message, msg)
}

// insertSeveralTx is InsertEventsTx for several events: lockStripes and
// insertEvents under a savepoint, in one round trip once the connection has
// them prepared (underSavepoint). When an id is taken it runs again the slow
// way (insertSeveralTxSlowly), which tells duplicates from conflicts.
func insertSeveralTx(ctx context.Context, tx pgx.Tx, evs []NewEvent, out []InsertedEvent) error {
	tvs, stripes := stripeLocks(evs)
	chunks, err := insertChunks(evs)
	if err != nil {
		return err
	}
	queue := func(b *pgx.Batch, ref func(namedStatement) string) {
		queueLocks(b, ref(stmtLockStripes), tvs, stripes)
		queueChunks(b, ref(stmtInsertEvents), chunks)
	}
	err = underSavepoint(ctx, tx, heraldStatements, queue, func(br pgx.BatchResults) error {
		if err := readLocks(br, tvs); err != nil {
			return err
		}
		return readChunks(br, chunks, out)
	})
	if raised(err, notAllInserted) && !errors.Is(err, errSavepointKept) {
		clear(out)
		return insertSeveralTxSlowly(ctx, tx, evs, out)
	}
	return err
}

// insertSeveralTxSlowly is insertSeveralTx under a savepoint in round trips
// of its own with plain inserts (lockAndInsertBatch), which tell each taken
// id's duplicate from its conflict (underOwnSavepoint).
func insertSeveralTxSlowly(ctx context.Context, tx pgx.Tx, evs []NewEvent, out []InsertedEvent) error {
	_, err := underOwnSavepoint(ctx, tx, func(sp pgx.Tx) ([]InsertedEvent, error) {
		return out, lockAndInsertBatch(ctx, sp, evs, out)
	})
	return err
}

// lockAndInsertSingle is lockAndInsert for one event, in one statement
// (stmt: lockAndInsertOne, or lockAndInsertOneFine), inside a transaction or as a transaction of its own
// (q a pool: the key's lock is held until the statement commits). When it
// inserts nothing, the event's id is taken (resolveExisting) or its key's
// stripe row is missing (ErrNoKeyStripes); either way nothing was written,
// and a caller's transaction goes on. Those are told apart by later
// statements, which may see rows another publisher made since: a row that
// was missing and is there now (a new type's rows, made by another
// publisher) sends the publish again, at most singleAttempts times.
func lockAndInsertSingle(ctx context.Context, q Querier, stmt string, ev NewEvent, out *InsertedEvent) error {
	out.ID = ev.ID
	stripe := keyStripe(ev.Subject)
	for range singleAttempts {
		err := q.QueryRow(ctx, stmt, ev.ID, ev.SourceApp, ev.Type, ev.Version, ev.Subject, ev.Envelope,
			ev.ContentHash, ev.Via, ev.Token, ev.TraceContext.param(), stripe).Scan(&out.Seq)
		if !errors.Is(err, pgx.ErrNoRows) {
			if err != nil {
				return fmt.Errorf("lock the ordering key of event %s and insert it: %w", ev.ID, err)
			}
			return nil
		}
		if found, err := resolveExisting(ctx, q, ev, out); err != nil || found {
			return err
		}
		var hasStripe bool
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM key_stripes WHERE type = $1 AND version = $2 AND stripe = $3)`,
			ev.Type, ev.Version, stripe).Scan(&hasStripe); err != nil {
			return fmt.Errorf("look up the ordering-key stripe of event %s: %w", ev.ID, err)
		}
		if !hasStripe {
			return fmt.Errorf("lock ordering keys of %s@%d: %w (%s: 0 of 1)", ev.Type, ev.Version, ErrNoKeyStripes, stripesMissing)
		}
	}
	return fmt.Errorf("insert event %s: neither inserted nor found in %d attempts", ev.ID, singleAttempts)
}

// singleAttempts bounds lockAndInsertSingle's attempts at one event.
const singleAttempts = 3

// resolveExisting fills out for an event whose insert did nothing because
// its id may be taken, and reports whether it is: Duplicate with the
// stored seq when the content hash is the same, Conflict otherwise. The row
// that won the id is committed (ON CONFLICT waited for it) or belongs to
// this transaction, so a fresh statement sees it.
func resolveExisting(ctx context.Context, q Querier, ev NewEvent, out *InsertedEvent) (bool, error) {
	var seq int64
	var hash *string
	err := q.QueryRow(ctx,
		`SELECT seq, content_hash FROM events WHERE id = $1 AND source_app = $2 AND state <> 'rejected'`,
		ev.ID, ev.SourceApp).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up event %s: %w", ev.ID, err)
	}
	if hash != nil && *hash == ev.ContentHash {
		out.Seq = seq
		out.Duplicate = true
	} else {
		out.Conflict = true
	}
	return true, nil
}

// Rejection is a refused publish request as it is recorded in the event log.
// Any field but Code may be empty; text is made storable (valid UTF-8, no NUL
// bytes, bounded length) because it may come from a malformed request.
type Rejection struct {
	ID        string // recorded only when it is a UUID
	SourceApp string
	Type      string
	Version   int    // recorded as NULL when zero
	Subject   string // recorded as NULL when empty
	Code      string
	Reason    string // cut to 1000 characters
	Via       string // as NewEvent.Via
	Token     string // as NewEvent.Token
}

// RecordRejection appends a rejected event (state 'rejected') to the log, so
// that operators can list the latest rejections.
func (s *Store) RecordRejection(ctx context.Context, r Rejection) error {
	f := r.storable()
	_, err := s.Pool.Exec(ctx, `
		INSERT INTO events (id, source_app, type, version, subject, state, code, reason, published_via, published_token)
		VALUES ($1, $2, $3, $4, $5, 'rejected', $6, $7, NULLIF($8, ''), NULLIF($9, ''))`,
		f.id, storableText(r.SourceApp, maxRejectedFieldBytes), f.typ, f.version, f.subject, f.code, f.reason, r.Via, r.Token)
	if err != nil {
		return fmt.Errorf("record rejection %s: %w", r.Code, err)
	}
	return nil
}

// storedRejection is a Rejection's fields as its row takes them.
type storedRejection struct {
	id, subject *string // NULL when the request had no usable one
	version     *int32
	typ, code   string
	reason      string
}

// storable cuts and converts r's fields for its row: a UUID id or NULL, a
// version that fits the column or NULL, text PostgreSQL accepts, cut to
// the column limits.
func (r Rejection) storable() storedRejection {
	f := storedRejection{typ: storableText(r.Type, maxRejectedFieldBytes), code: storableText(r.Code, maxRejectedFieldBytes)}
	if u, err := uuid.Parse(r.ID); err == nil {
		v := u.String()
		f.id = &v
	}
	if r.Subject != "" {
		v := storableText(r.Subject, maxRejectedFieldBytes)
		f.subject = &v
	}
	if r.Version != 0 && r.Version >= math.MinInt32 && r.Version <= math.MaxInt32 {
		v := int32(r.Version)
		f.version = &v
	}
	f.reason = storableText(r.Reason, 4*maxReasonRunes)
	if utf8.RuneCountInString(f.reason) > maxReasonRunes {
		f.reason = string([]rune(f.reason)[:maxReasonRunes])
	}
	return f
}

// storableText makes s acceptable to a PostgreSQL text column (valid UTF-8,
// no NUL byte) and at most max bytes long, cutting on a rune boundary.
func storableText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// queryableText reports whether s can be compared with a text column at all:
// PostgreSQL refuses invalid UTF-8 and NUL bytes in parameters.
func queryableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// RejectedEvent is one recorded rejection.
type RejectedEvent struct {
	Seq        int64     `db:"seq"`
	ID         string    `db:"id"` // empty when the request had no usable id
	SourceApp  string    `db:"source_app"`
	Type       string    `db:"type"`
	Version    int       `db:"version"` // zero when unknown
	Subject    string    `db:"subject"`
	Code       string    `db:"code"`
	Reason     string    `db:"reason"`
	ReceivedAt time.Time `db:"received_at"`
}

// LastRejections returns up to limit recorded rejections, newest first.
func (s *Store) LastRejections(ctx context.Context, limit int) ([]RejectedEvent, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT seq, coalesce(id::text, '') AS id, source_app, type, coalesce(version, 0) AS version,
		       coalesce(subject, '') AS subject, coalesce(code, '') AS code,
		       coalesce(reason, '') AS reason, received_at
		FROM events
		WHERE state = 'rejected'
		ORDER BY received_at DESC, seq DESC
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list rejections: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[RejectedEvent])
	if err != nil {
		return nil, fmt.Errorf("list rejections: %w", err)
	}
	return out, nil
}

// AppRejections is the count of one app's rejected events still in the
// event log (retention deletes them with the rest).
type AppRejections struct {
	// App is the source app the request named, as recorded (an unknown
	// app's name too).
	App   string    `db:"source_app" json:"app"`
	Total int64     `db:"total" json:"total"`
	Last  time.Time `db:"last" json:"last"`
}

// RejectionsPerApp counts the rejected events of the log per source app,
// the app with the most first.
func (s *Store) RejectionsPerApp(ctx context.Context) ([]AppRejections, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT source_app, count(*) AS total, max(received_at) AS last
		  FROM events
		 WHERE state = 'rejected'
		 GROUP BY source_app
		 ORDER BY total DESC, source_app`)
	if err != nil {
		return nil, fmt.Errorf("count rejections per app: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[AppRejections])
	if err != nil {
		return nil, fmt.Errorf("count rejections per app: %w", err)
	}
	return out, nil
}

// StoredEvent is an accepted or dispatched event of the log.
type StoredEvent struct {
	Seq          int64      `db:"seq"`
	ID           string     `db:"id"`
	SourceApp    string     `db:"source_app"`
	Type         string     `db:"type"`
	Version      int        `db:"version"`
	Subject      string     `db:"subject"`
	Envelope     []byte     `db:"envelope"`
	State        string     `db:"state"`
	ReceivedAt   time.Time  `db:"received_at"`
	DispatchedAt *time.Time `db:"dispatched_at"` // nil until dispatched
	// PublishedVia and PublishedToken say how the event came (NewEvent.Via,
	// Token); empty for events recorded before Herald kept them.
	PublishedVia   string `db:"published_via"`
	PublishedToken string `db:"published_token"`
	// RelayAttempts counts the relay's failed signals of an undispatched
	// event, RelayError keeps the last one's error and RelayNextTry when
	// the relay tries again; RelayDeadAt is set once it gave up (code
	// relay_failed). A dispatched event keeps them as they were.
	RelayAttempts int        `db:"relay_attempts"`
	RelayError    string     `db:"relay_error"`
	RelayNextTry  *time.Time `db:"relay_next_try"`
	RelayDeadAt   *time.Time `db:"relay_dead_at"`
}

// ErrAmbiguousEvent is returned when an event id names events of several
// apps (ids are unique per source app) and no app was given.
var ErrAmbiguousEvent = errors.New("event id names events of several apps")

// GetEvent returns the accepted or dispatched event with the given id, or
// ErrNotFound (also when id is not a UUID). When events of several apps
// have the id it fails with an error wrapping ErrAmbiguousEvent that names
// them: ask GetAppEvent.
func (s *Store) GetEvent(ctx context.Context, id string) (StoredEvent, error) {
	return s.GetAppEvent(ctx, "", id)
}

// GetAppEvent is GetEvent for the event of source app app; an empty app
// means any.
func (s *Store) GetAppEvent(ctx context.Context, app, id string) (StoredEvent, error) {
	evs, err := s.eventsWithID(ctx, "", app, id)
	switch {
	case err != nil:
		return StoredEvent{}, err
	case len(evs) > 1:
		apps := make([]string, len(evs))
		for i, ev := range evs {
			apps[i] = ev.SourceApp
		}
		return StoredEvent{}, fmt.Errorf("event id %s names events of apps %s: %w", id, strings.Join(apps, ", "), ErrAmbiguousEvent)
	}
	return evs[0], nil
}

// eventsWithID returns the accepted or dispatched events with id, of
// source app app when not empty, that scope may see: every one when scope
// is empty, else its own events (as publisher) and those handed to one of
// its subscriptions; ordered by source app. None is ErrNotFound (also when
// id is not a UUID).
func (s *Store) eventsWithID(ctx context.Context, scope, app, id string) ([]StoredEvent, error) {
	u, err := uuid.Parse(id)
	if err != nil || !queryableText(app) || !queryableText(scope) {
		return nil, fmt.Errorf("event %q: %w", id, ErrNotFound)
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT seq, id::text AS id, source_app, type, version, subject, envelope, state,
		       received_at, dispatched_at, coalesce(published_via, '') AS published_via,
		       coalesce(published_token, '') AS published_token,
		       relay_attempts, coalesce(relay_error, '') AS relay_error, relay_next_try, relay_dead_at
		  FROM events e
		 WHERE e.id = $1 AND e.state <> 'rejected' AND ($2 = '' OR e.source_app = $2)
		   AND ($3 = '' OR e.source_app = $3 OR EXISTS (
		        SELECT 1 FROM outcomes o JOIN subscriptions s ON s.id = o.subscription_id
		         WHERE o.event_id = e.id AND s.app = $3 AND s.type = e.type AND s.version = e.version))
		 ORDER BY source_app`, u.String(), app, scope)
	if err != nil {
		return nil, fmt.Errorf("get event %s: %w", id, err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[StoredEvent])
	switch {
	case err != nil:
		return nil, fmt.Errorf("get event %s: %w", id, err)
	case len(evs) == 0:
		return nil, fmt.Errorf("event %s: %w", id, ErrNotFound)
	}
	return evs, nil
}

// DeclaredEvent is an un-retired declaration as the publisher needs it.
type DeclaredEvent struct {
	Type       string          `db:"type"`
	Version    int             `db:"version"`
	App        string          `db:"app"`
	Subject    string          `db:"subject"`
	DataSchema json.RawMessage `db:"data_schema"`
	Place      json.RawMessage `db:"place"` // nil when the event is not resource-scoped
	Deprecated bool            `db:"deprecated"`
}

// LookupDeclaration returns the un-retired declaration of typ@version, or
// ErrNotFound.
func (s *Store) LookupDeclaration(ctx context.Context, typ string, version int) (DeclaredEvent, error) {
	return LookupDeclarationIn(ctx, s.Pool, typ, version)
}

// LookupDeclarationIn is LookupDeclaration on q, a pool or a caller's
// transaction.
func LookupDeclarationIn(ctx context.Context, q Querier, typ string, version int) (DeclaredEvent, error) {
	return lookupDeclaration(ctx, q, `
		SELECT type, version, app, subject, data_schema, place, deprecated
		FROM declarations
		WHERE type = $1 AND version = $2 AND retired_at IS NULL`, typ, version)
}

// lookupDeclaration runs query, which selects one declaration's columns by
// type ($1) and version ($2); none found is ErrNotFound.
func lookupDeclaration(ctx context.Context, q Querier, query, typ string, version int) (DeclaredEvent, error) {
	if version < 1 || version > maxVersion || !queryableText(typ) {
		return DeclaredEvent{}, fmt.Errorf("declaration %q@%d: %w", typ, version, ErrNotFound)
	}
	rows, err := q.Query(ctx, query, typ, version)
	if err != nil {
		return DeclaredEvent{}, fmt.Errorf("look up declaration %s@%d: %w", typ, version, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[DeclaredEvent])
	if errors.Is(err, pgx.ErrNoRows) {
		return DeclaredEvent{}, fmt.Errorf("declaration %s@%d: %w", typ, version, ErrNotFound)
	}
	if err != nil {
		return DeclaredEvent{}, fmt.Errorf("look up declaration %s@%d: %w", typ, version, err)
	}
	return d, nil
}

// AppExists reports whether app has been applied and not removed.
func (s *Store) AppExists(ctx context.Context, app string) (bool, error) {
	return AppExistsIn(ctx, s.Pool, app)
}

// AppExistsIn is AppExists on q, a pool or a caller's transaction.
func AppExistsIn(ctx context.Context, q Querier, app string) (bool, error) {
	if !queryableText(app) {
		return false, nil
	}
	var ok bool
	err := q.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM apps WHERE id = $1 AND removed_at IS NULL)`, app).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up app %s: %w", app, err)
	}
	return ok, nil
}

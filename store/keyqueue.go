package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// HeldRow is one event a key still owes: its outcome row is queued or
// failed. The rows of a key, in sequence order, are what the key's
// workflow delivers; its memory is only a cache of them.
type HeldRow struct {
	ID        string
	Seq       int64
	Status    string // queued or failed
	Attempts  int
	Code      string
	LastCode  string
	LastError string
	// QueuedAt starts the hold clock (a redelivery restarts it); UpdatedAt
	// is when the row last changed (a failed row: when it failed).
	QueuedAt  time.Time
	UpdatedAt time.Time
}

// ClaimedEvent is an event a signal says a key owes: an id and a sequence
// number, nothing more, until the outcome rows confirm it.
type ClaimedEvent struct {
	ID  string
	Seq int64
}

// KeyQueue is what KeyQueue read.
type KeyQueue struct {
	// Rows are the key's held rows after the cursor, in sequence order.
	Rows []HeldRow
	// More: the key holds further rows after the last of Rows.
	More bool
	// Unknown are the claimed events that name no outcome row of this
	// subscription and subject key with that sequence number.
	Unknown []ClaimedEvent
	// DeliveredBy holds, for the claimed events already delivered by a
	// local execution, the execution (outcome rows' delivered_by).
	DeliveredBy map[string]string
	// LocalAbove are the rows after the cursor that a local execution of
	// the run KeyQueue was asked about delivered (at most maxLocalAbove,
	// the highest sequence numbers), in sequence order.
	LocalAbove []ClaimedEvent
	// Paused: an operator paused the key and has not resumed it
	// (paused_keys); read only when KeyQueue is asked to.
	Paused bool
}

// maxLocalAbove bounds the rows LocalAbove reads. A run takes them for
// what a workflow task it lost delivered (activities.QueueResult's
// DeliveredHere): the few batches one task's local attempts send.
const maxLocalAbove = 1000

// KeyQueue reads up to limit events that a subscription's subject key owes
// with a sequence number above after, in sequence order, and checks the
// claimed events against the key's outcome rows (whatever their status: a
// settled one is a re-send, not a forgery). A claimed event still owed
// below the cursor is among the rows too. With a run id, it also reads the
// rows above the cursor that a local execution of that run delivered
// (LocalAbove; delivered_by is "<run id>/<head>"). With withPause it also
// reads whether an operator paused the key (Paused), in the same round
// trip.
func (s *Store) KeyQueue(ctx context.Context, subscriptionID, subject string, after int64, limit int, claims []ClaimedEvent, run string, withPause bool) (KeyQueue, error) {
	return s.keyQueue(ctx, subscriptionID, subject, after, limit, claims, run, withPause, nil)
}

// KeyStart is what a key's run reads before it delivers anything: the first
// limit rows the key owes, the rows a local execution of run delivered
// (LocalAbove), whether the key is paused, and its subscription's error
// policy, in one round trip. A subscription that does not exist answers
// ErrNotFound for the policy, beside the rows.
func (s *Store) KeyStart(ctx context.Context, subscriptionID, subject string, limit int, run string) (KeyQueue, Policy, error) {
	var p Policy
	found := false
	q, err := s.keyQueue(ctx, subscriptionID, subject, 0, limit, nil, run, true, func(b *pgx.Batch) {
		b.Queue(policyQuery, subscriptionID).Query(func(rows pgx.Rows) error {
			var maxAttempts *int32
			_, err := pgx.ForEachRow(rows, []any{&p.OnFailure, &maxAttempts}, func() error {
				found = true
				if maxAttempts != nil {
					p.MaxAttempts = int(*maxAttempts)
				}
				return nil
			})
			return err
		})
	})
	switch {
	case err != nil:
		return KeyQueue{}, Policy{}, err
	case !found:
		return q, Policy{}, ErrNotFound
	}
	return q, p, nil
}

// keyQueue is KeyQueue, with more queries of the caller's (more) sent in
// the same round trip.
func (s *Store) keyQueue(ctx context.Context, subscriptionID, subject string, after int64, limit int, claims []ClaimedEvent, run string, withPause bool, more func(*pgx.Batch)) (KeyQueue, error) {
	var out KeyQueue
	var ids []string
	var seqs []int64
	for _, c := range claims {
		if u, err := uuid.Parse(c.ID); err != nil || u.String() != c.ID {
			out.Unknown = append(out.Unknown, c)
			continue
		}
		ids = append(ids, c.ID)
		seqs = append(seqs, c.Seq)
	}
	batch := &pgx.Batch{}
	if limit > 0 {
		batch.Queue(`
			SELECT event_id::text, event_seq, status, attempts, COALESCE(code, ''), COALESCE(last_code, ''),
			       COALESCE(last_error, ''), queued_at, updated_at
			  FROM outcomes
			 WHERE subscription_id = $1 AND subject = $2 AND status IN ('queued', 'failed') AND event_seq > $3
			 ORDER BY event_seq LIMIT $4`, subscriptionID, subject, after, limit+1).Query(func(rows pgx.Rows) error {
			var r HeldRow
			_, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Seq, &r.Status, &r.Attempts, &r.Code, &r.LastCode,
				&r.LastError, &r.QueuedAt, &r.UpdatedAt}, func() error {
				out.Rows = append(out.Rows, r)
				return nil
			})
			return err
		})
	}
	var late []HeldRow
	if len(ids) > 0 {
		// Each claim with its row, if it names one of this key's: a claim
		// the cursor has passed that is still owed is queued too (the
		// relay writes a key's rows in sequence order, so it is rare).
		batch.Queue(`
			SELECT c.id::text, c.seq, COALESCE(o.status, ''), COALESCE(o.attempts, 0), COALESCE(o.code, ''),
			       COALESCE(o.last_code, ''), COALESCE(o.last_error, ''),
			       COALESCE(o.queued_at, 'epoch'), COALESCE(o.updated_at, 'epoch'), COALESCE(o.delivered_by, '')
			  FROM unnest($3::uuid[], $4::bigint[]) WITH ORDINALITY AS c(id, seq, n)
			  LEFT JOIN outcomes o ON o.subscription_id = $1 AND o.event_id = c.id
			                      AND o.subject = $2 AND o.event_seq = c.seq
			 ORDER BY c.n`, subscriptionID, subject, ids, seqs).Query(func(rows pgx.Rows) error {
			var r HeldRow
			var by string
			_, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Seq, &r.Status, &r.Attempts, &r.Code, &r.LastCode,
				&r.LastError, &r.QueuedAt, &r.UpdatedAt, &by}, func() error {
				switch {
				case r.Status == "":
					out.Unknown = append(out.Unknown, ClaimedEvent{ID: r.ID, Seq: r.Seq})
				case r.Seq <= after && (r.Status == EventQueued || r.Status == EventFailed):
					late = append(late, r)
				case r.Status == EventDelivered && by != "":
					if out.DeliveredBy == nil {
						out.DeliveredBy = map[string]string{}
					}
					out.DeliveredBy[r.ID] = by
				}
				return nil
			})
			return err
		})
	}
	if run != "" {
		// Through outcomes_local_delivered, newest first: the key's rows a
		// local execution delivered. Above the cursor of the run (past
		// every row it read) they are normally none, or a lost task's; at
		// 0 (a run that has read nothing yet) they are the key's last
		// ones, of earlier runs too, which the run id tells apart.
		batch.Queue(`
			SELECT event_id::text, event_seq, delivered_by
			  FROM outcomes
			 WHERE subscription_id = $1 AND subject = $2 AND status = 'delivered'
			       AND delivered_by IS NOT NULL AND event_seq > $3
			 ORDER BY event_seq DESC LIMIT $4`, subscriptionID, subject, after, maxLocalAbove).Query(func(rows pgx.Rows) error {
			var c ClaimedEvent
			var by string
			_, err := pgx.ForEachRow(rows, []any{&c.ID, &c.Seq, &by}, func() error {
				if strings.HasPrefix(by, run+"/") {
					out.LocalAbove = append(out.LocalAbove, c)
				}
				return nil
			})
			return err
		})
	}
	if withPause {
		batch.Queue(keyPausedQuery, subscriptionID, subject).QueryRow(func(row pgx.Row) error { return row.Scan(&out.Paused) })
	}
	if more != nil {
		more(batch)
	}
	if batch.Len() == 0 {
		return out, nil
	}
	if err := s.Pool.SendBatch(ctx, batch).Close(); err != nil {
		return KeyQueue{}, fmt.Errorf("read the queue of %s %s: %w", subscriptionID, subject, err)
	}
	if len(out.Rows) > limit {
		out.Rows, out.More = out.Rows[:limit], true
	}
	slices.Reverse(out.LocalAbove)
	if len(late) > 0 {
		out.Rows = append(late, out.Rows...)
		slices.SortFunc(out.Rows, func(a, b HeldRow) int { return cmp.Compare(a.Seq, b.Seq) })
		out.Rows = slices.CompactFunc(out.Rows, func(a, b HeldRow) bool { return a.ID == b.ID })
	}
	return out, nil
}

// RelayRoundBound is how long QuietOwingKeys leaves a key to the relay's
// round that wrote its head row: longer than a burst's rounds take (in the
// burst of docs/performance.md the RelayPartitions rounds held 16,000 rows
// written ahead, handed out at 600-2,000 a minute: up to about 16
// minutes), short enough to bound a stuck one.
const RelayRoundBound = 30 * time.Minute

// OwingKey is a subscription's subject key whose outcome rows say it owes
// events.
type OwingKey struct {
	SubscriptionID string
	App            string
	Type           string
	Subject        string
}

// OwingKeys is one round of QuietOwingKeys.
type OwingKeys struct {
	// Quiet are the keys found quiet.
	Quiet []OwingKey
	// Last is the last key looked at, where the next round goes on; zero
	// when the round reached the end.
	LastSub, LastSubject string
}

// QuietOwingKeys looks at up to scan keys that hold rows (queued or
// failed), in key order after the cursor (afterSub, afterSubject), and
// returns those of subscriptions not removed whose head (the held row with
// the lowest sequence number) has not changed for at least quiet: the keys
// whose workflow may be gone. Keys whose head moved recently are being
// worked on, or were just handed out, and are left alone. Rows written
// behind the head do not count: the relay writes them without a signal
// while the key holds on its head (HeldKeys), so a key whose workflow is
// gone would otherwise never look quiet while its events keep coming. A
// head whose event the relay has not yet dispatched is the relay's while
// no signal of it, or of an earlier event of its type and subject, has
// failed: the relay's round starts or signals the key. A burst's round
// writes every row before its first start and can take minutes to start
// them all; such a key is not quiet however old its row, or every key of
// the burst would be started twice. A failed signal puts the key back in
// the sweep's hands: the relay reads no event behind a dead one of its
// type and subject (Undispatched), and while it backs off another
// subscription's key it signals nothing to a held key of the same event.
// A head the relay's round has not handed out within RelayRoundBound is
// the sweep's too: a partition loop that keeps its lease but makes no
// progress strands no key for longer. It skips from key to key through
// the index of held rows (two probes a key, and two of the head's event),
// so a key with a million queued rows costs what a key with one does.
func (s *Store) QuietOwingKeys(ctx context.Context, afterSub, afterSubject string, quiet time.Duration, scan int) (OwingKeys, error) {
	rows, err := s.Pool.Query(ctx, `
		WITH RECURSIVE k AS (
			(SELECT subscription_id, subject FROM outcomes
			  WHERE status IN ('queued', 'failed') AND (subscription_id, subject) > ($1, $2)
			  ORDER BY subscription_id, subject LIMIT 1)
			UNION ALL
			SELECT n.subscription_id, n.subject FROM k, LATERAL (
				SELECT subscription_id, subject FROM outcomes
				 WHERE status IN ('queued', 'failed') AND (subscription_id, subject) > (k.subscription_id, k.subject)
				 ORDER BY subscription_id, subject LIMIT 1) n
		), scanned AS (
			SELECT * FROM k LIMIT $4
		)
		SELECT sc.subscription_id, sc.subject, COALESCE(s.app, ''), COALESCE(s.type, ''),
		       s.id IS NOT NULL AND (
		           SELECT o.updated_at < now() - make_interval(secs => $3)
		                  AND (o.updated_at < now() - make_interval(secs => $5) OR NOT EXISTS (SELECT 1 FROM events e
		                                   WHERE e.seq = o.event_seq AND e.state = 'accepted'
		                                     AND NOT EXISTS (SELECT 1 FROM events h
		                                                      WHERE h.state = 'accepted' AND h.relay_error IS NOT NULL
		                                                        AND h.type = e.type AND h.subject = e.subject AND h.seq <= e.seq)))
		             FROM outcomes o
		            WHERE o.subscription_id = sc.subscription_id AND o.subject = sc.subject
		              AND o.status IN ('queued', 'failed')
		            ORDER BY o.event_seq LIMIT 1)
		  FROM scanned sc LEFT JOIN subscriptions s ON s.id = sc.subscription_id AND s.state <> 'cancelled'
		 ORDER BY sc.subscription_id, sc.subject`, afterSub, afterSubject, quiet.Seconds(), scan, RelayRoundBound.Seconds())
	if err != nil {
		return OwingKeys{}, fmt.Errorf("list keys that owe events: %w", err)
	}
	var out OwingKeys
	var k OwingKey
	var isQuiet bool
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&k.SubscriptionID, &k.Subject, &k.App, &k.Type, &isQuiet}, func() error {
		n++
		out.LastSub, out.LastSubject = k.SubscriptionID, k.Subject
		if isQuiet {
			out.Quiet = append(out.Quiet, k)
		}
		return nil
	})
	if err != nil {
		return OwingKeys{}, fmt.Errorf("list keys that owe events: %w", err)
	}
	if n < scan {
		out.LastSub, out.LastSubject = "", ""
	}
	return out, nil
}

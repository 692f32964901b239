package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"herald/reason"
)

// Statuses of an event for one subscription (outcome rows): what became of one event for one subscription.
const (
	EventQueued    = "queued"
	EventDelivered = "delivered"
	EventFailed    = "failed"
	EventCancelled = "cancelled"
	EventExpired   = "expired"
	EventFiltered  = "filtered"
)

// Settled reports whether an outcome status is final: the event will not be
// delivered to that subscription again unless an operator asks for it.
func Settled(status string) bool {
	switch status {
	case EventDelivered, EventCancelled, EventExpired, EventFiltered:
		return true
	}
	return false
}

// Dispatch is one event handed to one subscription's key by the relay.
type Dispatch struct {
	SubscriptionID string
	EventID        string
	Seq            int64
	Subject        string
	// Filtered: the subscription's content filter did not match (Code:
	// filter_no_match); the row is written settled as filtered and the
	// event is not handed to the key. A filter that fails delivers.
	Filtered bool
	Code     string
}

// RecordDispatch inserts an outcome row for every pair not seen before
// (queued, or filtered when Filtered) and returns the status of each pair's
// row that existed already: the relay must not hand a settled pair to its
// key again (a re-send after a crash, once the key's workflow has
// completed), and a pair whose row an earlier round wrote keeps that
// round's verdict. Keys of the result are Dispatch{SubscriptionID,
// EventID} with Seq and Subject zero; a pair absent from it has a new row.
func (s *Store) RecordDispatch(ctx context.Context, ds []Dispatch) (map[Dispatch]string, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	subs := make([]string, len(ds))
	ids := make([]string, len(ds))
	seqs := make([]int64, len(ds))
	subjects := make([]string, len(ds))
	statuses := make([]string, len(ds))
	codes := make([]string, len(ds))
	for i, d := range ds {
		subs[i], ids[i], seqs[i], subjects[i] = d.SubscriptionID, d.EventID, d.Seq, d.Subject
		statuses[i], codes[i] = EventQueued, ""
		if d.Filtered {
			statuses[i], codes[i] = EventFiltered, d.Code
		}
	}
	// The outer SELECT reads the snapshot from before the INSERT, so it sees
	// only rows that existed already.
	rows, err := s.Pool.Query(ctx, `
		WITH d AS (
			SELECT * FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::text[], $5::text[], $6::text[])
			    AS d(subscription_id, event_id, event_seq, subject, status, code)
		), ins AS (
			INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status, code)
			SELECT subscription_id, event_id, event_seq, subject, status, NULLIF(code, '') FROM d
			ON CONFLICT (subscription_id, event_id) DO NOTHING
		)
		SELECT o.subscription_id, o.event_id::text, o.status
		  FROM outcomes o JOIN d USING (subscription_id, event_id)`,
		subs, ids, seqs, subjects, statuses, codes)
	if err != nil {
		return nil, fmt.Errorf("record dispatch: %w", err)
	}
	existing := map[Dispatch]string{}
	var sub, id, status string
	_, err = pgx.ForEachRow(rows, []any{&sub, &id, &status}, func() error {
		existing[Dispatch{SubscriptionID: sub, EventID: id}] = status
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record dispatch: %w", err)
	}
	return existing, nil
}

// BatchEvent is one event of a delivery batch as the event log has it, with
// its outcome for the batch's subscription ("" when there is none: the event
// was never handed to that subscription).
type BatchEvent struct {
	ID  string `db:"id"`
	Seq int64  `db:"seq"`
	// SourceApp is the app that published it (ids are unique per source app).
	SourceApp string `db:"source_app"`
	Type      string `db:"type"`
	Version   int    `db:"version"`
	Subject   string `db:"subject"`
	Envelope  []byte `db:"envelope"`
	Outcome   string `db:"outcome"`
	// DeliveredBy names the local execution that delivered it, if one did.
	DeliveredBy string `db:"delivered_by"`
	// TraceContext is the event's stored trace context (nil without one).
	TraceContext TraceContext `db:"trace_context"`
}

// Batch is what one delivery needs: where the subscription's events go and
// the events themselves.
type Batch struct {
	Target Target
	// AppUnreachable: a delivery to the subscriber app found it unreachable
	// and no delivery to it has succeeded since.
	AppUnreachable bool
	// Limits are the subscriber app's delivery limits (zero: none), so that
	// an app without limits costs no extra query.
	Limits Limits
	// SecretID is the id of the subscriber app's current signing secret
	// (AppSecret.ID; 0 when it has none), so that a worker signs with
	// secrets it read before only while they are still the current ones.
	SecretID int64
	// KeyPaused: an operator paused the subject key (its paused_keys row),
	// whatever the key's run remembers; nothing of the key is to be POSTed.
	KeyPaused bool
	// Events by id; ids that name no accepted event are absent.
	Events map[string]BatchEvent
}

// deliveryBatchSQL reads a delivery batch: the subscription's target and
// app, the app's current secret (at most one: app_secrets_current), whether
// the subject key $3 is paused, and its events that match %s, with their
// outcome for it.
const deliveryBatchSQL = `
		SELECT s.id, s.type, s.version, s.state, COALESCE(s.reason, ''), s.app, a.endpoint, a.delivery_path,
		       EXISTS (SELECT 1 FROM unreachable_apps u WHERE u.app = s.app),
		       COALESCE(a.max_per_second, 0), COALESCE(a.max_in_flight, 0),
		       COALESCE((SELECT x.id FROM app_secrets x WHERE x.app = s.app AND x.valid_until IS NULL), 0),
		       EXISTS (SELECT 1 FROM paused_keys p WHERE p.subscription_id = s.id AND p.subject = $3),
		       e.id::text, e.seq, e.type, e.version, e.subject, e.envelope, COALESCE(o.status, ''),
		       e.trace_context, COALESCE(o.delivered_by, ''), e.source_app
		  FROM subscriptions s
		  JOIN apps a ON a.id = s.app
		  LEFT JOIN events e ON %s AND e.state <> 'rejected'
		                    AND e.type = s.type AND e.version = s.version
		  LEFT JOIN outcomes o ON o.subscription_id = s.id AND o.event_id = e.id
		 WHERE s.id = $1`

// With its events as an array, this statement was planned anew on every
// execution: PostgreSQL prices the generic plan of an array parameter for
// 10 elements, dearer than a custom plan for the one a key's batch usually
// has, so the plan cache of the connection (pgx prepares each statement
// once per connection) never settled on it, and planning cost more than
// running (0.7 ms against 0.07). The one-event statement takes a scalar:
// its generic plan is priced as a custom one and kept after five
// executions, until the tables' next ANALYZE has it planned again.
var (
	deliveryBatchOne  = fmt.Sprintf(deliveryBatchSQL, "e.id = $2::uuid")
	deliveryBatchMany = fmt.Sprintf(deliveryBatchSQL, "e.id = ANY($2::uuid[])")
)

// DeliveryBatch reads, in one query, the subscription's target, its app's
// limits and current secret's id, whether an operator paused the subject
// key key, and the events with the given ids (which must be UUIDs) with their
// outcome for it. An unknown subscription is an error wrapping ErrNotFound.
func (s *Store) DeliveryBatch(ctx context.Context, subscriptionID, key string, ids []string) (Batch, error) {
	query, idsArg := deliveryBatchMany, any(ids)
	if len(ids) == 1 {
		query, idsArg = deliveryBatchOne, ids[0]
	}
	rows, err := s.Pool.Query(ctx, query, subscriptionID, idsArg, key)
	if err != nil {
		return Batch{}, fmt.Errorf("read delivery batch of %s: %w", subscriptionID, err)
	}
	defer rows.Close()
	b := Batch{Events: make(map[string]BatchEvent, len(ids))}
	found := false
	for rows.Next() {
		found = true
		var t Target
		var id, typ, subject, outcome, by, source *string
		var seq *int64
		var version *int32
		var env []byte
		var tc TraceContext
		if err := rows.Scan(&t.SubscriptionID, &t.Type, &t.Version, &t.State, &t.Reason, &t.App, &t.Endpoint,
			&t.DeliveryPath, &b.AppUnreachable, &b.Limits.MaxPerSecond, &b.Limits.MaxInFlight, &b.SecretID, &b.KeyPaused, &id, &seq, &typ, &version, &subject, &env, &outcome, &tc, &by, &source); err != nil {
			return Batch{}, fmt.Errorf("read delivery batch of %s: %w", subscriptionID, err)
		}
		b.Target = t
		if id != nil {
			b.Events[*id] = BatchEvent{ID: *id, Seq: *seq, SourceApp: *source, Type: *typ, Version: int(*version),
				Subject: *subject, Envelope: env, Outcome: *outcome, TraceContext: tc, DeliveredBy: *by}
		}
	}
	if err := rows.Err(); err != nil {
		return Batch{}, fmt.Errorf("read delivery batch of %s: %w", subscriptionID, err)
	}
	if !found {
		return Batch{}, fmt.Errorf("subscription %s: %w", subscriptionID, ErrNotFound)
	}
	return b, nil
}

// OutcomeUpdate is a change to one event's outcome for a subscription.
type OutcomeUpdate struct {
	EventID string `json:"eventId"`
	Seq     int64  `json:"seq"`
	Status  string `json:"status"`
	// Attempts is the attempts spent so far (kept when zero).
	Attempts int `json:"attempts,omitempty"`
	// Code is the outcome's code (empty clears it).
	Code string `json:"code,omitempty"`
	// LastCode and LastError describe the last failed attempt (kept when empty).
	LastCode  string `json:"lastCode,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// DeliveredBy names the local execution that delivered it (a delivered
	// outcome only; see activities.DeliverInput.Local).
	DeliveredBy string `json:"deliveredBy,omitempty"`
	// Restart: an operator's redelivery of a queued status; the row starts
	// again with no attempts spent and a new hold clock.
	Restart bool `json:"restart,omitempty"`
}

// RecordOutcomes writes the outcomes of one subscription's key in one
// statement, creating rows that do not exist (an event redelivered after
// retention removed its row). Only accepted events of the subscription's
// type and version and of this subject key are written, whatever a caller
// claims, a delivered outcome is never turned into a cancelled or expired
// one, and an attempt's failure never turns a settled row back into a held
// one (outcomeWriteSQL).
//
// A delivered outcome for a key that had failed (failed_keys) also records
// the key's recovery: a delivery.recovered audit row and a
// herald.key.recovered event, in a transaction of their own.
func (s *Store) RecordOutcomes(ctx context.Context, subscriptionID, subject string, us []OutcomeUpdate) error {
	wasFailed, err := recordOutcomes(ctx, s.Pool, subscriptionID, subject, us)
	if err != nil || !wasFailed {
		return err
	}
	return s.WithTx(ctx, func(tx pgx.Tx) error {
		return recoverKey(ctx, tx, subscriptionID, subject)
	})
}

// RecordWithAudit writes outcome rows (as RecordOutcomes) and audit rows in
// one transaction, so outcomes are never left without theirs. An audit entry
// whose OnceKey already names the same row (a retry after a commit whose
// answer was lost) is dropped, and so is the key event it would derive; a
// different row under the key fails the call.
func (s *Store) RecordWithAudit(ctx context.Context, subscriptionID, subject string, us []OutcomeUpdate, audit []AuditEntry) error {
	return s.WithTx(ctx, func(tx pgx.Tx) error {
		wasFailed, err := recordOutcomes(ctx, tx, subscriptionID, subject, us)
		if err != nil {
			return err
		}
		if wasFailed {
			if err := recoverKey(ctx, tx, subscriptionID, subject); err != nil {
				return err
			}
		}
		unfailed, err := unfailedHeads(ctx, tx, subscriptionID, subject, us, audit)
		if err != nil {
			return err
		}
		for _, e := range audit {
			if e.Action == ActionDeliveryFailed && unfailed[readDeliveryFacts(e.Metadata).EventID] {
				// The row refused the failure (outcomeWriteSQL): the event
				// was settled meanwhile, by the key's new run or an
				// operator, so the key is not held on it. No
				// delivery.failed row, no herald.key.failed event: the run
				// finds the row settled when it checks its failed head.
				continue
			}
			written, err := appendAudit(ctx, tx, e)
			if err != nil {
				return err
			}
			if !written {
				continue
			}
			if err := keyTransition(ctx, tx, subscriptionID, subject, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// unfailedHeads returns the events of the key's delivery.failed audit
// entries whose failed outcome update in us did not land: their row,
// read after the write in the same transaction, is not failed. Asked
// only when audit holds such an entry (a head failing for good is rare),
// so the common write costs no query more.
func unfailedHeads(ctx context.Context, tx pgx.Tx, subscriptionID, subject string, us []OutcomeUpdate, audit []AuditEntry) (map[string]bool, error) {
	failing := map[string]bool{}
	for _, u := range us {
		if u.Status == EventFailed && IsUUID(u.EventID) {
			failing[u.EventID] = true
		}
	}
	var ids []string
	for _, e := range audit {
		if id := readDeliveryFacts(e.Metadata).EventID; e.Action == ActionDeliveryFailed &&
			e.TargetID == DeliveryWorkflowID(subscriptionID, subject) && failing[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
		SELECT u.id::text FROM unnest($2::uuid[]) AS u(id)
		 WHERE NOT EXISTS (SELECT 1 FROM outcomes o
		                    WHERE o.subscription_id = $1 AND o.event_id = u.id AND o.status = 'failed')`,
		subscriptionID, ids)
	if err != nil {
		return nil, fmt.Errorf("read the failed heads of %s: %w", subscriptionID, err)
	}
	refused, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the failed heads of %s: %w", subscriptionID, err)
	}
	unfailed := make(map[string]bool, len(refused))
	for _, id := range refused {
		unfailed[id] = true
	}
	return unfailed, nil
}

// outcomeWriteSQL writes outcome rows from the updates in %s, each
// row (event_id, status, attempts, code, last_code, last_error,
// delivered_by), for the key's events (subject $2, not rejected) of the
// subscription's ($1) type and version only.
//
// An attempt's failure (queued or failed, with attempts) changes only a row
// still queued or failed: a run left posting by a terminate or a reset
// reports its failure after the key's new run may have settled the event
// (an operator's cancel, an expiry), and turning that row back into a held
// one would deliver the event again after later ones, or hold the key on
// an event the operator cancelled. A delivery is recorded whatever the row
// says: it happened.
//
// Each update looks its event up on its own, in a subquery that OFFSET 0
// keeps apart, by id (events_app_id) once the log is more than a few
// pages: as a join, PostgreSQL read the whole log for a few updates
// whenever its statistics had the log small (a new database, or a burst
// that autovacuum had not analysed yet; at 1,000 events a write of 7
// updates took 1.5 ms, 0.8 ms by id).
const outcomeWriteSQL = `
		INSERT INTO outcomes AS o (subscription_id, subject, event_id, event_seq, status, attempts,
		                           code, last_code, last_error, delivered_at, delivered_by)
		SELECT s.id, e.subject, e.id, e.seq, u.status, u.attempts, NULLIF(u.code, ''),
		       NULLIF(u.last_code, ''), NULLIF(u.last_error, ''),
		       CASE WHEN u.status = 'delivered' THEN now() END,
		       CASE WHEN u.status = 'delivered' THEN NULLIF(u.delivered_by, '') END
		  FROM %s
		       AS u(event_id, status, attempts, code, last_code, last_error, delivered_by)
		  JOIN subscriptions s ON s.id = $1
		 CROSS JOIN LATERAL (
		       SELECT e.id, e.seq, e.subject FROM events e
		        WHERE e.id = u.event_id AND e.state <> 'rejected' AND e.subject = $2
		          AND e.type = s.type AND e.version = s.version
		       OFFSET 0) e
		ON CONFLICT (subscription_id, event_id) DO UPDATE SET
		    status       = EXCLUDED.status,
		    attempts     = CASE WHEN EXCLUDED.attempts > 0 THEN EXCLUDED.attempts ELSE o.attempts END,
		    code         = EXCLUDED.code,
		    last_code    = COALESCE(EXCLUDED.last_code, o.last_code),
		    last_error   = COALESCE(EXCLUDED.last_error, o.last_error),
		    delivered_at = COALESCE(EXCLUDED.delivered_at, o.delivered_at),
		    delivered_by = CASE WHEN EXCLUDED.status = 'delivered' THEN EXCLUDED.delivered_by ELSE o.delivered_by END,
		    updated_at   = now()
		WHERE NOT (o.status = 'delivered' AND EXCLUDED.status IN ('cancelled', 'expired'))
		  AND NOT (EXCLUDED.status IN ('queued', 'failed') AND EXCLUDED.attempts > 0
		           AND o.status NOT IN ('queued', 'failed'))`

// One update, the commonest write, takes scalars rather than arrays, so
// that PostgreSQL keeps its generic plan (see deliveryBatchOne).
var (
	outcomeWriteOne = fmt.Sprintf(outcomeWriteSQL,
		"(VALUES ($3::uuid, $4::text, $5::int, $6::text, $7::text, $8::text, $9::text))")
	outcomeWriteMany = fmt.Sprintf(outcomeWriteSQL,
		"unnest($3::uuid[], $4::text[], $5::int[], $6::text[], $7::text[], $8::text[], $9::text[])")
)

// recordOutcomes writes the outcome rows; when one of them is a delivery,
// wasFailed reports whether the key is in failed_keys (it failed and has not
// delivered since), checked in the same statement.
func recordOutcomes(ctx context.Context, q Querier, subscriptionID, subject string, us []OutcomeUpdate) (wasFailed bool, err error) {
	us = slices.DeleteFunc(slices.Clone(us), func(u OutcomeUpdate) bool { return !IsUUID(u.EventID) })
	if len(us) == 0 {
		return false, nil
	}
	anyDelivered := slices.ContainsFunc(us, func(u OutcomeUpdate) bool { return u.Status == EventDelivered })
	n := len(us)
	ids, statuses, codes, lastCodes, lastErrors := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	deliveredBy := make([]string, n)
	attempts := make([]int32, n)
	var restart []string
	for i, u := range us {
		ids[i], statuses[i], attempts[i], deliveredBy[i] = u.EventID, u.Status, int32(u.Attempts), u.DeliveredBy
		if u.Restart && u.Status == EventQueued {
			restart = append(restart, u.EventID)
		}
		codes[i], lastCodes[i], lastErrors[i] = u.Code, storableText(u.LastCode, maxRejectedFieldBytes), storableText(u.LastError, 4*maxReasonRunes)
	}
	query := outcomeWriteMany
	args := []any{subscriptionID, subject, ids, statuses, attempts, codes, lastCodes, lastErrors, deliveredBy}
	if n == 1 {
		query = outcomeWriteOne
		args = []any{subscriptionID, subject, ids[0], statuses[0], attempts[0], codes[0], lastCodes[0], lastErrors[0], deliveredBy[0]}
	}
	if anyDelivered {
		// One round trip still: the insert runs as a CTE, and the probe of
		// failed_keys (nearly always empty for the key) rides along.
		err = q.QueryRow(ctx, `WITH written AS (`+query+`)
			SELECT EXISTS (SELECT 1 FROM failed_keys WHERE subscription_id = $1 AND subject = $2)`,
			args...).Scan(&wasFailed)
	} else {
		_, err = q.Exec(ctx, query, args...)
	}
	if err != nil {
		return false, fmt.Errorf("record outcomes of %s: %w", subscriptionID, err)
	}
	if len(restart) > 0 {
		// An operator's redelivery of the head: no attempts spent, and the
		// hold clock starts again (rare, so a statement of its own).
		if _, err := q.Exec(ctx, `
			UPDATE outcomes SET attempts = 0, code = NULL, queued_at = now(), updated_at = now()
			 WHERE subscription_id = $1 AND subject = $2 AND event_id = ANY($3::uuid[]) AND status = 'queued'`,
			subscriptionID, subject, restart); err != nil {
			return false, fmt.Errorf("restart outcomes of %s: %w", subscriptionID, err)
		}
	}
	return wasFailed, nil
}

// RequeuedEvent is an event put back in a key's queue.
type RequeuedEvent struct {
	ID  string
	Seq int64
}

// Requeue checks that the events with the given ids belong to the
// subscription's type and version and to the subject key and are settled
// (delivered, cancelled, expired, or older than the subscription's outcome
// rows), and sets their outcome back to queued with no attempts spent. It
// returns them in sequence order, and the ids it refused with why:
// "event_not_found" (not a UUID, not in the log, or removed by retention),
// "event_not_for_key", "not_dispatched_yet" (the relay has yet to hand it
// out: requeued now, it would overtake older events), "already_queued" or
// "filtered" (the subscription's filter excluded it): the reason package's
// codes, which the query below spells out. Against retention's purge
// (PurgeEvents) the first to lock the event wins: an event requeued is
// kept, an event purged first is event_not_found.
func (s *Store) Requeue(ctx context.Context, subscriptionID, subject string, ids []string) ([]RequeuedEvent, map[string]string, error) {
	return requeue(ctx, s.Pool, subscriptionID, subject, ids)
}

// requeue is Requeue in q.
func requeue(ctx context.Context, q Querier, subscriptionID, subject string, ids []string) ([]RequeuedEvent, map[string]string, error) {
	refused := map[string]string{}
	var valid []string
	for _, id := range ids {
		if !IsUUID(id) {
			refused[id] = string(reason.EventNotFound)
			continue
		}
		valid = append(valid, id)
	}
	if len(valid) == 0 {
		return nil, refused, nil
	}
	rows, err := q.Query(ctx, `
		WITH sub AS (
			SELECT type, version FROM subscriptions WHERE id = $1
		), named AS (
			-- Locked until the requeue commits, so that retention cannot
			-- delete an event while this statement queues it (see
			-- purgeEvents); an event it deleted first is not read.
			SELECT e.id, e.seq, e.type, e.version, e.subject, e.state
			  FROM events e
			 WHERE e.id = ANY($3::uuid[]) AND e.state <> 'rejected'
			   FOR KEY SHARE
		), ev AS (
			-- Ids are unique per source app: of several events with one
			-- id, the one of the subscription's type and version.
			SELECT DISTINCT ON (e.id) e.id, e.seq,
			       CASE WHEN NOT (e.type = sub.type AND e.version = sub.version AND e.subject = $2) THEN 'event_not_for_key'
			            WHEN e.state = 'accepted' THEN 'not_dispatched_yet'
			            WHEN o.status IN ('queued', 'failed') THEN 'already_queued'
			            WHEN o.status = 'filtered' THEN 'filtered'
			            ELSE '' END AS why
			  FROM named e CROSS JOIN sub
			  LEFT JOIN outcomes o ON o.subscription_id = $1 AND o.event_id = e.id
			 ORDER BY e.id, (e.type = sub.type AND e.version = sub.version) DESC
		), up AS (
			INSERT INTO outcomes AS o (subscription_id, event_id, event_seq, subject, status)
			SELECT $1, id, seq, $2, 'queued' FROM ev WHERE why = ''
			ON CONFLICT (subscription_id, event_id) DO UPDATE SET
			    status = 'queued', attempts = 0, code = NULL, queued_at = now(), updated_at = now()
		)
		SELECT id::text, seq, why FROM ev ORDER BY seq`, subscriptionID, subject, valid)
	if err != nil {
		return nil, nil, fmt.Errorf("requeue events of %s: %w", subscriptionID, err)
	}
	var out []RequeuedEvent
	seen := map[string]bool{}
	var id, why string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&id, &seq, &why}, func() error {
		seen[id] = true
		if why == "" {
			out = append(out, RequeuedEvent{ID: id, Seq: seq})
		} else {
			refused[id] = why
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("requeue events of %s: %w", subscriptionID, err)
	}
	for _, id := range valid {
		if !seen[id] {
			refused[id] = string(reason.EventNotFound)
		}
	}
	return out, refused, nil
}

// IsUUID reports whether id is a UUID in canonical form, as the event log
// stores ids; anything else names no event.
func IsUUID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

// KeyEvents are the events of one subject key, in sequence order.
type KeyEvents struct {
	Subject string
	Events  []RequeuedEvent
}

// windowEvents is the FROM and WHERE of the events of a replay window:
// $1 the subscription, [$2, $3) the window, $4 a subject key or ”, $5
// HeraldApp.
const windowEvents = `
		  FROM events e JOIN subscriptions s ON s.type = e.type AND s.version = e.version
		 WHERE s.id = $1 AND e.state <> 'rejected'
		   AND e.received_at >= $2 AND e.received_at < $3
		   AND ($4 = '' OR e.subject = $4)
		   AND CASE WHEN e.source_app = $5
		            THEN convert_from(e.envelope, 'UTF8')::jsonb->'data'->>'subscriberApp' IS NOT DISTINCT FROM s.app
		            ELSE true END`

// CountWindowEvents counts the events WindowEvents would list, up to
// atMost: it stops reading there, so a caller that refuses windows of
// more events does not read a whole window of millions to refuse it.
func (s *Store) CountWindowEvents(ctx context.Context, subscriptionID, subject string, since, until time.Time, atMost int) (int, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 `+windowEvents+` LIMIT $6) w`,
		subscriptionID, since, until, subject, HeraldApp, atMost).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count events of %s: %w", subscriptionID, err)
	}
	return n, nil
}

// WindowEvents lists, per subject key in key order, every accepted event of
// the subscription's type and version received in [since, until), in
// sequence order; subject limits it to one key when not empty. An
// operational event (herald.*) is listed only for subscriptions of the app
// it is about, as the relay dispatches it. An unknown subscription is an
// error wrapping ErrNotFound.
func (s *Store) WindowEvents(ctx context.Context, subscriptionID, subject string, since, until time.Time) ([]KeyEvents, error) {
	if _, err := getSubscription(ctx, s.Pool, subscriptionID, false); err != nil {
		return nil, err
	}
	rows, err := s.Pool.Query(ctx, `SELECT e.subject, e.id::text, e.seq `+windowEvents+`
		 ORDER BY e.subject, e.seq`, subscriptionID, since, until, subject, HeraldApp)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", subscriptionID, err)
	}
	var out []KeyEvents
	var subj, id string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&subj, &id, &seq}, func() error {
		if len(out) == 0 || out[len(out)-1].Subject != subj {
			out = append(out, KeyEvents{Subject: subj})
		}
		k := &out[len(out)-1]
		k.Events = append(k.Events, RequeuedEvent{ID: id, Seq: seq})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", subscriptionID, err)
	}
	return out, nil
}

// HeldKey is a subscription's subject key that still holds events.
type HeldKey struct {
	SubscriptionID string
	Subject        string
	Held           int
}

// RemovedKeys lists up to limit keys that still hold queued or failed events
// of a cancelled subscription.
func (s *Store) RemovedKeys(ctx context.Context, limit int) ([]HeldKey, error) {
	// From the cancelled subscriptions (few), through the index of held
	// rows: a sweep costs nothing when nothing was removed. Subscriptions are
	// never deleted, only cancelled.
	rows, err := s.Pool.Query(ctx, `
		SELECT o.subscription_id, o.subject, count(*)::int
		  FROM subscriptions s JOIN outcomes o ON o.subscription_id = s.id
		 WHERE s.state = 'cancelled' AND o.status IN ('queued', 'failed')
		 GROUP BY o.subscription_id, o.subject
		 ORDER BY o.subscription_id, o.subject
		 LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list keys of removed subscriptions: %w", err)
	}
	var out []HeldKey
	var k HeldKey
	_, err = pgx.ForEachRow(rows, []any{&k.SubscriptionID, &k.Subject, &k.Held}, func() error {
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list keys of removed subscriptions: %w", err)
	}
	return out, nil
}

// CancelHeld settles every queued or failed event of one key of a removed
// subscription as cancelled with code, and appends the audit row, in one
// transaction; it is how a key whose workflow no longer runs is cleaned up.
// It returns how many events it cancelled and writes no audit row when
// there were none. It cancels nothing unless the subscription is still
// removed (its row locked meanwhile): the sweep that listed the key may
// have been overtaken by the app applying the subscription again, and
// then by new events of the key, which are owed.
func (s *Store) CancelHeld(ctx context.Context, subscriptionID, subject, code string, audit AuditEntry) (int, error) {
	var n int
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM subscriptions WHERE id = $1 FOR SHARE`, subscriptionID).Scan(&state)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err == nil && state != StateCancelled {
			return nil
		}
		tag, err := tx.Exec(ctx, `
			UPDATE outcomes SET status = 'cancelled', code = $3, updated_at = now()
			 WHERE subscription_id = $1 AND subject = $2 AND status IN ('queued', 'failed')`,
			subscriptionID, subject, code)
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		if n == 0 {
			return nil
		}
		if audit.Metadata == nil {
			audit.Metadata = map[string]any{}
		}
		audit.Metadata["count"] = n
		if err := AppendAudit(ctx, tx, audit); err != nil {
			return err
		}
		// A removed subscription's key forgets its failure (no recovery).
		return keyTransition(ctx, tx, subscriptionID, subject, audit)
	})
	if err != nil {
		return 0, fmt.Errorf("cancel held events of %s %s: %w", subscriptionID, subject, err)
	}
	return n, nil
}

// EventOutcome is one subscription's outcome for an event.
type EventOutcome struct {
	SubscriptionID string     `db:"subscription_id" json:"subscription"`
	Subject        string     `db:"subject" json:"subject"`
	Status         string     `db:"status" json:"status"`
	Attempts       int        `db:"attempts" json:"attempts"`
	Code           string     `db:"code" json:"code,omitempty"`
	LastCode       string     `db:"last_code" json:"lastCode,omitempty"`
	LastError      string     `db:"last_error" json:"lastError,omitempty"`
	QueuedAt       time.Time  `db:"queued_at" json:"queuedAt"`
	UpdatedAt      time.Time  `db:"updated_at" json:"updatedAt"`
	DeliveredAt    *time.Time `db:"delivered_at" json:"deliveredAt,omitempty"`
}

// EventOutcomes lists an event's outcome for every subscription it was
// handed to, by subscription id. Ids are unique per source app only: when
// events of several apps have the id it fails with an error wrapping
// ErrAmbiguousEvent rather than mix their outcomes; ask EventOutcomesOf.
func (s *Store) EventOutcomes(ctx context.Context, eventID string) ([]EventOutcome, error) {
	u, err := uuid.Parse(eventID)
	if err != nil {
		return nil, fmt.Errorf("event %q: %w", eventID, ErrNotFound)
	}
	var apps []string
	if err := s.Pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(DISTINCT source_app ORDER BY source_app), '{}')
		  FROM events WHERE id = $1 AND state <> 'rejected'`, u.String()).Scan(&apps); err != nil {
		return nil, fmt.Errorf("outcomes of event %s: %w", eventID, err)
	}
	if len(apps) > 1 {
		return nil, fmt.Errorf("event id %s names events of apps %s: %w", eventID, strings.Join(apps, ", "), ErrAmbiguousEvent)
	}
	return s.EventOutcomesOf(ctx, eventID, "", 0)
}

// EventOutcomesOf is EventOutcomes for the event of type eventType and
// version (eventType "" for any): only subscriptions to that type count, so
// another app's event of the same id does not mix in.
func (s *Store) EventOutcomesOf(ctx context.Context, eventID, eventType string, version int) ([]EventOutcome, error) {
	u, err := uuid.Parse(eventID)
	if err != nil || !queryableText(eventType) {
		return nil, fmt.Errorf("event %q: %w", eventID, ErrNotFound)
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT o.subscription_id, o.subject, o.status, o.attempts, COALESCE(o.code, '') AS code,
		       COALESCE(o.last_code, '') AS last_code, COALESCE(o.last_error, '') AS last_error,
		       o.queued_at, o.updated_at, o.delivered_at
		  FROM outcomes o
		 WHERE o.event_id = $1
		   AND ($2 = '' OR EXISTS (SELECT 1 FROM subscriptions s
		                            WHERE s.id = o.subscription_id AND s.type = $2 AND s.version = $3))
		 ORDER BY o.subscription_id`, u.String(), eventType, version)
	if err != nil {
		return nil, fmt.Errorf("outcomes of event %s: %w", eventID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[EventOutcome])
	if err != nil {
		return nil, fmt.Errorf("outcomes of event %s: %w", eventID, err)
	}
	return out, nil
}

// MarkUnreachable records that a delivery found the app unreachable.
func (s *Store) MarkUnreachable(ctx context.Context, app string) error {
	if _, err := s.Pool.Exec(ctx, `INSERT INTO unreachable_apps (app) VALUES ($1) ON CONFLICT DO NOTHING`, app); err != nil {
		return fmt.Errorf("mark %s unreachable: %w", app, err)
	}
	return nil
}

// ClearUnreachable removes the app's unreachable mark and reports whether
// this call removed it: of several deliveries that succeed at once, one
// wakes the app's other keys.
func (s *Store) ClearUnreachable(ctx context.Context, app string) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM unreachable_apps WHERE app = $1`, app)
	if err != nil {
		return false, fmt.Errorf("clear %s unreachable: %w", app, err)
	}
	return tag.RowsAffected() > 0, nil
}

// QueuedEvent is an event queued for a key, as its backlog holds it.
type QueuedEvent struct {
	ID       string
	Seq      int64
	QueuedAt time.Time
}

// QueuedAfter returns up to limit events queued for the subscription's key
// with a sequence number above after, in sequence order: the part of a long
// queue that the key's workflow does not hold in memory.
func (s *Store) QueuedAfter(ctx context.Context, subscriptionID, subject string, after int64, limit int) ([]QueuedEvent, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT event_id::text, event_seq, queued_at FROM outcomes
		 WHERE subscription_id = $1 AND subject = $2 AND status = 'queued' AND event_seq > $3
		 ORDER BY event_seq LIMIT $4`, subscriptionID, subject, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read the backlog of %s %s: %w", subscriptionID, subject, err)
	}
	var out []QueuedEvent
	var e QueuedEvent
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.Seq, &e.QueuedAt}, func() error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the backlog of %s %s: %w", subscriptionID, subject, err)
	}
	return out, nil
}

// CancelQueuedAfter settles as status (cancelled or expired) with code every
// event queued for the key above after (its backlog) and returns how many.
func (s *Store) CancelQueuedAfter(ctx context.Context, subscriptionID, subject string, after int64, status, code string) (int, error) {
	tag, err := s.Pool.Exec(ctx, `
		UPDATE outcomes SET status = $4, code = NULLIF($5, ''), updated_at = now()
		 WHERE subscription_id = $1 AND subject = $2 AND status = 'queued' AND event_seq > $3`,
		subscriptionID, subject, after, status, code)
	if err != nil {
		return 0, fmt.Errorf("cancel the backlog of %s %s: %w", subscriptionID, subject, err)
	}
	return int(tag.RowsAffected()), nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// CodeRelayFailed is the code of an event the relay gave up on after
// HERALD_RELAY_MAX_ATTEMPTS failed signals (docs/design.md#the-event-log-and-the-relay).
const CodeRelayFailed = "relay_failed"

// MaxRelayBackoff caps the wait after a failed signal.
const MaxRelayBackoff = 5 * time.Minute

// maxRelayError is the most of a signal's error kept on the event, in bytes.
const maxRelayError = 1000

// ErrNotDead is returned by RetryRelay for an event the relay has not given
// up on.
var ErrNotDead = errors.New("not dead")

// RelayFailure is an event whose signal Temporal did not accept this round.
type RelayFailure struct {
	Seq   int64
	Error string
	// Counted makes the failure a failed relay attempt; the relay does not
	// count an outage of Temporal.
	Counted bool
}

// RelayFailed is an event as RecordRelayFailures left it.
type RelayFailed struct {
	Seq      int64  `db:"seq"`
	ID       string `db:"id"`
	Type     string `db:"type"`
	Subject  string `db:"subject"`
	Attempts int    `db:"relay_attempts"`
	Error    string `db:"relay_error"`
	// Dead is true when this failure was its last (code relay_failed).
	Dead bool `db:"dead"`
}

// RecordRelayFailures keeps each event's error and makes it wait. A
// counted failure is one more failed relay attempt: after n of them
// the event waits min(2^n s, 5 min) (2 s, 4 s, 8 s, ... 256 s, then 300 s),
// and at maxAttempts it is dead instead (code relay_failed) and waits for
// an operator. After one not counted (an outage of Temporal), the attempts
// stay as they are and the event waits as long as after its last counted
// one (2 s when none). Events dispatched or already
// dead meanwhile are left alone. It returns the events it changed.
func (s *Store) RecordRelayFailures(ctx context.Context, failures []RelayFailure, maxAttempts int) ([]RelayFailed, error) {
	if len(failures) == 0 {
		return nil, nil
	}
	seqs := make([]int64, len(failures))
	errs := make([]string, len(failures))
	counted := make([]bool, len(failures))
	for i, f := range failures {
		seqs[i], errs[i], counted[i] = f.Seq, storableText(f.Error, maxRelayError), f.Counted
	}
	rows, err := s.Pool.Query(ctx, `
		WITH f AS (
			SELECT f.seq, f.err, e.relay_attempts + CASE WHEN f.counted THEN 1 ELSE 0 END AS attempts
			FROM unnest($1::bigint[], $2::text[], $5::boolean[]) AS f(seq, err, counted)
			JOIN events e ON e.seq = f.seq)
		UPDATE events e SET
			relay_attempts = f.attempts,
			relay_error = f.err,
			relay_next_try = CASE WHEN f.attempts < $3
				THEN now() + least(power(2, greatest(f.attempts, 1)), $4) * interval '1 second' END,
			relay_dead_at = CASE WHEN f.attempts >= $3 THEN now() END
		FROM f
		WHERE e.seq = f.seq AND e.state = 'accepted' AND e.relay_dead_at IS NULL
		RETURNING e.seq, e.id::text AS id, e.type, e.subject, e.relay_attempts, e.relay_error,
		          e.relay_dead_at IS NOT NULL AS dead`,
		seqs, errs, maxAttempts, MaxRelayBackoff.Seconds(), counted)
	if err != nil {
		return nil, fmt.Errorf("record failed relay signals: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[RelayFailed])
	if err != nil {
		return nil, fmt.Errorf("record failed relay signals: %w", err)
	}
	return out, nil
}

// RelayRetry is what RetryRelay released.
type RelayRetry struct {
	EventID  string `json:"eventId"`
	Type     string `json:"type"`
	Subject  string `json:"subject"`
	Attempts int    `json:"attempts"`
	Error    string `json:"lastError"`
	// Released counts the dead events released: the named one and the
	// later dead events of its type and subject, which died behind it.
	Released int64 `json:"released"`
	// HeldBy is the earliest dead event of the same type and subject
	// before the named one, which still holds the key ("" when none).
	HeldBy string `json:"heldBy,omitempty"`
}

// RetryRelay gives a dead event back to the relay with fresh attempts,
// together with the later dead events of its type and subject, and audits
// it. It returns ErrNotFound for an id not in the log and ErrNotDead for an
// event that is not dead.
func (s *Store) RetryRelay(ctx context.Context, id, actor, reason string) (RelayRetry, error) {
	return s.RetryAppRelay(ctx, "", id, actor, reason)
}

// RetryAppRelay is RetryRelay for the event of source app app (empty: any;
// ids are unique per source app, and an id naming events of several apps
// then fails with an error wrapping ErrAmbiguousEvent).
func (s *Store) RetryAppRelay(ctx context.Context, app, id, actor, reason string) (RelayRetry, error) {
	if _, err := s.GetAppEvent(ctx, app, id); err != nil {
		return RelayRetry{}, err
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return RelayRetry{}, fmt.Errorf("event %q: %w", id, ErrNotFound)
	}
	var out RelayRetry
	err = s.WithTx(ctx, func(tx pgx.Tx) error {
		var seq int64
		var dead bool
		err := tx.QueryRow(ctx, `
			SELECT seq, id::text, type, subject, relay_attempts, coalesce(relay_error, ''),
			       state = 'accepted' AND relay_dead_at IS NOT NULL
			FROM events WHERE id = $1 AND state <> 'rejected' AND ($2 = '' OR source_app = $2) FOR UPDATE`, u.String(), app).
			Scan(&seq, &out.EventID, &out.Type, &out.Subject, &out.Attempts, &out.Error, &dead)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return err
		case !dead:
			return ErrNotDead
		}
		tag, err := tx.Exec(ctx, `
			UPDATE events SET relay_attempts = 0, relay_error = NULL, relay_next_try = NULL, relay_dead_at = NULL
			WHERE state = 'accepted' AND relay_dead_at IS NOT NULL AND type = $1 AND subject = $2 AND seq >= $3`,
			out.Type, out.Subject, seq)
		if err != nil {
			return err
		}
		out.Released = tag.RowsAffected()
		err = tx.QueryRow(ctx, `
			SELECT coalesce((SELECT id::text FROM events
				WHERE state = 'accepted' AND relay_dead_at IS NOT NULL AND type = $1 AND subject = $2 AND seq < $3
				ORDER BY seq LIMIT 1), '')`, out.Type, out.Subject, seq).Scan(&out.HeldBy)
		if err != nil {
			return err
		}
		meta := map[string]any{"seq": seq, "type": out.Type, "subject": out.Subject,
			"attempts": out.Attempts, "lastError": out.Error, "released": out.Released}
		if reason != "" {
			meta["reason"] = reason
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionEventRelayRetried, Actor: actor,
			TargetType: TargetEvent, TargetID: out.EventID, ErrorCode: CodeRelayFailed, Metadata: meta})
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotDead) {
		return RelayRetry{}, fmt.Errorf("event %s: %w", id, err)
	}
	if err != nil {
		return RelayRetry{}, fmt.Errorf("retry relay of event %s: %w", id, err)
	}
	return out, nil
}

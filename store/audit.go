package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/workflows/payload"
)

// Audit actions (docs/design.md#audit).
const (
	ActionAppApplied          = "app.applied"
	ActionAppRemoved          = "app.removed"
	ActionDeclarationRetired  = "declaration.retired"
	ActionDeclarationRestored = "declaration.restored"
	// ActionDeclarationBreakingChange records a dataSchema change applied
	// with --allow-breaking: the changes and the reason.
	ActionDeclarationBreakingChange = "declaration.breaking_change"
	ActionSubscriptionFirstSeen     = "subscription.first_seen"
	ActionSubscriptionStateChanged  = "subscription.state_changed"
	ActionDeliveryFailed            = payload.AuditDeliveryFailed
	ActionDeliveryRedelivered       = payload.AuditDeliveryRedelivered
	ActionDeliveryCancelled         = payload.AuditDeliveryCancelled
	ActionDeliveryRearmed           = payload.AuditDeliveryRearmed
	ActionDeliveryPaused            = payload.AuditDeliveryPaused
	ActionDeliveryResumed           = payload.AuditDeliveryResumed
	// ActionDeliverySignalRejected records a relay signal naming events a
	// key does not owe (workflows.AuditSignalRejected writes it).
	ActionDeliverySignalRejected = payload.AuditSignalRejected
	// ActionRetentionPurged records one retention run: what it deleted
	// and the cutoff it applied (one row per run, even when it deleted
	// nothing).
	ActionRetentionPurged = "retention.purged"
	// ActionSubscriptionFilterError records a subscription's content filter
	// failing on events (which were delivered): the count by reason since
	// the previous such row, the first error; at most one row a minute.
	ActionSubscriptionFilterError = "subscription.filter_error"
	// ActionEventRelayRetried records an operator's retry-relay of an event
	// the relay gave up on.
	ActionEventRelayRetried = "event.relay_retried"
)

// Audit target types.
const (
	// TargetApp: the target id is an app id.
	TargetApp = "app"
	// TargetDeclaration: the target id is "<event-type>@<version>".
	TargetDeclaration = "declaration"
	// TargetSubscription: the target id is a subscription id.
	TargetSubscription = "subscription"
	// TargetDelivery: the target id is a delivery workflow id.
	TargetDelivery = "delivery"
	// TargetRetention: the target id is the id of a Retention workflow.
	TargetRetention = "retention"
	// TargetEvent: the target id is an event id.
	TargetEvent = "event"
	// TargetDatabase: the target id is the schema Herald's tables are in.
	TargetDatabase = "database"
)

// Audit outcomes.
const (
	OutcomeAllowed = "allowed"
	OutcomeFailed  = "failed"
)

// ActorSystem is the actor of changes Herald makes on its own.
const ActorSystem = "system"

// Limits of ListAudit.
const (
	DefaultAuditLimit = 50
	MaxAuditLimit     = 1000
)

// AuditEntry is one row to append to the audit trail.
type AuditEntry struct {
	Action string
	// Outcome is OutcomeAllowed (the default when empty) or OutcomeFailed.
	Outcome string
	// Actor is ActorSystem (the default when empty) or an operator's name.
	Actor      string
	TargetType string
	TargetID   string
	// ErrorCode is stored as NULL when empty.
	ErrorCode string
	// Metadata is stored as a JSON object; nil stores {}.
	Metadata map[string]any
	// OnceKey, when set, makes the row written at most once: an entry whose
	// key already names a row of the same content is dropped (a retried
	// activity's); rows of other content under the key do not count. It is
	// not shown; rows without one are always appended.
	OnceKey string
}

// AuditRow is one stored audit row.
type AuditRow struct {
	ID         int64           `db:"id" json:"id"`
	At         time.Time       `db:"at" json:"at"`
	Action     string          `db:"action" json:"action"`
	Outcome    string          `db:"outcome" json:"outcome"`
	Actor      string          `db:"actor" json:"actor"`
	TargetType string          `db:"target_type" json:"targetType"`
	TargetID   string          `db:"target_id" json:"targetId"`
	ErrorCode  string          `db:"error_code" json:"errorCode,omitempty"`
	Metadata   json.RawMessage `db:"metadata" json:"metadata"`
	// Label is the action's readable label (AuditLabel), filled in by
	// ListAudit.
	Label string `db:"-" json:"label"`
}

// AuditFilter selects audit rows for ListAudit. Empty fields do not filter.
type AuditFilter struct {
	// TargetID matches the target id exactly, or as a prefix when it ends
	// with "*" ("billing:*" matches every target id starting with "billing:").
	// Only a trailing "*" is special.
	TargetID string
	// TargetExact matches TargetID exactly even when it ends with "*" (a
	// key's workflow id, whose subject key may end so).
	TargetExact bool
	// TargetType, when not empty, matches the target type exactly: target
	// ids of different types may be equal (an app and the schema, an event
	// id and an operator token's).
	TargetType string
	// EventTypes, when not nil, keeps only the rows whose metadata names
	// one of these event types: event ids are unique per source app only,
	// and a row about an event carries its type.
	EventTypes []string
	// Action matches the action exactly.
	Action string
	// Limit caps the rows returned: DefaultAuditLimit when zero or negative,
	// at most MaxAuditLimit.
	Limit int
}

// AppendAudit appends e to the audit trail through q, so the row commits or
// rolls back with the caller's transaction when q is one.
func AppendAudit(ctx context.Context, q Querier, e AuditEntry) error {
	_, err := appendAudit(ctx, q, e)
	return err
}

// appendAudit appends e and reports whether it wrote a row: false only for
// an entry whose OnceKey already names a row of the same content.
func appendAudit(ctx context.Context, q Querier, e AuditEntry) (bool, error) {
	if e.Action == "" {
		return false, errors.New("append audit: action is required")
	}
	if e.Outcome == "" {
		e.Outcome = OutcomeAllowed
	}
	if e.Actor == "" {
		e.Actor = ActorSystem
	}
	meta := []byte("{}")
	if e.Metadata != nil {
		b, err := json.Marshal(withoutNUL(e.Metadata))
		if err != nil {
			return false, fmt.Errorf("append audit %s: encode metadata: %w", e.Action, err)
		}
		meta = b
	}
	var code, once *string
	if e.ErrorCode != "" {
		code = &e.ErrorCode
	}
	if e.OnceKey != "" {
		once = &e.OnceKey
	}
	// A once key names a row together with its content's digest, which the
	// database computes (migration 0024): the same row written before (a
	// retry) makes this one redundant, while a row of other content under
	// the key (planted by another writer, or a bug) is no obstacle and does
	// not silence the real one.
	tag, err := q.Exec(ctx, `
		INSERT INTO audit (action, outcome, actor, target_type, target_id, error_code, metadata, once_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8)
		ON CONFLICT (once_key, once_digest) WHERE once_key IS NOT NULL DO NOTHING`,
		e.Action, e.Outcome, e.Actor, e.TargetType, e.TargetID, code, string(meta), once)
	if err != nil {
		return false, fmt.Errorf("append audit %s: %w", e.Action, err)
	}
	return tag.RowsAffected() == 1 || once == nil, nil
}

// Audit appends e to the audit trail in its own statement.
func (s *Store) Audit(ctx context.Context, e AuditEntry) error {
	return AppendAudit(ctx, s.Pool, e)
}

// withoutNUL is v with every NUL character of its strings (in maps and
// slices too) replaced by U+FFFD. jsonb refuses \u0000, and text in a row
// comes from operators and apps (an operator action's reason may hold
// one): a row refused for it would be refused on every retry, and the
// writes a key's workflow retries until they land would hold the key.
func withoutNUL(v any) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, "\x00", "\uFFFD")
	case []string:
		out := make([]string, len(v))
		for i, s := range v {
			out[i] = strings.ReplaceAll(s, "\x00", "\uFFFD")
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = withoutNUL(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[strings.ReplaceAll(k, "\x00", "\uFFFD")] = withoutNUL(x)
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[strings.ReplaceAll(k, "\x00", "\uFFFD")] = strings.ReplaceAll(x, "\x00", "\uFFFD")
		}
		return out
	}
	return v
}

// AuditByOnceKey returns the audit row written under once key key (the
// first, when rows of several contents were), or ErrNotFound.
func (s *Store) AuditByOnceKey(ctx context.Context, key string) (AuditRow, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT id, at, action, outcome, actor, target_type, target_id,
		       COALESCE(error_code, '') AS error_code, metadata
		  FROM audit WHERE once_key = $1 ORDER BY id LIMIT 1`, key)
	if err != nil {
		return AuditRow{}, fmt.Errorf("read audit row of once key %s: %w", key, err)
	}
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[AuditRow])
	if errors.Is(err, pgx.ErrNoRows) {
		return AuditRow{}, ErrNotFound
	}
	if err != nil {
		return AuditRow{}, fmt.Errorf("read audit row of once key %s: %w", key, err)
	}
	return row, nil
}

// ListAudit returns the audit rows matching f, newest first.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditRow, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	limit = min(limit, MaxAuditLimit)

	var where []string
	var args []any
	if f.TargetID != "" {
		if prefix, ok := strings.CutSuffix(f.TargetID, "*"); ok && !f.TargetExact {
			args = append(args, likePrefix(prefix))
			where = append(where, fmt.Sprintf(`target_id LIKE $%d ESCAPE '\'`, len(args)))
		} else {
			args = append(args, f.TargetID)
			where = append(where, fmt.Sprintf(`target_id = $%d`, len(args)))
		}
	}
	if f.TargetType != "" {
		args = append(args, f.TargetType)
		where = append(where, fmt.Sprintf(`target_type = $%d`, len(args)))
	}
	if f.EventTypes != nil {
		args = append(args, f.EventTypes)
		where = append(where, fmt.Sprintf(`metadata->>'type' = ANY($%d::text[])`, len(args)))
	}
	if f.Action != "" {
		args = append(args, f.Action)
		where = append(where, fmt.Sprintf(`action = $%d`, len(args)))
	}
	sql := `SELECT id, at, action, outcome, actor, target_type, target_id,
	               COALESCE(error_code, '') AS error_code, metadata
	          FROM audit`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, ` AND `)
	}
	args = append(args, limit)
	sql += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))

	rows, err := s.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[AuditRow])
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	for i := range out {
		out[i].Label = AuditLabel(out[i].Action)
	}
	return out, nil
}

// likePrefix turns a literal prefix into a LIKE pattern matching it, escaping
// LIKE's own wildcards with a backslash.
func likePrefix(prefix string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(prefix) + "%"
}

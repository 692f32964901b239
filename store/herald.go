package store

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"herald/envelope"
	"herald/manifest"
	"herald/workflows/payload"
)

// Herald's own app and its operational events (docs/operational-events.md).
// The app is declared by Migrate from the manifest embedded below; apps
// subscribe to its events like to any other. The events are written to the
// event log in the transaction that records the transition (with its audit
// row), so the relay and the Delivery workflows carry them like any event:
// in order per subscription and subject key, signed.
const (
	HeraldApp = manifest.ReservedApp

	TypeKeyFailed                = "herald.key.failed"
	TypeKeyRecovered             = "herald.key.recovered"
	TypeKeyExpired               = "herald.key.expired"
	TypeSubscriptionStateChanged = "herald.subscription.state_changed"

	// heraldVersion is the version of every operational event.
	heraldVersion = 1
	// ViaHerald is events.published_via of the operational events.
	ViaHerald = "herald"
)

// ActionDeliveryRecovered is the audit action of a failed key delivering
// again; it comes with a herald.key.recovered event.
const ActionDeliveryRecovered = "delivery.recovered"

// ErrHeraldAppTaken says a user app named herald exists, declared before
// the name was reserved: Herald does not take it over, and emits no
// operational events until it is renamed (docs/operational-events.md).
var ErrHeraldAppTaken = errors.New("an app named " + HeraldApp + " was declared by a user before the name was reserved; " +
	"operational events are off until it is renamed: apply its manifest under another id, move its subscribers, " +
	"then starter apps remove " + HeraldApp)

// ErrReservedApp refuses a user manifest, diff or removal of the app
// HeraldApp.
var ErrReservedApp = fmt.Errorf("app id %q is reserved for Herald's own operational events; "+
	"subscribe to herald.* events from your app's manifest instead", HeraldApp)

// Codes of the audit rows that key events are derived from; the
// activities package's CodeRetentionExpired and CodeSubscriptionRemoved
// are these.
const (
	CodeRetentionExpired    = "retention_expired"
	CodeSubscriptionRemoved = "subscription_removed"
)

// maxLastErrorBytes caps lastError in herald.key.failed.
const maxLastErrorBytes = 1000

// maxSubjectBytes is the longest subject key (docs/design.md#identifiers).
const maxSubjectBytes = 200

//go:embed herald_app.json
var heraldManifestJSON []byte

// HeraldManifest returns Herald's own manifest, the declarations of its
// operational events.
func HeraldManifest() (*manifest.Manifest, error) {
	m, err := manifest.ParseBuiltin("herald (built in)", heraldManifestJSON)
	if err != nil {
		return nil, fmt.Errorf("herald's own manifest: %w", err)
	}
	return m, nil
}

// EnsureHeraldApp declares Herald's own app (HeraldApp) and its operational
// events from the embedded manifest; an unchanged declaration writes
// nothing, so every worker start calls it (service.New). Until it has run,
// no operational event is emitted.
func (s *Store) EnsureHeraldApp(ctx context.Context) (ApplyResult, error) {
	m, err := HeraldManifest()
	if err != nil {
		return ApplyResult{}, err
	}
	var res ApplyResult
	err = s.WithTx(ctx, func(tx pgx.Tx) error {
		if err := lockApp(ctx, tx, HeraldApp); err != nil {
			return err
		}
		// An app named herald declared by a user before the name was
		// reserved is not taken over: its endpoint is not Herald's.
		if own, endpoint, err := heraldAppIsOwn(ctx, tx); err != nil {
			return err
		} else if !own {
			return fmt.Errorf("%w (its endpoint is %s)", ErrHeraldAppTaken, endpoint)
		}
		res, err = applyManifestTx(ctx, tx, m, ApplyOptions{Actor: ActorSystem})
		return err
	})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("declare the app %s: %w", HeraldApp, err)
	}
	return res, nil
}

// refuseReserved refuses a manifest of the app HeraldApp that is not
// Herald's own.
func refuseReserved(m *manifest.Manifest) error {
	if m != nil && m.App == HeraldApp && !m.IsBuiltin() {
		return ErrReservedApp
	}
	return nil
}

// IsHeraldType reports whether an event type is one of Herald's own.
func IsHeraldType(eventType string) bool {
	return strings.HasPrefix(eventType, HeraldApp+".")
}

// OperationalEventApp returns the app an operational event's envelope is
// about (its data.subscriberApp), the only app it is delivered to; "" when
// it names none.
func OperationalEventApp(envelope []byte) string {
	var env struct {
		Data struct {
			SubscriberApp string `json:"subscriberApp"`
		} `json:"data"`
	}
	if json.Unmarshal(envelope, &env) != nil {
		return ""
	}
	return env.Data.SubscriberApp
}

// subInfo is what operational events say about a subscription.
type subInfo struct {
	App     string
	Type    string
	Version int
}

// lookupSubscription reads what an event of type typ says about a
// subscription; ok is false when the subscription does not exist or typ is
// not declared (Herald's app not declared yet, see EnsureHeraldApp): then
// nothing is emitted.
func lookupSubscription(ctx context.Context, tx pgx.Tx, id, typ string) (s subInfo, ok bool, err error) {
	err = tx.QueryRow(ctx, `
		SELECT s.app, s.type, s.version,
		       EXISTS (SELECT 1 FROM declarations d JOIN apps a ON a.id = d.app
		                WHERE d.type = $2 AND d.version = $3 AND d.app = $4
		                  AND d.retired_at IS NULL AND a.removed_at IS NULL)
		  FROM subscriptions s WHERE s.id = $1`, id, typ, heraldVersion, HeraldApp).
		Scan(&s.App, &s.Type, &s.Version, &ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return subInfo{}, false, nil
	}
	if err != nil {
		return subInfo{}, false, fmt.Errorf("read subscription %s: %w", id, err)
	}
	return s, ok, nil
}

// emitHerald appends one operational event to the event log inside tx: it
// becomes visible to the relay when tx commits, with the rows recording the
// transition, and not at all when tx rolls back.
func emitHerald(ctx context.Context, tx pgx.Tx, typ, subject string, at time.Time, data any) error {
	// A user's app named herald from before the name was reserved
	// (ErrHeraldAppTaken): its subscribers get nothing from Herald.
	if own, _, err := heraldAppIsOwn(ctx, tx); err != nil || !own {
		return err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("emit %s: event id: %w", typ, err)
	}
	body, err := envelope.Data(data)
	if err != nil {
		return fmt.Errorf("emit %s: %w", typ, err)
	}
	env := envelope.Envelope{ID: id.String(), App: HeraldApp, Type: typ, Subject: subject, Time: at,
		Version: heraldVersion, Data: body}.Encode()
	ins, err := InsertEventsTx(ctx, tx, []NewEvent{{
		ID: id.String(), SourceApp: HeraldApp, Type: typ, Version: heraldVersion, Subject: subject,
		Envelope: env, ContentHash: envelope.ContentHash(HeraldApp, typ, heraldVersion, subject, body), Via: ViaHerald,
	}})
	if err != nil {
		return fmt.Errorf("emit %s: %w", typ, err)
	}
	if ins[0].Conflict {
		return fmt.Errorf("emit %s: event id %s already used", typ, ins[0].ID)
	}
	return nil
}

// keySubject is the subject key of a key event, "<subscription>/<subject>",
// so one subscriber receives the events about one key in order. A subject
// key that would make it longer than a subject may be is replaced by its
// SHA-256 (the data carries the full one).
func keySubject(subscriptionID, subject string) string {
	s := subscriptionID + "/" + subject
	if len(s) <= maxSubjectBytes {
		return s
	}
	sum := sha256.Sum256([]byte(subject))
	s = subscriptionID + "/sha256:" + hex.EncodeToString(sum[:16])
	if len(s) <= maxSubjectBytes {
		return s
	}
	sum = sha256.Sum256([]byte(subscriptionID + "/" + subject))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DeliveryWorkflowID is the id of the Delivery workflow of one
// subscription and subject key, "deliver:<subscription-id>:<subject-key>":
// key events name it (workflowId) and its audit rows target it.
// activities.DeliveryWorkflowID is this, and payload.DeliveryWorkflowID
// builds it.
func DeliveryWorkflowID(subscriptionID, subject string) string {
	return payload.DeliveryWorkflowID(subscriptionID, subject)
}

// keyTransition derives a key event from an audit row the key's own
// Delivery workflow wrote through RecordWithAudit, in the same transaction:
// delivery.failed gives herald.key.failed (and marks the key in
// failed_keys), delivery.skipped gives herald.key.skipped,
// delivery.cancelled with retention_expired gives herald.key.expired, and
// with subscription_removed forgets the key's failure. The row's metadata
// is read once (readDeliveryFacts) into the event's typed data
// (opevents.go). Loop guard: nothing is emitted about subscriptions to Herald's
// own events, so a failing subscriber of herald.key.failed cannot feed
// itself. delivery.paused and delivery.resumed keep the key's row in
// paused_keys (pauseKey), which every run of the key reads at its start.
func keyTransition(ctx context.Context, tx pgx.Tx, subscriptionID, subject string, e AuditEntry) error {
	if e.TargetID != DeliveryWorkflowID(subscriptionID, subject) {
		return nil // another workflow's row: not this key's transition
	}
	var kind string
	switch {
	case e.Action == ActionDeliveryPaused || e.Action == ActionDeliveryResumed:
		return pauseKey(ctx, tx, subscriptionID, subject, e.Action == ActionDeliveryPaused, e.Actor)
	case e.Action == ActionDeliveryFailed:
		kind = TypeKeyFailed
	case e.Action == ActionDeliverySkipped:
		kind = TypeKeySkipped
	case e.Action == ActionDeliveryCancelled && e.ErrorCode == CodeRetentionExpired:
		kind = TypeKeyExpired
	case e.Action == ActionDeliveryCancelled && e.ErrorCode == CodeSubscriptionRemoved:
		if _, err := tx.Exec(ctx, `DELETE FROM failed_keys WHERE subscription_id = $1 AND subject = $2`,
			subscriptionID, subject); err != nil {
			return fmt.Errorf("forget failed key %s: %w", e.TargetID, err)
		}
		return pauseKey(ctx, tx, subscriptionID, subject, false, "")
	default:
		return nil
	}
	sub, ok, err := lookupSubscription(ctx, tx, subscriptionID, kind)
	if err != nil || !ok || IsHeraldType(sub.Type) {
		return err
	}
	key, f, now := keyFields(sub, subscriptionID, subject), readDeliveryFacts(e.Metadata), time.Now()
	subj := keySubject(subscriptionID, subject)
	switch kind {
	case TypeKeyFailed:
		if !IsUUID(f.EventID) {
			return nil
		}
		var failedAt time.Time
		if err := tx.QueryRow(ctx, `
			INSERT INTO failed_keys (subscription_id, subject, event_id, code)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (subscription_id, subject) DO UPDATE SET event_id = EXCLUDED.event_id, code = EXCLUDED.code
			RETURNING now()`, subscriptionID, subject, f.EventID, e.ErrorCode).Scan(&failedAt); err != nil {
			return fmt.Errorf("mark key %s failed: %w", e.TargetID, err)
		}
		return emitHerald(ctx, tx, kind, subj, failedAt, KeyFailed{KeyFields: key, EventID: f.EventID, Seq: f.Seq,
			Code: e.ErrorCode, LastCode: f.LastCode, LastError: lastError(f.Error), Attempts: f.Attempts,
			FailedAt: UTCTime(failedAt)})
	case TypeKeySkipped:
		if !IsUUID(f.EventID) {
			return nil
		}
		return emitHerald(ctx, tx, kind, subj, now, KeySkipped{KeyFields: key, EventID: f.EventID, Seq: f.Seq,
			Code: CodeSkippedAfterFailure, FailedCode: f.FailedCode, LastCode: f.LastCode,
			LastError: lastError(f.Error), Attempts: f.Attempts, SkippedAt: UTCTime(now)})
	default: // TypeKeyExpired
		if f.Count < 1 {
			return nil
		}
		return emitHerald(ctx, tx, kind, subj, now, KeyExpired{KeyFields: key, Count: f.Count,
			EventIDs: f.EventIDs, HoldExpiry: f.HoldExpiry, ExpiredAt: UTCTime(now)})
	}
}

// The statements of a key's paused_keys row ($1 its subscription, $2 its
// subject): whether there is one, and its delete.
const (
	keyPausedQuery = `SELECT EXISTS (SELECT 1 FROM paused_keys WHERE subscription_id = $1 AND subject = $2)`
	forgetKeyPause = `DELETE FROM paused_keys WHERE subscription_id = $1 AND subject = $2`
)

// pauseKey records in tx that an operator paused the key (paused) or
// resumed it: its row in paused_keys, which store.KeyQueue reports to the
// key's next run, is written or deleted. The key's workflow writes its
// pause and resume audit rows one after the other, so the last written
// decides.
func pauseKey(ctx context.Context, tx pgx.Tx, subscriptionID, subject string, paused bool, actor string) error {
	stmt, args := forgetKeyPause, []any{subscriptionID, subject}
	if paused {
		// Not for a cancelled subscription: a pause applied after its
		// removal dropped the key's queue would outlive the key. The share
		// lock orders it with a removal in flight (cancelSubscriptions
		// locks the row, cancels it and deletes its keys' pauses): it waits
		// for the removal and then sees the subscription cancelled, or the
		// removal waits for it and deletes its row. Without the lock both
		// went through, and the row outlived the key (a review helper).
		stmt = `
			INSERT INTO paused_keys (subscription_id, subject, actor)
			SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM subscriptions WHERE id = $1 AND state <> 'cancelled' FOR SHARE)
			ON CONFLICT (subscription_id, subject) DO UPDATE SET actor = EXCLUDED.actor, paused_at = now()`
		args = append(args, actor)
	}
	if _, err := tx.Exec(ctx, stmt, args...); err != nil {
		return fmt.Errorf("keep the pause of key %s: %w", DeliveryWorkflowID(subscriptionID, subject), err)
	}
	return nil
}

// KeyPaused reports whether an operator paused the key (its paused_keys
// row), whether or not a run of the key's workflow is running.
func (s *Store) KeyPaused(ctx context.Context, subscriptionID, subject string) (bool, error) {
	var paused bool
	err := s.Pool.QueryRow(ctx, keyPausedQuery, subscriptionID, subject).Scan(&paused)
	if err != nil {
		return false, fmt.Errorf("read the pause of key %s: %w", DeliveryWorkflowID(subscriptionID, subject), err)
	}
	return paused, nil
}

// KeyHasEvents reports whether the log holds an event of the key for a
// subscription that is not cancelled: an outcome row of the key (any
// status), which the relay writes before it signals. An operator's pause of
// such a key starts its workflow when no run is there to take it
// (keyops.Pause); a subject the subscription never had starts nothing.
func (s *Store) KeyHasEvents(ctx context.Context, subscriptionID, subject string) (bool, error) {
	var known bool
	err := s.Pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM outcomes WHERE subscription_id = $1 AND subject = $2)
		   AND EXISTS (SELECT 1 FROM subscriptions WHERE id = $1 AND state <> 'cancelled')`,
		subscriptionID, subject).Scan(&known)
	if err != nil {
		return false, fmt.Errorf("read whether the log holds events of key %s: %w", DeliveryWorkflowID(subscriptionID, subject), err)
	}
	return known, nil
}

// ForgetKeyPause is a resume of a key whose run was not paused: it deletes
// the key's paused_keys row (a pause the run never learnt of: a reset past
// it, a late write of a terminated run) and, when there was one, writes
// audit (its delivery.resumed row, OnceKey set) in the same transaction.
// It reports whether the key was paused; a retry after a commit whose
// answer was lost finds audit's row by its once key and reports true again.
func (s *Store) ForgetKeyPause(ctx context.Context, subscriptionID, subject string, audit AuditEntry) (bool, error) {
	var forgot bool
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, forgetKeyPause, subscriptionID, subject)
		if err != nil {
			return fmt.Errorf("forget the pause of key %s: %w", DeliveryWorkflowID(subscriptionID, subject), err)
		}
		if tag.RowsAffected() == 0 {
			if audit.OnceKey == "" {
				return nil
			}
			return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit WHERE once_key = $1)`, audit.OnceKey).Scan(&forgot)
		}
		forgot = true
		_, err = appendAudit(ctx, tx, audit)
		return err
	})
	return forgot, err
}

// recoverKey records that a key in failed_keys delivered again: it forgets
// the failure and writes a delivery.recovered audit row and a
// herald.key.recovered event, in tx. Of concurrent callers only the one
// whose delete finds the row writes them.
func recoverKey(ctx context.Context, tx pgx.Tx, subscriptionID, subject string) error {
	var eventID, code string
	var failedAt, at time.Time
	err := tx.QueryRow(ctx, `
		DELETE FROM failed_keys WHERE subscription_id = $1 AND subject = $2
		RETURNING event_id::text, code, failed_at, now()`, subscriptionID, subject).
		Scan(&eventID, &code, &failedAt, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recover key %s: %w", DeliveryWorkflowID(subscriptionID, subject), err)
	}
	failedFor := max(at.Sub(failedAt), 0)
	if err := AppendAudit(ctx, tx, AuditEntry{
		Action: ActionDeliveryRecovered, TargetType: TargetDelivery,
		TargetID: DeliveryWorkflowID(subscriptionID, subject),
		Metadata: map[string]any{
			"subscription": subscriptionID, "subject": subject, "failedEventId": eventID,
			"failedCode": code, "failedAt": failedAt, "failedSeconds": failedFor.Seconds(),
		},
	}); err != nil {
		return err
	}
	sub, ok, err := lookupSubscription(ctx, tx, subscriptionID, TypeKeyRecovered)
	if err != nil || !ok || IsHeraldType(sub.Type) {
		return err
	}
	data := KeyRecovered{KeyFields: keyFields(sub, subscriptionID, subject), FailedEventID: eventID,
		FailedCode: code, FailedAt: UTCTime(failedAt), RecoveredAt: UTCTime(at), FailedSeconds: failedFor.Seconds()}
	return emitHerald(ctx, tx, TypeKeyRecovered, keySubject(subscriptionID, subject), at, data)
}

// emitStateChange writes herald.subscription.state_changed for one change
// written by writeStateChange, in the same transaction.
func emitStateChange(ctx context.Context, tx pgx.Tx, c StateChange, actor, reason string) error {
	sub, ok, err := lookupSubscription(ctx, tx, c.SubscriptionID, TypeSubscriptionStateChanged)
	if err != nil || !ok {
		return err
	}
	if actor == "" {
		actor = ActorSystem
	}
	now := time.Now()
	data := SubscriptionStateChanged{SubscriptionID: c.SubscriptionID, SubscriberApp: sub.App,
		EventType: sub.Type, EventVersion: sub.Version, From: c.From, FromReason: reasonOrNull(c.FromReason),
		To: c.To, ToReason: reasonOrNull(c.ToReason), Actor: actor, Reason: reason, ChangedAt: UTCTime(now)}
	subject := c.SubscriptionID
	if len(subject) > maxSubjectBytes {
		sum := sha256.Sum256([]byte(subject))
		subject = "sha256:" + hex.EncodeToString(sum[:])
	}
	return emitHerald(ctx, tx, TypeSubscriptionStateChanged, subject, now, data)
}

// reasonOrNull is a state's reason, null (nil) when there is none.
func reasonOrNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// metaInt reads a whole number from audit metadata, which holds float64
// after a trip through JSON (Temporal) and Go integers otherwise.
func metaInt(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	case json.Number:
		i, _ := n.Int64()
		return i
	}
	return 0
}

// truncateUTF8 cuts s to at most n bytes on a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// heraldEndpoint is the endpoint of Herald's own manifest, read once: it
// tells Herald's app row from a user's app of the same name.
var heraldEndpoint = sync.OnceValues(func() (string, error) {
	m, err := HeraldManifest()
	if err != nil {
		return "", err
	}
	return m.Endpoint, nil
})

// heraldAppIsOwn reports whether the app row named HeraldApp is Herald's
// own (its built-in endpoint), not a user's app declared before the name was
// reserved, with the row's endpoint. No row counts as Herald's own.
func heraldAppIsOwn(ctx context.Context, tx pgx.Tx) (own bool, endpoint string, err error) {
	builtin, err := heraldEndpoint()
	if err != nil {
		return false, "", err
	}
	switch err := tx.QueryRow(ctx, `SELECT endpoint FROM apps WHERE id = $1`, HeraldApp).Scan(&endpoint); {
	case errors.Is(err, pgx.ErrNoRows):
		return true, "", nil
	case err != nil:
		return false, "", err
	}
	return endpoint == builtin, endpoint, nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit actions on signing secrets (docs/design.md#audit). Their metadata
// never holds a secret.
const (
	ActionSecretCreated = "app.secret_created"
	ActionSecretShown   = "app.secret_shown"
	ActionSecretRotated = "app.secret_rotated"
)

// MaxPreviousSecrets is how many rotated-away secrets of an app stay valid
// at most: rotating again within an overlap retires the oldest first.
const MaxPreviousSecrets = 2

// ErrAppRemoved is returned for a secret of an app that was removed.
var ErrAppRemoved = errors.New("app was removed")

// SecretSealer encrypts signing secrets at rest (signing.SecretBox); ad is
// the app id.
type SecretSealer interface {
	Seal(secret, ad string) ([]byte, error)
	Open(sealed []byte, ad string) (string, error)
}

// AppSecret is one signing secret of an app, in the clear.
type AppSecret struct {
	// ID is the secret's row: a new current secret always has a new one
	// (Batch.SecretID).
	ID        int64
	Secret    string
	CreatedAt time.Time
	// ValidUntil is nil for the current secret.
	ValidUntil *time.Time
}

// AppSecrets are the secrets an app's deliveries are signed with now.
type AppSecrets struct {
	App      string
	Current  AppSecret
	Previous []AppSecret // newest first, each still valid
}

// All returns the secrets to sign with: the current one first.
func (a AppSecrets) All() []string {
	out := []string{a.Current.Secret}
	for _, p := range a.Previous {
		out = append(out, p.Secret)
	}
	return out
}

// SecretRequest says which app's secrets to read and how to make a first
// one when it has none.
type SecretRequest struct {
	App   string
	Box   SecretSealer
	New   func() (string, error) // a new whsec_ secret
	Actor string                 // audited when a secret is created
	// AllowRemoved serves a removed app too: the worker still signs the
	// attempts in flight when its app was removed.
	AllowRemoved bool
}

// EnsureAppSecrets returns app's valid secrets, creating (and auditing) its
// first one when it has none. An unknown app is ErrNotFound, a removed one
// ErrAppRemoved.
func (s *Store) EnsureAppSecrets(ctx context.Context, r SecretRequest) (AppSecrets, error) {
	// Every delivery attempt reads its app's secrets: the usual case, a
	// current secret, takes one read (the app and its secrets) and no
	// transaction.
	rows, err := r.read(ctx, s.Pool)
	if err != nil {
		return AppSecrets{}, fmt.Errorf("secrets of app %s: %w", r.App, err)
	}
	if len(rows) > 0 && rows[0].ValidUntil == nil {
		return AppSecrets{App: r.App, Current: rows[0], Previous: rows[1:]}, nil
	}
	var out AppSecrets
	err = s.WithTx(ctx, func(tx pgx.Tx) error {
		rows, err := r.read(ctx, tx)
		if err != nil {
			return err
		}
		if len(rows) == 0 || rows[0].ValidUntil != nil {
			secret, err := insertSecret(ctx, tx, r)
			if err != nil {
				return err
			}
			if secret == nil {
				// A concurrent caller created it first: read theirs.
				return errRetry
			}
			if err := AppendAudit(ctx, tx, AuditEntry{Action: ActionSecretCreated, Actor: r.Actor,
				TargetType: TargetApp, TargetID: r.App}); err != nil {
				return err
			}
			rows = append([]AppSecret{*secret}, rows...)
		}
		out = AppSecrets{App: r.App, Current: rows[0], Previous: rows[1:]}
		return nil
	})
	if errors.Is(err, errRetry) {
		return s.EnsureAppSecrets(ctx, r)
	}
	if err != nil {
		return AppSecrets{}, fmt.Errorf("secrets of app %s: %w", r.App, err)
	}
	return out, nil
}

var errRetry = errors.New("retry")

// read checks the app and returns its valid secrets, the current one
// first, then the previous ones newest first, in one statement: every
// delivery attempt signs with them, so it costs one round trip, not two.
// An unknown app is ErrNotFound, a removed one ErrAppRemoved unless
// AllowRemoved.
func (r SecretRequest) read(ctx context.Context, q Querier) ([]AppSecret, error) {
	rows, err := q.Query(ctx, `SELECT a.removed_at IS NOT NULL, s.id, s.sealed, s.created_at, s.valid_until
		  FROM apps a
		  LEFT JOIN app_secrets s ON s.app = a.id AND (s.valid_until IS NULL OR s.valid_until > now())
		 WHERE a.id = $1
		 ORDER BY s.valid_until IS NULL DESC, s.id DESC`, r.App)
	if err != nil {
		return nil, err
	}
	var (
		out     []AppSecret
		found   bool
		removed bool
		id      *int64
		sealed  []byte
		created *time.Time
		until   *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&removed, &id, &sealed, &created, &until}, func() error {
		found = true
		if removed && !r.AllowRemoved {
			return ErrAppRemoved
		}
		if sealed == nil { // the app has no valid secret
			return nil
		}
		plain, err := r.Box.Open(sealed, r.App)
		if err != nil {
			return err
		}
		out = append(out, AppSecret{ID: *id, Secret: plain, CreatedAt: *created, ValidUntil: until})
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, ErrNotFound
	}
	return out, nil
}

// AuditSecretShown records that actor was shown app's secret.
func (s *Store) AuditSecretShown(ctx context.Context, app, actor string) error {
	return s.Audit(ctx, AuditEntry{Action: ActionSecretShown, Actor: actor, TargetType: TargetApp, TargetID: app})
}

// RotateRequest makes a new current secret for App.
type RotateRequest struct {
	SecretRequest
	// Overlap is how long the secret it replaces stays valid.
	Overlap time.Duration
	Reason  string
}

// RotateAppSecret makes a new current secret, keeps the old one valid for
// the overlap (at most MaxPreviousSecrets previous ones, the oldest retired
// first) and audits it with the actor and reason, never a secret.
func (s *Store) RotateAppSecret(ctx context.Context, r RotateRequest) (AppSecrets, error) {
	if r.Overlap < 0 {
		return AppSecrets{}, fmt.Errorf("rotate secret of %s: overlap %s is negative", r.App, r.Overlap)
	}
	var out AppSecrets
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		if err := liveApp(ctx, tx, r.App); err != nil {
			return err
		}
		// The app row's lock serializes rotations of one app.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM apps WHERE id = $1 FOR UPDATE`, r.App); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE app_secrets SET valid_until = now() + $2::interval
			WHERE app = $1 AND valid_until IS NULL`, r.App, r.Overlap); err != nil {
			return err
		}
		// Expired ones, and the oldest beyond MaxPreviousSecrets, go.
		if _, err := tx.Exec(ctx, `DELETE FROM app_secrets WHERE app = $1 AND (valid_until <= now() OR id IN (
			SELECT id FROM app_secrets WHERE app = $1 AND valid_until > now()
			 ORDER BY id DESC OFFSET $2))`, r.App, MaxPreviousSecrets); err != nil {
			return err
		}
		secret, err := insertSecret(ctx, tx, r.SecretRequest)
		if err != nil {
			return err
		}
		if secret == nil {
			return errors.New("a current secret appeared during the rotation")
		}
		// The app was live before its row's lock: read its secrets as they
		// are now, as the worker reads them.
		rows, err := SecretRequest{App: r.App, Box: r.Box, AllowRemoved: true}.read(ctx, tx)
		if err != nil {
			return err
		}
		out = AppSecrets{App: r.App, Current: rows[0], Previous: rows[1:]}
		meta := map[string]any{"overlap": r.Overlap.String(), "previous": len(out.Previous)}
		if r.Reason != "" {
			meta["reason"] = r.Reason
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionSecretRotated, Actor: r.Actor,
			TargetType: TargetApp, TargetID: r.App, Metadata: meta})
	})
	if err != nil {
		return AppSecrets{}, fmt.Errorf("rotate secret of app %s: %w", r.App, err)
	}
	return out, nil
}

// liveApp checks that app exists and was not removed.
func liveApp(ctx context.Context, q Querier, app string) error {
	var removed *time.Time
	err := q.QueryRow(ctx, `SELECT removed_at FROM apps WHERE id = $1`, app).Scan(&removed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return err
	case removed != nil:
		return ErrAppRemoved
	}
	return nil
}

// insertSecret adds a new current secret; nil when the app has one already.
func insertSecret(ctx context.Context, tx pgx.Tx, r SecretRequest) (*AppSecret, error) {
	secret, err := r.New()
	if err != nil {
		return nil, err
	}
	sealed, err := r.Box.Seal(secret, r.App)
	if err != nil {
		return nil, err
	}
	var (
		id      int64
		created time.Time
	)
	err = tx.QueryRow(ctx, `INSERT INTO app_secrets (app, sealed) VALUES ($1, $2)
		ON CONFLICT (app) WHERE valid_until IS NULL DO NOTHING RETURNING id, created_at`, r.App, sealed).Scan(&id, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &AppSecret{ID: id, Secret: secret, CreatedAt: created}, nil
}

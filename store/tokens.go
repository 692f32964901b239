package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Audit actions of API tokens; the target is the token's app.
const (
	ActionAPITokenCreated = "api_token.created"
	ActionAPITokenRevoked = "api_token.revoked"
)

// ErrTokenNameTaken is returned when an app already has a live token of the
// requested name.
var ErrTokenNameTaken = errors.New("token name taken")

// ErrTokenRevoked is returned when revoking a token that is revoked already.
var ErrTokenRevoked = errors.New("token already revoked")

// APIToken describes an API token: an app's (publishing, and the
// operations API within the app's scope) or an operator's (the operations
// API, every app). The secret is never stored, only its hash, which this
// type does not carry.
type APIToken struct {
	ID  string `db:"id" json:"id"`
	App string `db:"app" json:"app,omitempty"`
	// Operator: an operator token, of no app (starter tokens create --operator).
	Operator  bool       `db:"operator" json:"operator,omitempty"`
	Name      string     `db:"name" json:"name"`
	CreatedAt time.Time  `db:"created_at" json:"createdAt"`
	CreatedBy string     `db:"created_by" json:"createdBy"`
	RevokedAt *time.Time `db:"revoked_at" json:"revokedAt,omitempty"`
	RevokedBy string     `db:"revoked_by" json:"revokedBy,omitempty"`
}

// TokenCredential is what authentication needs of a live token.
type TokenCredential struct {
	ID string
	// App is the token's app; empty for an operator token.
	App string
	// Operator: an operator token, which sees and acts on every app in the
	// operations API and publishes nothing.
	Operator bool
	Name     string
	Hash     []byte
	// AppRemoved: the app was removed (`starter apps remove`) after the
	// token was created; it may publish nothing.
	AppRemoved bool
}

const apiTokenColumns = `id, COALESCE(app, '') AS app, operator, name, created_at, created_by, revoked_at, COALESCE(revoked_by, '') AS revoked_by`

// CreateAPIToken records a token of app under name with the given hash and
// audits it, in one transaction. An app that is unknown or removed fails with
// an error wrapping ErrNotFound; a live token of the same name with
// ErrTokenNameTaken.
func (s *Store) CreateAPIToken(ctx context.Context, id, app, name string, hash []byte, actor string) (APIToken, error) {
	if app == HeraldApp {
		return APIToken{}, fmt.Errorf("create a token for %s: %w", app, ErrReservedApp)
	}
	var out APIToken
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		var live bool
		err := tx.QueryRow(ctx, `SELECT removed_at IS NULL FROM apps WHERE id = $1 FOR SHARE`, app).Scan(&live)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !live) {
			return fmt.Errorf("app %s: %w", app, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("look up app %s: %w", app, err)
		}
		rows, err := tx.Query(ctx, `
			INSERT INTO api_tokens (id, app, name, hash, created_by) VALUES ($1, $2, $3, $4, $5)
			RETURNING `+apiTokenColumns, id, app, name, hash, actor)
		if err != nil {
			return fmt.Errorf("insert token: %w", err)
		}
		out, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken])
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return fmt.Errorf("app %s already has a live token named %q: %w", app, name, ErrTokenNameTaken)
		}
		if err != nil {
			return fmt.Errorf("insert token: %w", err)
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionAPITokenCreated, Actor: actor,
			TargetType: TargetApp, TargetID: app, Metadata: map[string]any{"tokenId": id, "name": name}})
	})
	if err != nil {
		return APIToken{}, fmt.Errorf("create token: %w", err)
	}
	return out, nil
}

// TargetOperatorTokens is the target type of the audit rows of operator
// tokens; the target id is the token's id.
const TargetOperatorTokens = "operator_token"

// CreateOperatorToken records an operator token named name with the given
// hash and audits it (api_token.created), in one transaction. A live
// operator token of the same name fails with ErrTokenNameTaken.
func (s *Store) CreateOperatorToken(ctx context.Context, id, name string, hash []byte, actor string) (APIToken, error) {
	var out APIToken
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			INSERT INTO api_tokens (id, app, operator, name, hash, created_by) VALUES ($1, NULL, true, $2, $3, $4)
			RETURNING `+apiTokenColumns, id, name, hash, actor)
		if err != nil {
			return fmt.Errorf("insert token: %w", err)
		}
		out, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken])
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return fmt.Errorf("a live operator token is named %q: %w", name, ErrTokenNameTaken)
		}
		if err != nil {
			return fmt.Errorf("insert token: %w", err)
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionAPITokenCreated, Actor: actor,
			TargetType: TargetOperatorTokens, TargetID: id, Metadata: map[string]any{"tokenId": id, "name": name, "operator": true}})
	})
	if err != nil {
		return APIToken{}, fmt.Errorf("create operator token: %w", err)
	}
	return out, nil
}

// RevokeOperatorToken revokes the operator token named nameOrID (a live
// token's name, or any operator token's id) and audits it. No such token
// fails with an error wrapping ErrNotFound; one revoked before with
// ErrTokenRevoked.
func (s *Store) RevokeOperatorToken(ctx context.Context, nameOrID, actor string) (APIToken, error) {
	var out APIToken
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens
			WHERE operator AND (id = $1 OR (name = $1 AND revoked_at IS NULL))
			ORDER BY (id = $1) DESC LIMIT 1 FOR UPDATE`, nameOrID)
		if err != nil {
			return fmt.Errorf("look up token: %w", err)
		}
		tok, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken])
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no live operator token is named or has id %q: %w", nameOrID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("look up token: %w", err)
		}
		if tok.RevokedAt != nil {
			return fmt.Errorf("operator token %s (%s) was revoked at %s: %w",
				tok.ID, tok.Name, tok.RevokedAt.UTC().Format(time.RFC3339), ErrTokenRevoked)
		}
		rows, err = tx.Query(ctx, `UPDATE api_tokens SET revoked_at = now(), revoked_by = $2
			WHERE id = $1 RETURNING `+apiTokenColumns, tok.ID, actor)
		if err != nil {
			return fmt.Errorf("revoke token: %w", err)
		}
		if out, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken]); err != nil {
			return fmt.Errorf("revoke token: %w", err)
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionAPITokenRevoked, Actor: actor,
			TargetType: TargetOperatorTokens, TargetID: tok.ID, Metadata: map[string]any{"tokenId": tok.ID, "name": tok.Name, "operator": true}})
	})
	if err != nil {
		return APIToken{}, fmt.Errorf("revoke operator token: %w", err)
	}
	return out, nil
}

// ListAPITokens returns the tokens of app, or every token (operator tokens
// first) when app is empty, revoked ones included, oldest first.
func (s *Store) ListAPITokens(ctx context.Context, app string) ([]APIToken, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens
		WHERE $1 = '' OR app = $1 ORDER BY app NULLS FIRST, created_at, id`, app)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[APIToken])
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeAPIToken revokes app's token named nameOrID (a live token's name, or
// any token's id) and audits it. No such token fails with an error wrapping
// ErrNotFound; a token revoked before with ErrTokenRevoked.
func (s *Store) RevokeAPIToken(ctx context.Context, app, nameOrID, actor string) (APIToken, error) {
	var out APIToken
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens
			WHERE app = $1 AND (id = $2 OR (name = $2 AND revoked_at IS NULL))
			ORDER BY (id = $2) DESC LIMIT 1 FOR UPDATE`, app, nameOrID)
		if err != nil {
			return fmt.Errorf("look up token: %w", err)
		}
		tok, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken])
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("app %s has no live token named or with id %q: %w", app, nameOrID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("look up token: %w", err)
		}
		if tok.RevokedAt != nil {
			return fmt.Errorf("token %s (%s) of app %s was revoked at %s: %w",
				tok.ID, tok.Name, app, tok.RevokedAt.UTC().Format(time.RFC3339), ErrTokenRevoked)
		}
		rows, err = tx.Query(ctx, `UPDATE api_tokens SET revoked_at = now(), revoked_by = $2
			WHERE id = $1 RETURNING `+apiTokenColumns, tok.ID, actor)
		if err != nil {
			return fmt.Errorf("revoke token: %w", err)
		}
		if out, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[APIToken]); err != nil {
			return fmt.Errorf("revoke token: %w", err)
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionAPITokenRevoked, Actor: actor,
			TargetType: TargetApp, TargetID: app, Metadata: map[string]any{"tokenId": tok.ID, "name": tok.Name}})
	})
	if err != nil {
		return APIToken{}, fmt.Errorf("revoke token: %w", err)
	}
	return out, nil
}

// LiveAPIToken returns the credential of the unrevoked token with the given
// id, or ErrNotFound.
func (s *Store) LiveAPIToken(ctx context.Context, id string) (TokenCredential, error) {
	if !queryableText(id) {
		return TokenCredential{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	var c TokenCredential
	err := s.Pool.QueryRow(ctx, `SELECT t.id, COALESCE(t.app, ''), t.operator, t.name, t.hash, a.removed_at IS NOT NULL
		FROM api_tokens t LEFT JOIN apps a ON a.id = t.app
		WHERE t.id = $1 AND t.revoked_at IS NULL`, id).Scan(&c.ID, &c.App, &c.Operator, &c.Name, &c.Hash, &c.AppRemoved)
	if errors.Is(err, pgx.ErrNoRows) {
		return TokenCredential{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	if err != nil {
		return TokenCredential{}, fmt.Errorf("look up token: %w", err)
	}
	return c, nil
}

// revokeAppTokens revokes every live token of app, which is being removed,
// and audits each as RevokeAPIToken does: applying the app id again later
// must not bring its old tokens back to life.
func revokeAppTokens(ctx context.Context, tx pgx.Tx, app, actor string) error {
	rows, err := tx.Query(ctx, `UPDATE api_tokens SET revoked_at = now(), revoked_by = $2
		WHERE app = $1 AND revoked_at IS NULL RETURNING `+apiTokenColumns, app, actor)
	if err != nil {
		return fmt.Errorf("revoke the tokens of app %s: %w", app, err)
	}
	toks, err := pgx.CollectRows(rows, pgx.RowToStructByName[APIToken])
	if err != nil {
		return fmt.Errorf("revoke the tokens of app %s: %w", app, err)
	}
	for _, tok := range toks {
		if err := AppendAudit(ctx, tx, AuditEntry{Action: ActionAPITokenRevoked, Actor: actor,
			TargetType: TargetApp, TargetID: app,
			Metadata: map[string]any{"tokenId": tok.ID, "name": tok.Name, "reason": "app removed"}}); err != nil {
			return err
		}
	}
	return nil
}

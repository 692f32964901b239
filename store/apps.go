package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// App is one applied app.
type App struct {
	ID           string    `db:"id" json:"id"`
	Endpoint     string    `db:"endpoint" json:"endpoint"`
	DeliveryPath string    `db:"delivery_path" json:"deliveryPath"`
	ContentHash  string    `db:"content_hash" json:"contentHash"`
	AppliedAt    time.Time `db:"applied_at" json:"appliedAt"`
	// RemovedAt is set once the app was removed (and not applied since).
	RemovedAt *time.Time `db:"removed_at" json:"removedAt,omitempty"`
	// MaxPerSecond and MaxInFlight are the app's delivery limits (manifest
	// "limits"); zero is no limit.
	MaxPerSecond float64 `db:"max_per_second" json:"maxPerSecond,omitempty"`
	MaxInFlight  int     `db:"max_in_flight" json:"maxInFlight,omitempty"`
}

// Declaration is one event type at one version declared by an app.
type Declaration struct {
	Type        string `db:"type" json:"type"`
	Version     int    `db:"version" json:"version"`
	App         string `db:"app" json:"app"`
	Name        string `db:"name" json:"name"`
	Subject     string `db:"subject" json:"subject"`
	Title       string `db:"title" json:"title,omitempty"`
	Description string `db:"description" json:"description,omitempty"`
	Automation  bool   `db:"automation" json:"automation"`
	// Place is nil unless the event is resource-scoped.
	Place      json.RawMessage `db:"place" json:"place,omitempty"`
	DataSchema json.RawMessage `db:"data_schema" json:"dataSchema"`
	Deprecated bool            `db:"deprecated" json:"deprecated,omitempty"`
	CreatedAt  time.Time       `db:"created_at" json:"createdAt"`
	UpdatedAt  time.Time       `db:"updated_at" json:"updatedAt"`
	// RetiredAt is set while the declaration is retired.
	RetiredAt *time.Time `db:"retired_at" json:"retiredAt,omitempty"`
}

// AppDetail is an app with the manifest it was last applied with, all its
// declarations (retired ones included) and all its subscriptions.
type AppDetail struct {
	App
	Manifest      json.RawMessage `db:"manifest" json:"manifest"`
	Declarations  []Declaration   `db:"-" json:"declarations"`
	Subscriptions []Subscription  `db:"-" json:"subscriptions"`
}

const appColumns = `id, endpoint, delivery_path, content_hash, applied_at, removed_at,
	COALESCE(max_per_second, 0) AS max_per_second, COALESCE(max_in_flight, 0) AS max_in_flight`

// ListApps returns every app, removed ones included, ordered by id.
func (s *Store) ListApps(ctx context.Context) ([]App, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+appColumns+` FROM apps ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	apps, err := pgx.CollectRows(rows, pgx.RowToStructByName[App])
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return apps, nil
}

// GetApp returns one app with its declarations and subscriptions, or an
// error wrapping ErrNotFound.
func (s *Store) GetApp(ctx context.Context, id string) (AppDetail, error) {
	var d AppDetail
	// One repeatable-read snapshot, so the three reads agree with each other.
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT `+appColumns+`, manifest FROM apps WHERE id = $1`, id)
			if err != nil {
				return err
			}
			d, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[AppDetail])
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			rows, err = tx.Query(ctx, `SELECT type, version, app, name, subject, title, description,
			       automation, place, data_schema, deprecated, created_at, updated_at, retired_at
			  FROM declarations WHERE app = $1 ORDER BY type, version`, id)
			if err != nil {
				return err
			}
			if d.Declarations, err = pgx.CollectRows(rows, pgx.RowToStructByName[Declaration]); err != nil {
				return err
			}
			rows, err = tx.Query(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions
				WHERE app = $1 ORDER BY id`, id)
			if err != nil {
				return err
			}
			d.Subscriptions, err = pgx.CollectRows(rows, pgx.RowToStructByName[Subscription])
			return err
		})
	if err != nil {
		return AppDetail{}, fmt.Errorf("get app %s: %w", id, err)
	}
	return d, nil
}

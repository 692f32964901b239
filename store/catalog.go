package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CatalogEntry is one declared event type at one version with the
// subscriptions to it.
type CatalogEntry struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	App     string `json:"app"`
	Subject string `json:"subject"`
	Title   string `json:"title,omitempty"`
	// Description is the manifest's description of the event.
	Description string `json:"description"`
	// DataSchema is the declared JSON Schema of the event's data.
	DataSchema json.RawMessage `json:"dataSchema"`
	// FirstSeen is when the declaration was first applied; changing,
	// retiring and declaring it again keep it.
	FirstSeen time.Time `json:"firstSeen"`
	// Retired is true when the declaring app no longer declares it (or was
	// removed).
	Retired bool `json:"retired"`
	// Place is true for resource-scoped events, which cannot be subscribed to.
	Place bool `json:"place"`
	// Deprecated is true when the manifest marks this version deprecated;
	// Subscribers then shows who still relies on it.
	Deprecated  bool                `json:"deprecated"`
	Subscribers []CatalogSubscriber `json:"subscribers"`
}

// CatalogSubscriber is one subscription in a CatalogEntry.
type CatalogSubscriber struct {
	SubscriptionID string `json:"subscriptionId"`
	App            string `json:"app"`
	State          string `json:"state"`
	Reason         string `json:"reason,omitempty"`
}

// Catalog returns every declaration, retired ones included, ordered by type
// and version, each with all subscriptions to its type and version (cancelled
// ones included, ordered by subscription id). Subscriptions to types nobody
// declares are not listed here; ListSubscriptions shows them.
func (s *Store) Catalog(ctx context.Context) ([]CatalogEntry, error) {
	type row struct {
		Type     string    `db:"type"`
		Version  int       `db:"version"`
		App      string    `db:"app"`
		Subject  string    `db:"subject"`
		Title    string    `db:"title"`
		Desc     string    `db:"description"`
		Schema   []byte    `db:"data_schema"`
		First    time.Time `db:"created_at"`
		Retired  bool      `db:"retired"`
		Place    bool      `db:"place"`
		Deprec   bool      `db:"deprecated"`
		SubID    string    `db:"sub_id"`
		SubApp   string    `db:"sub_app"`
		SubState string    `db:"sub_state"`
		SubWhy   string    `db:"sub_reason"`
	}
	// A declaration counts as retired while its app is removed, whatever
	// retired_at says, since subscriptions cannot use it then either.
	rows, err := s.Pool.Query(ctx, `
		SELECT d.type, d.version, d.app, d.subject, d.title, d.description, d.data_schema, d.created_at,
		       d.retired_at IS NOT NULL OR a.removed_at IS NOT NULL AS retired,
		       d.place IS NOT NULL AND d.place <> 'null'::jsonb AS place, d.deprecated,
		       COALESCE(s.id, '') AS sub_id, COALESCE(s.app, '') AS sub_app,
		       COALESCE(s.state, '') AS sub_state, COALESCE(s.reason, '') AS sub_reason
		  FROM declarations d
		  JOIN apps a ON a.id = d.app
		  LEFT JOIN subscriptions s ON s.type = d.type AND s.version = d.version
		 ORDER BY d.type, d.version, s.id`)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	flat, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	out := []CatalogEntry{}
	for _, r := range flat {
		if n := len(out); n == 0 || out[n-1].Type != r.Type || out[n-1].Version != r.Version {
			out = append(out, CatalogEntry{
				Type: r.Type, Version: r.Version, App: r.App, Subject: r.Subject, Title: r.Title,
				Description: r.Desc, DataSchema: json.RawMessage(r.Schema), FirstSeen: r.First,
				Retired: r.Retired, Place: r.Place, Deprecated: r.Deprec, Subscribers: []CatalogSubscriber{},
			})
		}
		if r.SubID != "" {
			e := &out[len(out)-1]
			e.Subscribers = append(e.Subscribers, CatalogSubscriber{
				SubscriptionID: r.SubID, App: r.SubApp, State: r.SubState, Reason: r.SubWhy,
			})
		}
	}
	return out, nil
}

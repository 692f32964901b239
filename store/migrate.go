package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered SQL file.
type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		body, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// Migrate applies every embedded migration not yet recorded in
// herald_migrations. It holds a transaction-scoped advisory lock keyed on the
// current schema, so several processes may migrate at once: the first applies,
// the others wait and then find nothing to do. It returns the versions applied.
//
// This lock stays advisory, unlike Herald's other locks (rows of its own
// tables, which only its roles may lock): it is taken before any table
// exists. A foreign role holding it can delay a migration, never the
// relay, a publisher or an apply.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	return s.migrate(ctx, 0)
}

// migrate is Migrate of the migrations up to version last, or of all when
// last is 0 (tests start from an older schema with it).
func (s *Store) migrate(ctx context.Context, last int) ([]int, error) {
	migs, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	var applied []int
	err = s.WithTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx,
			`SELECT pg_advisory_xact_lock(hashtext('herald.migrate:' || current_schema()))`); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		// The runtime role may not create tables, even with IF NOT
		// EXISTS: it only looks, and migrates nothing when nothing is due.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('herald_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return fmt.Errorf("look for the migrations table: %w", err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, `CREATE TABLE herald_migrations (
				version    integer PRIMARY KEY,
				name       text NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return ownerHint(fmt.Errorf("create migrations table: %w", err))
			}
		}
		done := map[int]bool{}
		rows, err := tx.Query(ctx, `SELECT version FROM herald_migrations`)
		if err != nil {
			return err
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		for _, v := range versions {
			done[int(v)] = true
		}
		for _, m := range migs {
			if done[m.version] || (last > 0 && m.version > last) {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return ownerHint(fmt.Errorf("apply migration %s: %w", m.name, err))
			}
			if _, err := tx.Exec(ctx, `INSERT INTO herald_migrations (version, name) VALUES ($1, $2)`,
				m.version, m.name); err != nil {
				return fmt.Errorf("record migration %s: %w", m.name, err)
			}
			applied = append(applied, m.version)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return applied, nil
}

// ownerHint adds to a permission error what to do about it: the runtime
// role cannot migrate.
func ownerHint(err error) error {
	var pgErr *pgconn.PgError
	// insufficient_privilege, or no schema usable for creating in.
	if errors.As(err, &pgErr) && (pgErr.Code == "42501" || pgErr.Code == "3F000") {
		return fmt.Errorf("%w (migrations need the role that owns Herald's tables: run `starter migrate` "+
			"with HERALD_OWNER_DATABASE_URL set to that role's URL)", err)
	}
	return err
}

// Package store is Herald's one place for SQL: the PostgreSQL connection pool,
// the embedded migrations and every query on declarations, subscriptions,
// events and the audit trail.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// Store wraps a pgx pool. It is safe for concurrent use.
type Store struct {
	Pool *pgxpool.Pool

	// wake sends the relay's wake-ups after publishes (wake.go).
	wake wake

	// stripes remembers whether the coarse key stripes are retired
	// (keystripes.go).
	stripes stripeScheme
}

// Options tune the connection pool.
type Options struct {
	// MaxConns caps the pool; zero keeps pgx's default (max(4, cores)).
	MaxConns int32
}

// Open connects to the database at url (a PostgreSQL URL or DSN) and checks
// the connection.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return &Store{Pool: pool}, nil
}

// Close releases every connection.
func (s *Store) Close() {
	s.closeWake()
	s.Pool.Close()
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.Pool.Ping(ctx) }

// WithTx runs fn in a transaction, committing when fn returns nil and rolling
// back otherwise.
func (s *Store) WithTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.Pool, fn)
}

// Querier is what both a pool and a transaction offer, so a query helper can
// run inside or outside a caller's transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

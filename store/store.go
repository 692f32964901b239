// Package store is Herald's one place for SQL: the PostgreSQL connection pool,
// the embedded migrations and every query on declarations, subscriptions,
// events and the audit trail.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

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
	// MinConns are opened before Open returns and kept open (up to the
	// pool's size); zero: connections are opened as they are needed.
	MinConns int32
	// LockTimeout, when positive, is the pool's sessions' lock_timeout:
	// a statement that waits longer than this for a lock (a row another
	// transaction holds, a key's stripe row) fails with SQLSTATE 55P03
	// (IsLockTimeout) instead of holding its connection for as long as
	// the lock's holder likes. It is set once per connection, as it
	// opens, so statements pay nothing for it.
	LockTimeout time.Duration
}

// LifetimeJitterShare: a connection's lifetime (pgx's pool_max_conn_lifetime,
// an hour unless the URL says) is lengthened by a random part of at most
// 1/LifetimeJitterShare of it, unless the URL sets
// pool_max_conn_lifetime_jitter.
const LifetimeJitterShare = 4

// Open connects to the database at url (a PostgreSQL URL or DSN) and checks
// the connection; with Options.MinConns it returns once that many are open.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.MinConns > 0 {
		// The pool never closes an idle connection below MinConns, and
		// opens one again in the background when one reaches its lifetime.
		cfg.MinConns = min(opts.MinConns, cfg.MaxConns)
	}
	if !setsLifetimeJitter(url) {
		// Connections opened together (MinConns, or a burst's) would reach
		// their lifetime together, and the pool would close them all in one
		// health check and open them again at once, every lifetime.
		cfg.MaxConnLifetimeJitter = cfg.MaxConnLifetime / LifetimeJitterShare
	}
	if opts.LockTimeout > 0 {
		// A SET when the connection opens rather than a startup
		// parameter: a pooler in session mode (PgBouncer) refuses, or
		// with ignore_startup_parameters silently drops, parameters it
		// does not know.
		set := fmt.Sprintf("SET lock_timeout = %d", max(1, opts.LockTimeout.Milliseconds()))
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, set); err != nil {
				return fmt.Errorf("set lock_timeout: %w", err)
			}
			return nil
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := openConns(ctx, pool, int(cfg.MinConns)); err != nil {
		pool.Close()
		return nil, err
	}
	return &Store{Pool: pool}, nil
}

// setsLifetimeJitter reports whether the URL (or DSN) url, which
// pgxpool.ParseConfig accepted, sets pool_max_conn_lifetime_jitter: pgx
// keeps a setting it does not know, as the pool's are to it, among the
// connection's parameters, where pgxpool finds it. A value that merely
// contains the name (a password, an application_name) does not.
func setsLifetimeJitter(url string) bool {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return false
	}
	_, ok := cc.RuntimeParams["pool_max_conn_lifetime_jitter"]
	return ok
}

// openConns returns once the pool holds n connections, opening those it
// lacks at once. The pool opens MinConns in the background too, which
// reports no error; holding n at a time here opens the rest, and says why
// one could not be (max_connections reached, a refused password).
func openConns(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if n <= 1 {
		return nil // Ping opened one
	}
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { conns[i], errs[i] = pool.Acquire(ctx) })
	}
	wg.Wait()
	opened := 0
	for _, c := range conns {
		if c != nil {
			c.Release()
			opened++
		}
	}
	if i := slices.IndexFunc(errs, func(err error) bool { return err != nil }); i >= 0 {
		return fmt.Errorf("open %d connections to the database (opened %d): %w", n, opened, errs[i])
	}
	return nil
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

// IsLockTimeout reports whether err is a statement's giving up on a lock
// after lock_timeout (SQLSTATE 55P03, lock_not_available; also what NOWAIT
// answers): nothing it would have written is written, and the same
// statement may succeed once the lock's holder ends.
func IsLockTimeout(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "55P03"
}

// Querier is what both a pool and a transaction offer, so a query helper can
// run inside or outside a caller's transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

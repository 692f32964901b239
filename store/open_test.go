package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"herald/internal/testenv"
	"herald/store"
)

// TestOpenOpensMinConnsFirst: with MinConns, Open returns once the pool
// holds that many connections (a worker's first burst finds them open);
// without, it holds the one Ping opened. A role that may not open them all
// fails Open, saying so, rather than leaving a worker running short.
func TestOpenOpensMinConnsFirst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ownerURL := testenv.NewSchema(t)
	role, roleURL := testenv.LoginRole(t, ownerURL, "herald_open_")
	owner, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(context.Background())
	backends := func() int {
		t.Helper()
		var n int
		if err := owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitNone := func() {
		t.Helper()
		for backends() > 0 {
			if ctx.Err() != nil {
				t.Fatal("the closed pool's backends did not end")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	for _, tc := range []struct {
		opts store.Options
		want int
	}{
		{store.Options{MaxConns: 4, MinConns: 4}, 4},
		{store.Options{MaxConns: 4, MinConns: 9}, 4}, // never more than the pool's size
		{store.Options{MaxConns: 4}, 1},
	} {
		s, err := store.Open(ctx, roleURL, tc.opts)
		if err != nil {
			t.Fatalf("%+v: %v", tc.opts, err)
		}
		// No wait: Open returned once they were open.
		if got, total := backends(), s.Pool.Stat().TotalConns(); got != tc.want || total != int32(tc.want) {
			t.Errorf("%+v: %d backends, pool holds %d, right after Open; want %d", tc.opts, got, total, tc.want)
		}
		s.Close()
		waitNone()
	}

	if _, err := owner.Exec(ctx, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" CONNECTION LIMIT 3"); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, roleURL, store.Options{MaxConns: 5, MinConns: 5})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded with 5 connections for a role limited to 3")
	}
	// The pool opens MinConns in the background from the start too, so
	// Ping's connection may be the one refused.
	if msg := err.Error(); !strings.Contains(msg, "open 5 connections to the database") && !strings.HasPrefix(msg, "connect to database") ||
		!strings.Contains(msg, "too many connections") {
		t.Errorf("error %q: want it to say it could not connect, and PostgreSQL's reason", msg)
	}
	waitNone() // the failed Open closed what it had opened
}

// TestOpenSpreadsLifetimes: connections opened together are not closed
// together an hour on. Unless the URL chooses, each lifetime is lengthened
// by a random part of at most a quarter of it; a URL's
// pool_max_conn_lifetime_jitter, even 0s, is kept, and only a setting of
// it counts.
func TestOpenSpreadsLifetimes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.NewSchema(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		params           string
		lifetime, jitter time.Duration
	}{
		{"", time.Hour, 15 * time.Minute},
		{"pool_max_conn_lifetime=40m", 40 * time.Minute, 10 * time.Minute},
		{"pool_max_conn_lifetime_jitter=7s", time.Hour, 7 * time.Second},
		{"pool_max_conn_lifetime_jitter=0s", time.Hour, 0},
		// The name in a value is no setting of it.
		{"application_name=pool_max_conn_lifetime_jitter", time.Hour, 15 * time.Minute},
	} {
		u := url
		if tc.params != "" {
			u += sep + tc.params
		}
		s, err := store.Open(ctx, u, store.Options{MaxConns: 2, MinConns: 2})
		if err != nil {
			t.Fatalf("%q: %v", tc.params, err)
		}
		cfg := s.Pool.Config()
		s.Close()
		if cfg.MaxConnLifetime != tc.lifetime || cfg.MaxConnLifetimeJitter != tc.jitter {
			t.Errorf("%q: lifetime %v, jitter %v; want %v, %v", tc.params, cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter, tc.lifetime, tc.jitter)
		}
	}
}

// TestOpenSetsLockTimeout: with LockTimeout every connection of the pool
// waits at most that long for a lock, and a statement that gives up is
// IsLockTimeout; without, the server's setting stays.
func TestOpenSetsLockTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.NewSchema(t)
	plain, err := store.Open(ctx, url, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	bounded, err := store.Open(ctx, url, store.Options{MaxConns: 2, MinConns: 2, LockTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer bounded.Close()
	var def string
	if err := plain.Pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&def); err != nil || def != "0" {
		t.Fatalf("without LockTimeout: lock_timeout %q, %v; want the server's 0", def, err)
	}
	// Both connections of the bounded pool, each opened with the setting.
	conns := make([]*pgxpool.Conn, 2)
	for i := range conns {
		if conns[i], err = bounded.Pool.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := conns[i].QueryRow(ctx, `SHOW lock_timeout`).Scan(&got); err != nil || got != "150ms" {
			t.Fatalf("connection %d: lock_timeout %q, %v; want 150ms", i, got, err)
		}
	}
	for _, c := range conns {
		c.Release()
	}

	if _, err := plain.Pool.Exec(ctx, `CREATE TABLE lock_probe (id int PRIMARY KEY); INSERT INTO lock_probe VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	tx, err := plain.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM lock_probe WHERE id = 1 FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = bounded.Pool.Exec(ctx, `UPDATE lock_probe SET id = id WHERE id = 1`)
	if !store.IsLockTimeout(err) {
		t.Fatalf("a row another transaction holds: %v, want a lock timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("gave up after %v", took)
	}
	if store.IsLockTimeout(context.DeadlineExceeded) {
		t.Fatal("any error is a lock timeout")
	}
}

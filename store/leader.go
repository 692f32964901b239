package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LeaderLeaseTTL is how long the relay's leader lease lasts unless renewed.
// A leader whose connection is gone (a crash, pg_terminate_backend) is
// replaced at once; one whose connection lingers (a network partition, a
// frozen host) is replaced when its lease expires, and stops dispatching
// before that.
const LeaderLeaseTTL = 15 * time.Second

// Leader is the single leader lock of the relays before partitions
// (migration 0029; docs/design.md#relay-partitions): the row of
// relay_lease, which names
// its holder, the backend of the holder's connection and when the lease
// expires. Only Herald's roles may update it, unlike an advisory lock,
// which any role that can log in may take. The holder keeps a connection
// of its own that renews the lease every third of its TTL and listens on
// NotifyChannel; another relay takes the lease once it expired, was given
// back, or that connection's backend is gone (pg_stat_activity), so a
// crashed leader is replaced as soon as PostgreSQL sees its connection
// close.
type Leader struct {
	conn   *pgxpool.Conn
	holder string
	ttl    time.Duration

	wake chan struct{} // a notification arrived (capacity 1)
	lost chan struct{} // closed when the lease is lost
	stop context.CancelFunc
	done chan struct{} // closed when the renewing goroutine ended

	mu    sync.Mutex
	err   error     // why the lease was lost
	valid time.Time // the lease is held at least until then (local clock)
}

// TryLead takes the relay's leader lease, as a relay of a release before
// partitions does. It returns nil and no error when another relay, or a
// member of the partitioned relays (Member), holds it; the caller then
// keeps no connection. The relay of this release uses JoinRelay; TryLead
// stays to show that the two never lead together.
func (s *Store) TryLead(ctx context.Context) (*Leader, error) {
	return s.tryLead(ctx, LeaderLeaseTTL)
}

// takeLease takes the lease for holder on the calling connection when it is
// free: given back, expired, or its holder's backend gone. A holder's
// backend_start shows only to roles that may see its session; unseen, a
// live pid counts as the holder's.
const takeLease = `
	UPDATE relay_lease AS l
	   SET holder = $1, holder_pid = pg_backend_pid(),
	       holder_started = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()),
	       expires_at = now() + make_interval(secs => $2)
	 WHERE l.holder IS NULL OR l.expires_at < now()
	    OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a
	                    WHERE a.pid = l.holder_pid
	                      AND (a.backend_start IS NULL OR a.backend_start = l.holder_started))
	RETURNING true`

func (s *Store) tryLead(ctx context.Context, ttl time.Duration) (*Leader, error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire the relay's connection: %w", err)
	}
	holder := uuid.NewString()
	sent := time.Now()
	var got bool
	err = conn.QueryRow(ctx, takeLease, holder, ttl.Seconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		conn.Release() // a standby keeps no connection of its own
		return nil, nil
	}
	if err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("take the relay lock: %w", err)
	}
	if _, old, err := oldLeaderRuns(ctx, conn); err != nil || old {
		(&Leader{conn: conn, holder: holder}).giveBack()
		if err != nil {
			return nil, fmt.Errorf("take the relay lock: %w", err)
		}
		return nil, nil
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		(&Leader{conn: conn, holder: holder}).giveBack()
		return nil, fmt.Errorf("listen on %s: %w", NotifyChannel, err)
	}
	rctx, stop := context.WithCancel(context.Background())
	l := &Leader{conn: conn, holder: holder, ttl: ttl, wake: make(chan struct{}, 1), lost: make(chan struct{}),
		stop: stop, done: make(chan struct{}), valid: sent.Add(validFor(ttl))}
	go l.keep(rctx)
	return l, nil
}

// oldRelayLockKey is the advisory lock that was the relay's leader lock
// before migration 0014 (one per schema). A leader takes it too, on its
// lease's connection, so that a worker of an earlier release, rolled
// beside this one, stands by instead of leading beside it.
const oldRelayLockKey = `hashtext('herald.relay:' || current_schema())::bigint`

// leaseApplicationName names the sessions of leaders that hold the lease,
// so that a later one tells them from leaders of an earlier release.
const leaseApplicationName = "herald relay lease"

// oldLeaderRuns takes the old advisory leader lock on conn, and reports
// whether it got it and whether a worker of an earlier release leads: a
// session of Herald's own role (current_user) that is no lease holder's
// holds that lock. A session
// of another role holding it is ignored: any role may take an advisory
// lock, which is why the lease replaced it. Remove once no release before
// 0014 can run.
func oldLeaderRuns(ctx context.Context, conn *pgxpool.Conn) (got, old bool, err error) {
	if _, err := conn.Exec(ctx, `SELECT set_config('application_name', $1, false)`, leaseApplicationName); err != nil {
		return false, false, fmt.Errorf("name the relay lease's session: %w", err)
	}
	err = conn.QueryRow(ctx, `
		WITH k AS (SELECT `+oldRelayLockKey+` AS key),
		     t AS (SELECT pg_try_advisory_lock(key) AS got FROM k)
		SELECT t.got, NOT t.got AND EXISTS (
			SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid, k
			 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			   AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
			   AND a.usename = current_user AND a.application_name IS DISTINCT FROM $1)
		  FROM t`, leaseApplicationName).Scan(&got, &old)
	if err != nil {
		return false, false, fmt.Errorf("look for a leader of an earlier release: %w", err)
	}
	return got, old, nil
}

// validFor is how long after sending a renewal the leader trusts its lease:
// two thirds of the TTL, so that it stops before the lease, renewed at the
// server's later clock, can expire for others.
func validFor(ttl time.Duration) time.Duration { return ttl * 2 / 3 }

// keep owns the lease's connection: it waits for notifications and renews
// the lease every third of its TTL, until ctx ends or the lease is lost.
func (l *Leader) keep(ctx context.Context) {
	defer close(l.done)
	next := time.Now().Add(l.ttl / 3)
	for {
		wctx, cancel := context.WithDeadline(ctx, next)
		_, err := l.conn.Conn().WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			select {
			case l.wake <- struct{}{}:
			default:
			}
			continue
		case !errors.Is(err, context.DeadlineExceeded):
			l.lose(fmt.Errorf("the relay lock's connection failed: %w", err))
			return
		}
		if err := l.renew(ctx); err != nil {
			if ctx.Err() == nil {
				l.lose(err)
			}
			return
		}
		next = time.Now().Add(l.ttl / 3)
	}
}

// renew extends the lease, bounded by the time the leader still trusts it.
func (l *Leader) renew(ctx context.Context) error {
	l.mu.Lock()
	valid := l.valid
	l.mu.Unlock()
	rctx, cancel := context.WithDeadline(ctx, valid)
	defer cancel()
	sent := time.Now()
	var ok bool
	err := l.conn.QueryRow(rctx, `
		UPDATE relay_lease SET expires_at = now() + make_interval(secs => $2)
		 WHERE holder = $1 AND holder_pid = pg_backend_pid()
		RETURNING true`, l.holder, l.ttl.Seconds()).Scan(&ok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errors.New("the relay lock is no longer this leader's: another relay holds it or it was given back")
	case err != nil:
		return fmt.Errorf("renew the relay lock: %w", err)
	}
	l.mu.Lock()
	l.valid = sent.Add(validFor(l.ttl))
	l.mu.Unlock()
	return nil
}

// lose records why the lease was lost and wakes whoever waits on it.
func (l *Leader) lose(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	close(l.lost)
}

// Lost is closed when the lease is lost: its renewal failed, its
// connection failed, or the time the leader trusts it passed. A leader
// must stop dispatching then; Context gives a context that ends with it.
func (l *Leader) Lost() <-chan struct{} { return l.lost }

// Context returns a context that ends with ctx or when the lease is lost
// (renewals stopped, for whatever reason, before it can expire for
// others), for the work that only the leader may do.
func (l *Leader) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-l.lost:
			cancel(l.Check(context.Background()))
		case <-lctx.Done():
		}
	}()
	return lctx, func() { cancel(context.Canceled) }
}

// WaitForEvents returns when an event was published (a notification
// arrived) or after at most d. An error means the lease was lost.
func (l *Leader) WaitForEvents(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.wake:
	case <-t.C:
	case <-ctx.Done():
		return nil
	case <-l.lost:
	}
	return l.Check(ctx)
}

// Check reports an error unless the lease is still held: renewed in time
// on a connection that still answers. PostgreSQL ends a backend at
// pg_terminate_backend, idle_session_timeout, a restart or a proxy
// dropping the connection, and another relay may take the lease then; a
// leader that only noticed between rounds would keep dispatching beside
// the new one for as long as its backlog lasted, so every round checks.
func (l *Leader) Check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.err != nil:
		return l.err
	case time.Now().After(l.valid):
		return errors.New("the relay lock was not renewed in time")
	}
	return nil
}

// Release gives the lease back, so that another relay may lead at once,
// and closes its connection, which holds a LISTEN and must never go back
// to the pool.
func (l *Leader) Release() {
	l.stop()
	<-l.done
	l.giveBack()
}

// giveBack frees the lease if it is still this leader's and closes the
// connection.
func (l *Leader) giveBack() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, `UPDATE relay_lease SET holder = NULL, holder_pid = NULL, holder_started = NULL,
		expires_at = '-infinity' WHERE holder = $1`, l.holder)
	closeConn(l.conn)
}

func closeConn(c *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Conn().Close(ctx)
	c.Release()
}

// IsNoSchema reports whether err says Herald's tables do not exist in the
// database (or schema) it talked to: nothing was migrated there yet.
func IsNoSchema(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01" // undefined_table
}

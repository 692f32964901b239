package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Leader is the relay's leader lock: a session-level advisory lock, one per
// schema, held on a connection of its own that also listens on
// NotifyChannel. The lock dies with the connection, so a crashed leader
// frees it at once.
type Leader struct {
	conn *pgxpool.Conn
}

// relayLockKey is the SQL expression of the relay lock's advisory key, one
// per schema; TryLead takes it and Check looks for it.
const relayLockKey = `hashtext('herald.relay:' || current_schema())::bigint`

// TryLead takes the relay's leader lock. It returns nil and no error when
// another process holds it; the caller then keeps no connection.
func (s *Store) TryLead(ctx context.Context) (*Leader, error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire the relay's connection: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx,
		`SELECT pg_try_advisory_lock(`+relayLockKey+`)`).Scan(&got); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("take the relay lock: %w", err)
	}
	if !got {
		conn.Release() // a standby keeps no connection of its own
		return nil, nil
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("listen on %s: %w", NotifyChannel, err)
	}
	return &Leader{conn: conn}, nil
}

// WaitForEvents returns when an event was published (a notification
// arrived) or after at most d. An error means the connection failed, and
// with it the lock.
func (l *Leader) WaitForEvents(ctx context.Context, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := l.conn.Conn().WaitForNotification(wctx)
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("wait for notification: %w", err)
	}
	return nil
}

// leaderCheckTimeout bounds Check: a lock connection that does not answer
// within it is taken for lost.
const leaderCheckTimeout = 5 * time.Second

// Check reports an error unless the lock's connection answers and its
// session still holds the relay lock. PostgreSQL frees a session lock the
// moment its backend ends (pg_terminate_backend, idle_session_timeout, a
// restart, a proxy dropping the connection), and another relay may take it
// then; a leader that only noticed while waiting for notifications would
// keep dispatching beside the new one for as long as its backlog lasted.
func (l *Leader) Check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, leaderCheckTimeout)
	defer cancel()
	// A bigint advisory key shows in pg_locks as its high and low 32 bits
	// (classid, objid) with objsubid 1.
	var held bool
	err := l.conn.QueryRow(cctx, `
		WITH k AS (SELECT `+relayLockKey+` AS key)
		SELECT EXISTS (
			SELECT 1 FROM pg_locks, k
			 WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND objsubid = 1
			   AND classid = ((key >> 32) & 4294967295)::oid AND objid = (key & 4294967295)::oid)`).Scan(&held)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("check the relay lock's connection: %w", err)
	}
	if !held {
		return errors.New("the relay lock's session no longer holds the lock")
	}
	return nil
}

// Release gives the lock up by closing its connection: a connection holding
// a session lock must never go back to the pool.
func (l *Leader) Release() { closeConn(l.conn) }

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

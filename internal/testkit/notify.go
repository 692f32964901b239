package testkit

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PIDs are the backend process ids of pool's idle connections: call it once
// the connections that should have sent a notification are back in the pool.
// A NOTIFY channel is database-wide, so tests running at the same time in
// other schemas notify on it too; only these backends' notifications count.
func PIDs(ctx context.Context, pool *pgxpool.Pool) map[uint32]bool {
	own := map[uint32]bool{}
	for _, c := range pool.AcquireAllIdle(ctx) {
		own[c.Conn().PgConn().PID()] = true
		c.Release()
	}
	return own
}

// WaitNotification waits until listener receives a notification sent by one
// of the backends in from, skipping any other; it returns ctx's error when
// none comes.
func WaitNotification(ctx context.Context, listener *pgx.Conn, from map[uint32]bool) (*pgconn.Notification, error) {
	for {
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			return nil, err
		}
		if from[n.PID] {
			return n, nil
		}
	}
}

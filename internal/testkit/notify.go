package testkit

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

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

// WaitWakeUp waits until listener receives a relay wake-up of the given
// schema (store.WakeRelay's payload), skipping any other; it returns ctx's
// error when none comes.
func WaitWakeUp(ctx context.Context, listener *pgx.Conn, schema string) (*pgconn.Notification, error) {
	for {
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			return nil, err
		}
		if n.Payload == schema {
			return n, nil
		}
	}
}

// Schema is the current schema of pool's connections.
func Schema(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var schema string
	err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema)
	return schema, err
}

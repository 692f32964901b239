package store

import "github.com/jackc/pgx/v5/pgxpool"

// LeaderConn is the connection that holds l's lock, for tests that act on
// that session.
func LeaderConn(l *Leader) *pgxpool.Conn { return l.conn }

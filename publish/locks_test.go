package publish_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/publish"
)

// TestPublishTxManyKeysTakesBoundedLocks: one transaction publishes 100,000
// distinct subject keys. It used to take an advisory lock per key and so
// exhaust PostgreSQL's shared lock table (`out of shared memory`), which
// broke every other session's publishes and new connections. The key locks
// are now a bounded number of stripe rows per type, so the transaction
// holds a handful of locks, and other apps' publishes and new connections
// go through while it is open.
func TestPublishTxManyKeysTakesBoundedLocks(t *testing.T) {
	// Serial: the lock table is the whole server's.
	e := newEnv(t)
	p := e.publisher(publish.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const keys = 100000
	rs := make([]publish.Request, keys)
	for i := range rs {
		rs[i] = publish.Request{App: "contacts", Type: "contacts.blob.stored", Version: 1,
			Subject: fmt.Sprintf("blob-%d", i), Data: []byte(`{}`)}
	}
	tx, err := e.store.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	started := time.Now()
	res, err := p.PublishTx(ctx, tx, rs...)
	if err != nil {
		t.Fatalf("publish %d keys in one transaction: %v", keys, err)
	}
	t.Logf("PublishTx of %d keys took %v", keys, time.Since(started))
	if len(res) != keys {
		t.Fatalf("%d results, want %d", len(res), keys)
	}

	// The open transaction holds a bounded number of locks, whatever the
	// number of its keys.
	var held int
	if err := e.store.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1`,
		tx.Conn().PgConn().PID()).Scan(&held); err != nil {
		t.Fatal(err)
	}
	t.Logf("the open transaction holds %d locks", held)
	if held > 64 {
		t.Errorf("the publishing transaction holds %d locks, want a bounded few", held)
	}

	// Meanwhile other apps publish, and new sessions connect.
	for i := 0; i < 20; i++ {
		pctx, stop := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.Publish(pctx, publish.Request{App: "billing", Type: "billing.invoice.paid", Version: 1,
			Subject: fmt.Sprintf("invoice-%d", i), Data: []byte(`{}`)})
		stop()
		if err != nil {
			t.Fatalf("another app's publish %d while the big transaction is open: %v", i, err)
		}
	}
	cctx, stop := context.WithTimeout(ctx, 5*time.Second)
	conn, err := pgx.Connect(cctx, e.url)
	stop()
	if err != nil {
		t.Fatalf("a new connection while the big transaction is open: %v", err)
	}
	_ = conn.Close(ctx)

	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit %d keys: %v", keys, err)
	}
	if n := e.countRows(`SELECT count(*) FROM events WHERE type = 'contacts.blob.stored'`); n != keys {
		t.Errorf("%d events committed, want %d", n, keys)
	}
	if n := e.count("accepted"); n != keys+20 {
		t.Errorf("%d accepted events, want %d", n, keys+20)
	}
}

package relay_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"herald/internal/testkit"
	"herald/publish"
	"herald/relay"
	"herald/store"
	"herald/workflows"
)

// TestStuckRoundDoesNotHoldOthers: rounds take turns to write their
// outcome rows (Relay.RecordParallel), and a round stuck writing (its
// INSERT waiting on a lock) keeps the turn; the rounds of other partitions
// still write and signal, once their wait for the turn runs out. It fails
// when a round waits for its turn without bound.
func TestStuckRoundDoesNotHoldOthers(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	const sub = "crm:contacts.person.deleted@1" // the one subscription to the type
	stuck, other := subjectsInTwoPartitions(t, st.Pool)

	// An open transaction holds the outcome row the stuck key's round will
	// insert, so that round waits on the row's lock while holding its turn.
	id := uuid.NewString()
	tx, err := st.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO outcomes (subscription_id, event_id, event_seq, subject, status)
		VALUES ($1, $2, 0, $3, 'queued')`, sub, id, stuck); err != nil {
		t.Fatal(err)
	}

	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp, PollInterval: 50 * time.Millisecond, RecordParallel: 1}
	rctx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Add(1)
	go func() { defer running.Done(); _ = r.Run(rctx) }()
	defer func() { stop(); running.Wait() }()

	publishOne := func(id, subject string) {
		t.Helper()
		if _, err := p.Publish(ctx, publish.Request{ID: id, App: "contacts", Type: "contacts.person.deleted",
			Version: 1, Subject: subject, Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	publishOne(id, stuck)
	testkit.Eventually(t, 20*time.Second, "the stuck key's round to wait on the outcome row's lock", func() bool {
		var n int
		err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO outcomes%'`).Scan(&n)
		return err == nil && n > 0
	})

	publishOne(uuid.NewString(), other)
	testkit.Eventually(t, 20*time.Second, "the other partition's key to be signalled while the stuck round waits", func() bool {
		return len(tmp.bySeq()[workflows.DeliveryID(sub, other)]) == 1
	})
	if got := tmp.bySeq()[workflows.DeliveryID(sub, stuck)]; len(got) != 0 {
		t.Fatalf("the stuck key was signalled (%v) while its outcome row was locked", got)
	}

	// Once the lock goes, the stuck round writes and signals its key.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the stuck key to be signalled once the lock is gone", func() bool {
		return len(tmp.bySeq()[workflows.DeliveryID(sub, stuck)]) == 1
	})
}

// subjectsInTwoPartitions returns two subjects whose events fall into
// different relay partitions (the database's own partition function).
func subjectsInTwoPartitions(t *testing.T, db store.Querier) (string, string) {
	t.Helper()
	var a, b string
	err := db.QueryRow(context.Background(), `
		SELECT s1, s2 FROM (VALUES ('k1'), ('k2'), ('k3'), ('k4'), ('k5'), ('k6')) AS x(s1)
		  CROSS JOIN (VALUES ('k1'), ('k2'), ('k3'), ('k4'), ('k5'), ('k6')) AS y(s2)
		 WHERE (hashtextextended(s1, 0) & 15) <> (hashtextextended(s2, 0) & 15)
		 ORDER BY s1, s2 LIMIT 1`).Scan(&a, &b)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

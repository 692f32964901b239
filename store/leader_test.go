package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/store"
)

// openLeaderStores opens two stores on one new schema, as two workers.
func openLeaderStores(t *testing.T) (*store.Store, *store.Store) {
	t.Helper()
	ctx := context.Background()
	url := testenv.NewSchema(t)
	open := func() *store.Store {
		s, err := store.Open(ctx, url, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a, b := open(), open()
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestLeaderCheck: Check passes while the leader's lease is its own, and
// fails once another holder has it, though the connection still answers;
// one relay leads at a time.
func TestLeaderCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := openLeaderStores(t)
	// A 3 s lease renews every second and trusts a renewal for 2 s: a
	// renewal may take a second on a loaded machine (with 900 ms, 300 ms
	// was all it had, and one slow one lost the lease for good).
	const ttl = 3 * time.Second
	l, err := a.TryLeadTTL(ctx, ttl)
	if err != nil || l == nil {
		t.Fatalf("lead: %v, %v", l, err)
	}
	defer l.Release()
	if err := l.Check(ctx); err != nil {
		t.Fatalf("check while holding the lease: %v", err)
	}
	if other, err := b.TryLead(ctx); err != nil || other != nil {
		t.Fatalf("a second leader while the first holds the lease: %v, %v", other, err)
	}
	// Renewals keep it: after more than two TTLs it is still held and
	// unexpired.
	time.Sleep(ttl*2 + ttl/3)
	if err := l.Check(ctx); err != nil {
		t.Fatalf("check after renewals: %v", err)
	}
	var live bool
	if err := a.Pool.QueryRow(ctx, `SELECT expires_at > now() FROM relay_lease`).Scan(&live); err != nil || !live {
		t.Fatalf("lease renewed: %v %v", live, err)
	}
	// Someone else has it now (as after an expiry): the next renewal fails.
	if _, err := a.Pool.Exec(ctx, `UPDATE relay_lease SET holder = 'other', expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not notice that its lease is another's")
	}
	if err := l.Check(ctx); err == nil || !strings.Contains(err.Error(), "no longer this leader's") {
		t.Fatalf("check after the lease was taken: %v; want an error", err)
	}
	other, err := b.TryLead(ctx)
	if err != nil || other == nil {
		t.Fatalf("take the expired lease: %v, %v", other, err)
	}
	other.Release()
}

// TestLeaderReplacedWhenItsConnectionEnds: a leader whose connection is
// gone (a crash, pg_terminate_backend) is replaced at once, not when its
// lease expires, and it notices.
func TestLeaderReplacedWhenItsConnectionEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := openLeaderStores(t)
	l, err := a.TryLead(ctx)
	if err != nil || l == nil {
		t.Fatalf("lead: %v, %v", l, err)
	}
	defer l.Release()
	pid := store.LeaderConn(l).Conn().PgConn().PID()
	var ok bool
	if err := b.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate the leader's backend: %v %v", ok, err)
	}
	other, err := b.TryLead(ctx)
	if err != nil || other == nil {
		t.Fatalf("take the lease of a leader whose connection ended: %v, %v", other, err)
	}
	defer other.Release()
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("the old leader did not notice that its connection ended")
	}
	if err := l.Check(ctx); err == nil || !strings.Contains(err.Error(), "relay lock") {
		t.Fatalf("old leader's check: %v; want an error naming the relay lock", err)
	}
	if err := other.Check(ctx); err != nil {
		t.Fatalf("new leader's check: %v", err)
	}
}

// TestLeaderReleaseFreesTheLease: a leader that stops gives the lease back;
// another takes it at once.
func TestLeaderReleaseFreesTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := openLeaderStores(t)
	l, err := a.TryLead(ctx)
	if err != nil || l == nil {
		t.Fatalf("lead: %v, %v", l, err)
	}
	l.Release()
	other, err := b.TryLead(ctx)
	if err != nil || other == nil {
		t.Fatalf("take the given-back lease: %v, %v", other, err)
	}
	other.Release()
}

// TestLeaderThatCannotRenewStopsFirst: a leader whose renewals hang (here
// on a row lock another session holds) counts itself lost before its lease
// expires for others.
func TestLeaderThatCannotRenewStopsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := openLeaderStores(t)
	// The leader counts itself lost 2 s after its last renewal went out,
	// 1 s before the lease expires: the room the test has to see it.
	const ttl = 3 * time.Second
	l, err := a.TryLeadTTL(ctx, ttl)
	if err != nil || l == nil {
		t.Fatalf("lead: %v, %v", l, err)
	}
	defer l.Release()
	tx, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM relay_lease FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("a leader that cannot renew did not stop")
	}
	var remaining time.Duration
	var expires time.Time
	if err := tx.QueryRow(ctx, `SELECT expires_at FROM relay_lease`).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := b.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	remaining = expires.Sub(now)
	if remaining <= 0 {
		t.Fatalf("the leader stopped %v after its lease expired; want before", -remaining)
	}
	if err := l.Check(ctx); err == nil {
		t.Fatal("check passes after the lease was lost")
	}
}

// TestLeaderAndAnEarlierRelease: during a rolling upgrade a worker of an
// earlier release leads with the old advisory lock. A session of Herald's
// own role holding it keeps the new relay standing by; a new leader holds
// it too, so an earlier release's worker cannot lead beside it.
func TestLeaderAndAnEarlierRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := openLeaderStores(t)
	const oldKey = `hashtext('herald.relay:' || current_schema())::bigint`
	old, err := b.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release()
	var got bool
	if err := old.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+oldKey+`)`).Scan(&got); err != nil || !got {
		t.Fatalf("old leader's lock: %v %v", got, err)
	}
	if l, err := a.TryLead(ctx); err != nil || l != nil {
		t.Fatalf("lead beside an earlier release's leader: %v, %v", l, err)
	}
	if _, err := old.Exec(ctx, `SELECT pg_advisory_unlock(`+oldKey+`)`); err != nil {
		t.Fatal(err)
	}
	l, err := a.TryLead(ctx)
	if err != nil || l == nil {
		t.Fatalf("lead once the earlier release's leader stopped: %v, %v", l, err)
	}
	defer l.Release()
	if err := old.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+oldKey+`)`).Scan(&got); err != nil || got {
		t.Fatalf("an earlier release's worker took the old lock beside the new leader: %v %v", got, err)
	}
}

package store_test

import (
	"context"
	"strings"
	"testing"

	"herald/internal/testenv"
	"herald/store"
)

// TestLeaderCheck: Check passes while the leader's session holds the relay
// lock, and fails once it does not, though the connection still answers;
// another process can then take the lock.
func TestLeaderCheck(t *testing.T) {
	t.Parallel()
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
	l, err := a.TryLead(ctx)
	if err != nil || l == nil {
		t.Fatalf("lead: %v, %v", l, err)
	}
	defer l.Release()
	if err := l.Check(ctx); err != nil {
		t.Fatalf("check while holding the lock: %v", err)
	}
	if other, err := b.TryLead(ctx); err != nil || other != nil {
		t.Fatalf("a second leader while the first holds the lock: %v, %v", other, err)
	}
	// Another advisory lock of the session is not the relay's.
	if _, err := store.LeaderConn(l).Exec(ctx, `SELECT pg_advisory_unlock_all(), pg_advisory_lock(42)`); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(ctx); err == nil || !strings.Contains(err.Error(), "no longer holds") {
		t.Fatalf("check after the lock was given up: %v; want an error", err)
	}
	other, err := b.TryLead(ctx)
	if err != nil || other == nil {
		t.Fatalf("take the freed lock: %v, %v", other, err)
	}
	other.Release()
}

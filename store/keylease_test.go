package store_test

import (
	"context"
	"testing"
	"time"
)

// TestKeyLease: one run holds a key's lease at a time; it renews its own,
// gives it back, and another run takes it once it is back or ran out.
func TestKeyLease(t *testing.T) {
	t.Parallel()
	s, _ := outcomeFixture(t)
	ctx := context.Background()
	ok, until, err := s.TakeKeyLease(ctx, billingPersonSub, "p1", "run-a", time.Minute)
	if err != nil || !ok || time.Until(until) < 50*time.Second {
		t.Fatalf("first take: %v until %v, %v", ok, until, err)
	}
	if ok, other, err := s.TakeKeyLease(ctx, billingPersonSub, "p1", "run-b", time.Minute); err != nil || ok || !other.Equal(until) {
		t.Fatalf("another run took a held lease: %v until %v, %v", ok, other, err)
	}
	if ok, _, err := s.TakeKeyLease(ctx, billingPersonSub, "p2", "run-b", time.Minute); err != nil || !ok {
		t.Fatalf("another key's lease: %v, %v", ok, err)
	}
	if ok, _, err := s.TakeKeyLease(ctx, billingPersonSub, "p1", "run-a", 2*time.Minute); err != nil || !ok {
		t.Fatalf("renewal by its holder: %v, %v", ok, err)
	}
	if err := s.ReleaseKeyLease(ctx, billingPersonSub, "p1", "run-b"); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := s.TakeKeyLease(ctx, billingPersonSub, "p1", "run-b", time.Minute); ok {
		t.Fatal("a release by a run that does not hold it gave the lease away")
	}
	if err := s.ReleaseKeyLease(ctx, billingPersonSub, "p1", "run-a"); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.TakeKeyLease(ctx, billingPersonSub, "p1", "run-b", time.Millisecond); err != nil || !ok {
		t.Fatalf("take after release: %v, %v", ok, err)
	}
	time.Sleep(20 * time.Millisecond)
	if ok, _, err := s.TakeKeyLease(ctx, billingPersonSub, "p1", "run-c", time.Minute); err != nil || !ok {
		t.Fatalf("take after the lease ran out: %v, %v", ok, err)
	}
}

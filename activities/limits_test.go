package activities

import (
	"context"
	"sync"
	"testing"
	"time"

	"herald/store"
)

// limitStore answers acquires from a script and records releases; the
// other Store methods are not used by waitTurn.
type limitStore struct {
	Store
	mu       sync.Mutex
	grants   []store.Grant // answered in turn; the last one repeats
	acquires int
	released []string
}

func (s *limitStore) AcquireDelivery(context.Context, string, time.Duration, time.Duration) (store.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grants[min(s.acquires, len(s.grants)-1)]
	s.acquires++
	return g, nil
}

func (s *limitStore) ReleaseDelivery(_ context.Context, _, lease string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, lease)
	return nil
}

func TestWaitTurnSleepsForAReservedToken(t *testing.T) {
	// Serial: measures how long a wait takes (a bound in ms).
	st := &limitStore{grants: []store.Grant{{Granted: true, Wait: 80 * time.Millisecond, Lease: "l1"}}}
	a := &Activities{Store: st}
	start := time.Now()
	lease, turn, err := a.waitTurn(context.Background(), "billing", time.Second, time.Second, 0)
	if err != nil || turn != turnGranted || lease != "l1" {
		t.Fatalf("waitTurn = %q, %v, %v", lease, turn, err)
	}
	if took := time.Since(start); took < 80*time.Millisecond {
		t.Errorf("returned after %v, before the reserved token's time", took)
	}
	if st.acquires != 1 || len(st.released) != 0 {
		t.Errorf("%d acquires, released %v", st.acquires, st.released)
	}
}

func TestWaitTurnPollsAFullAllowance(t *testing.T) {
	// Serial: measures how long a wait takes (a bound in ms).
	st := &limitStore{grants: []store.Grant{{AtCapacity: true}, {AtCapacity: true}, {Granted: true, Lease: "l2"}}}
	a := &Activities{Store: st}
	lease, turn, err := a.waitTurn(context.Background(), "billing", time.Second, 5*time.Second, 0)
	if err != nil || turn != turnGranted || lease != "l2" || st.acquires != 3 {
		t.Fatalf("waitTurn = %q, %v, %v after %d acquires", lease, turn, err, st.acquires)
	}
	// Never granted: gives up at the budget.
	st = &limitStore{grants: []store.Grant{{AtCapacity: true}}}
	a = &Activities{Store: st}
	start := time.Now()
	_, turn, _ = a.waitTurn(context.Background(), "billing", time.Second, 300*time.Millisecond, 0)
	if took := time.Since(start); turn != turnTooLate || took < 300*time.Millisecond || took > 2*time.Second {
		t.Fatalf("at capacity throughout: %v after %v, want too late after the 300ms budget", turn, took)
	}
}

// TestWaitTurnTooLateTakesNothing: a token further off than the budget is
// not taken; the wait spends its budget (asked once) and ends too late, so a
// rate-limited key asks again once per budget, not in a tight loop.
func TestWaitTurnTooLateTakesNothing(t *testing.T) {
	// Serial: measures how long a wait takes (a bound in ms).
	st := &limitStore{grants: []store.Grant{{Wait: time.Minute}}}
	a := &Activities{Store: st}
	const budget = 300 * time.Millisecond
	start := time.Now()
	_, turn, _ := a.waitTurn(context.Background(), "billing", time.Second, budget, 0)
	if took := time.Since(start); turn != turnTooLate || st.acquires != 1 || took < budget-20*time.Millisecond {
		t.Fatalf("token a minute off: %v after %d acquires in %v, want too late after one acquire and the %v budget", turn, st.acquires, took, budget)
	}
}

func TestWaitTurnCancelledReleases(t *testing.T) {
	t.Parallel()
	st := &limitStore{grants: []store.Grant{{Granted: true, Wait: 5 * time.Second, Lease: "l3"}}}
	a := &Activities{Store: st}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, turn, err := a.waitTurn(ctx, "billing", time.Second, 10*time.Second, 0)
	if turn != turnCancelled || err == nil {
		t.Fatalf("cancelled wait = %v, %v", turn, err)
	}
	if len(st.released) != 1 || st.released[0] != "l3" {
		t.Errorf("released %v, want the lease l3", st.released)
	}
}

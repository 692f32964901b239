package activities

import (
	"context"
	"slices"
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
	returned []string
	limits   *store.Limits // the apps' current limits (AppLimits)
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

func (s *limitStore) ReturnDelivery(_ context.Context, _, lease string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.returned = append(s.returned, lease)
	return nil
}

// AppLimits answers limits for every app asked about (none when unset).
func (s *limitStore) AppLimits(_ context.Context, apps []string) (map[string]store.Limits, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]store.Limits{}
	if s.limits != nil {
		for _, app := range apps {
			out[app] = *s.limits
		}
	}
	return out, nil
}

func TestWaitTurnSleepsForAReservedToken(t *testing.T) {
	// Serial: measures how long a wait takes (a bound in ms).
	st := &limitStore{grants: []store.Grant{{Granted: true, Wait: 80 * time.Millisecond, Lease: "l1"}}}
	a := &Activities{Store: st}
	start := time.Now()
	lease, turn, err := a.waitTurn(context.Background(), "billing", store.Limits{}, time.Second, time.Second, 0)
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
	lease, turn, err := a.waitTurn(context.Background(), "billing", store.Limits{}, time.Second, 5*time.Second, 0)
	if err != nil || turn != turnGranted || lease != "l2" || st.acquires != 3 {
		t.Fatalf("waitTurn = %q, %v, %v after %d acquires", lease, turn, err, st.acquires)
	}
	// Never granted: gives up at the budget.
	st = &limitStore{grants: []store.Grant{{AtCapacity: true}}}
	a = &Activities{Store: st}
	start := time.Now()
	_, turn, _ = a.waitTurn(context.Background(), "billing", store.Limits{}, time.Second, 300*time.Millisecond, 0)
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
	_, turn, _ := a.waitTurn(context.Background(), "billing", store.Limits{}, time.Second, budget, 0)
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
	_, turn, err := a.waitTurn(ctx, "billing", store.Limits{}, time.Second, 10*time.Second, 0)
	if turn != turnCancelled || err == nil {
		t.Fatalf("cancelled wait = %v, %v", turn, err)
	}
	if len(st.released) != 1 || st.released[0] != "l3" {
		t.Errorf("released %v, want the lease l3", st.released)
	}
}

// TestWaitTurnRaisedAsksAgain: a wait under a rate that is raised meanwhile
// does not sleep out the turn it reserved under the old rate, nor the
// budget when it could reserve none: within about a second (limitWatch) it
// gives the reserved turn back and asks again under the new rate.
func TestWaitTurnRaisedAsksAgain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		first store.Grant
	}{
		{"a turn reserved 8 s ahead", store.Grant{Granted: true, Wait: 8 * time.Second, Lease: "old"}},
		{"no turn within the budget", store.Grant{Wait: time.Minute}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := &limitStore{grants: []store.Grant{c.first, {Granted: true, Lease: "new"}},
				limits: &store.Limits{MaxPerSecond: 1000}}
			a := &Activities{Store: st}
			start := time.Now()
			lease, turn, err := a.waitTurn(context.Background(), "billing", store.Limits{MaxPerSecond: 5}, time.Second, 9*time.Second, 0)
			took := time.Since(start)
			if err != nil || turn != turnGranted || lease != "new" || st.acquires != 2 {
				t.Fatalf("waitTurn = %q, %v, %v after %d acquires, want the turn asked for under the raised rate", lease, turn, err, st.acquires)
			}
			if took > 3*time.Second {
				t.Errorf("the raise took effect after %v, want about a second", took)
			}
			if want := []string{"old"}; c.first.Granted && !slices.Equal(st.returned, want) || !c.first.Granted && len(st.returned) != 0 {
				t.Errorf("returned %v, want the reserved turn given back when there was one", st.returned)
			}
		})
	}
}

// TestWaitTurnUnraisedSleepsItsTurn: a rate unchanged or lowered, or only
// the in-flight cap raised (the turn holds its place already), leaves a
// reserved turn as it is: slept for, not given back.
func TestWaitTurnUnraisedSleepsItsTurn(t *testing.T) {
	t.Parallel()
	under := store.Limits{MaxPerSecond: 5, MaxInFlight: 2}
	for _, now := range []store.Limits{{MaxPerSecond: 5, MaxInFlight: 2}, {MaxPerSecond: 2, MaxInFlight: 2}, {MaxPerSecond: 5}} {
		st := &limitStore{grants: []store.Grant{{Granted: true, Wait: 2500 * time.Millisecond, Lease: "l1"}}, limits: &now}
		a := &Activities{Store: st}
		start := time.Now()
		lease, turn, err := a.waitTurn(context.Background(), "billing", under, time.Second, 9*time.Second, 0)
		if err != nil || turn != turnGranted || lease != "l1" || st.acquires != 1 || len(st.returned) != 0 {
			t.Fatalf("limits now %+v: waitTurn = %q, %v, %v after %d acquires, returned %v; want the reserved turn", now, lease, turn, err, st.acquires, st.returned)
		}
		if took := time.Since(start); took < 2500*time.Millisecond {
			t.Fatalf("limits now %+v: granted after %v, before the reserved turn", now, took)
		}
	}
}

package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/manifest"
	"herald/store"
)

// limitedApp applies billing (subscribed to contacts.person.updated@1) with
// the given limits.
func limitedApp(t *testing.T, s *store.Store, l *manifest.Limits) store.ApplyResult {
	t.Helper()
	c := mkManifest("contacts", []manifest.Event{decl("person.updated", 1)})
	mustApply(t, s, c)
	m := mkManifest("billing", nil, subTo("contacts.person.updated", 1))
	m.Limits = l
	return mustApply(t, s, m)
}

// age moves the app's bucket clock back by d, as if d had passed.
func age(t *testing.T, s *store.Store, app string, d time.Duration) {
	t.Helper()
	if _, err := s.Pool.Exec(context.Background(),
		`UPDATE app_limit_state SET refilled_at = refilled_at - make_interval(secs => $2) WHERE app = $1`,
		app, d.Seconds()); err != nil {
		t.Fatal(err)
	}
}

func acquire(t *testing.T, s *store.Store, ttl, maxWait time.Duration) store.Grant {
	t.Helper()
	g, err := s.AcquireDelivery(context.Background(), "billing", ttl, maxWait)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestLimitsAppliedReadWithBatchAndAudited(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	res := limitedApp(t, s, &manifest.Limits{MaxPerSecond: 5, MaxInFlight: 2})
	if !res.LimitsChanged {
		t.Error("first apply with limits: LimitsChanged false")
	}
	b, err := s.DeliveryBatch(ctx, billingPersonSub, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Limits != (store.Limits{MaxPerSecond: 5, MaxInFlight: 2}) {
		t.Fatalf("batch limits %+v", b.Limits)
	}
	rows := auditRows(t, s, store.ActionAppLimitsChanged, "billing")
	if len(rows) != 1 {
		t.Fatalf("%d app.limits_changed rows, want 1", len(rows))
	}
	var meta struct{ From, To store.Limits }
	if err := json.Unmarshal(rows[0].Metadata, &meta); err != nil {
		t.Fatal(err)
	}
	if !meta.From.IsZero() || meta.To != (store.Limits{MaxPerSecond: 5, MaxInFlight: 2}) {
		t.Errorf("audit metadata %s", rows[0].Metadata)
	}
	applied := auditRows(t, s, store.ActionAppApplied, "billing")
	if len(applied) == 0 || !json.Valid(applied[len(applied)-1].Metadata) {
		t.Fatal("no app.applied row")
	}
	var appliedMeta struct {
		Limits        store.Limits
		LimitsChanged bool
	}
	_ = json.Unmarshal(applied[len(applied)-1].Metadata, &appliedMeta)
	if !appliedMeta.LimitsChanged || appliedMeta.Limits.MaxInFlight != 2 {
		t.Errorf("app.applied metadata %s", applied[len(applied)-1].Metadata)
	}

	// The same limits again: unchanged, no new row. Other limits: one row.
	m := mkManifest("billing", nil, subTo("contacts.person.updated", 1))
	m.Limits = &manifest.Limits{MaxPerSecond: 5, MaxInFlight: 2}
	if r := mustApply(t, s, m); !r.Unchanged || r.LimitsChanged {
		t.Errorf("re-apply: %+v", r)
	}
	m.Limits = nil
	if r := mustApply(t, s, m); !r.LimitsChanged {
		t.Errorf("limits removed: %+v", r)
	}
	if rows := auditRows(t, s, store.ActionAppLimitsChanged, "billing"); len(rows) != 2 {
		t.Errorf("%d app.limits_changed rows, want 2", len(rows))
	}
	b, err = s.DeliveryBatch(ctx, billingPersonSub, "", nil)
	if err != nil || !b.Limits.IsZero() {
		t.Errorf("batch limits after removal %+v, %v", b.Limits, err)
	}
	// Without limits every acquire is granted at once and takes nothing.
	for i := 0; i < 20; i++ {
		if g := acquire(t, s, time.Minute, 0); !g.Granted || g.Wait != 0 || g.Lease != "" {
			t.Fatalf("unlimited acquire %d: %+v", i, g)
		}
	}
}

func TestBucketBurstRefillAndReservation(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	limitedApp(t, s, &manifest.Limits{MaxPerSecond: 4})
	// The bucket starts full with one second's worth: four at once.
	start := time.Now()
	for i := 0; i < 4; i++ {
		if g := acquire(t, s, time.Minute, 0); !g.Granted || g.Wait > 10*time.Millisecond {
			t.Fatalf("burst acquire %d: %+v", i, g)
		}
	}
	// The bucket refills while the acquires run (slowly on a loaded machine
	// under -race), 4 tokens a second from the first acquire, which the
	// database saw no earlier than start: the fifth waits 250ms less the
	// time they took. Once they took 240ms or more a token may have come
	// back: a grant is then right too. Each later check that the time
	// since start decides holds only while too little went by for a token
	// to come back; a fifth granted moves every such bound 250ms later
	// (slow).
	g := acquire(t, s, time.Minute, 0)
	elapsed := time.Since(start)
	slow := time.Duration(0)
	if elapsed >= 240*time.Millisecond && g.Granted {
		slow = 250 * time.Millisecond // one token more taken: every bound below is 250ms later
	} else if g.Granted || g.Wait < 240*time.Millisecond-elapsed || g.Wait > 250*time.Millisecond {
		t.Fatalf("fifth acquire without waiting, %v after the first: %+v, want refused with a wait of about 250ms less that", elapsed, g)
	}
	// Willing to wait: granted with the wait, and the next one queues behind:
	// its slot is 250ms after the first's, and its wait that less the time
	// between the two acquires (long on a loaded machine under -race).
	before := time.Now()
	g1 := acquire(t, s, time.Minute, time.Second)
	g2 := acquire(t, s, time.Minute, time.Second)
	between := time.Since(before)
	// Both wait for their slots while the bucket is empty: until 250ms
	// went by (a token that came back since lets the first go at once).
	empty := time.Since(start) < 250*time.Millisecond+slow
	if gap := g2.Wait - g1.Wait; !g1.Granted || !g2.Granted || empty && gap < 240*time.Millisecond-between || gap > 260*time.Millisecond {
		t.Fatalf("reservations %+v then %+v (%v apart at most), want the second's slot 250ms after the first's", g1, g2, between)
	}
	// Two tokens owed: the next comes 750ms after the first acquire, more
	// than 400ms ahead until 350ms went by.
	if g := acquire(t, s, time.Minute, 400*time.Millisecond); g.Granted && time.Since(start) < 350*time.Millisecond+slow {
		t.Fatalf("a third reservation, about 750ms ahead, was granted within 400ms: %+v", g)
	}
	// Refill: a second later the two reserved tokens are paid back and two
	// more have come in.
	age(t, s, "billing", time.Second)
	for i := 0; i < 2; i++ {
		if g := acquire(t, s, time.Minute, 0); !g.Granted {
			t.Fatalf("after refill, acquire %d: %+v", i, g)
		}
	}
	// A third comes once 250ms went by since the first acquire as well.
	if g := acquire(t, s, time.Minute, 0); g.Granted && time.Since(start) < 250*time.Millisecond+slow {
		t.Fatalf("after refill, a third acquire: %+v", g)
	}
	// Refill never exceeds the burst, however long the bucket idled.
	age(t, s, "billing", time.Hour)
	n := 0
	for acquire(t, s, time.Minute, 0).Granted {
		n++
		if n > 10 {
			break
		}
	}
	if n != 4 {
		t.Errorf("after an hour idle, %d granted at once, want the burst of 4", n)
	}
}

func TestLeasesCapReleaseAndExpire(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	limitedApp(t, s, &manifest.Limits{MaxInFlight: 2})
	a := acquire(t, s, time.Hour, 0)
	b := acquire(t, s, 300*time.Millisecond, 0)
	if !a.Granted || !b.Granted || a.Lease == "" || b.Lease == "" || b.InFlight != 2 {
		t.Fatalf("two leases: %+v %+v", a, b)
	}
	if g := acquire(t, s, time.Hour, 0); g.Granted || !g.AtCapacity || g.InFlight != 2 {
		t.Fatalf("third lease: %+v, want refused at capacity", g)
	}
	if err := s.ReleaseDelivery(ctx, "billing", a.Lease); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseDelivery(ctx, "billing", a.Lease); err != nil { // twice: harmless
		t.Fatal(err)
	}
	c := acquire(t, s, time.Hour, 0)
	if !c.Granted {
		t.Fatalf("after release: %+v", c)
	}
	// b was never released (its worker died): it frees itself after its ttl.
	testkit.Eventually(t, 5*time.Second, "an expired lease to free its place", func() bool {
		return acquire(t, s, time.Hour, 0).Granted
	})
	// Lowering the limit applies to the next acquire.
	m := mkManifest("billing", nil, subTo("contacts.person.updated", 1))
	m.Limits = &manifest.Limits{MaxInFlight: 1}
	mustApply(t, s, m)
	if err := s.ReleaseDelivery(ctx, "billing", c.Lease); err != nil {
		t.Fatal(err)
	}
	if g := acquire(t, s, time.Hour, 0); g.Granted {
		t.Fatalf("limit lowered to 1 with one lease held: %+v", g)
	}
}

func TestLeasesHoldUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	limitedApp(t, s, &manifest.Limits{MaxPerSecond: 1000, MaxInFlight: 3})
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	var errs []error
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := s.AcquireDelivery(context.Background(), "billing", time.Hour, 0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if g.Granted {
				granted++
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	if granted != 3 {
		t.Errorf("%d of 24 concurrent acquires granted, want exactly 3", granted)
	}
}

// BenchmarkAcquireRelease measures what limits add to each delivery: with
// only maxPerSecond, one acquire; with maxInFlight too, an acquire and a
// release. The limits are set high, so nothing waits.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, testenv.NewSchema(b), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		limits manifest.Limits
	}{
		{"rate", manifest.Limits{MaxPerSecond: 1000000}},
		{"rate+inflight", manifest.Limits{MaxPerSecond: 1000000, MaxInFlight: 100000}},
	} {
		m := mkManifest("billing", nil)
		m.Limits = &bc.limits
		if _, err := s.ApplyManifest(ctx, m, "bench"); err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				g, err := s.AcquireDelivery(ctx, "billing", time.Minute, time.Second)
				if err != nil || !g.Granted {
					b.Fatalf("acquire: %+v, %v", g, err)
				}
				if err := s.ReleaseDelivery(ctx, "billing", g.Lease); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLoweredRateForgivesOldDebt: tokens reserved ahead at a high rate are a
// debt; once the rate is lowered, the wait it causes is bounded (60 s at the
// new rate), not debt / new rate.
func TestLoweredRateForgivesOldDebt(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	limitedApp(t, s, &manifest.Limits{MaxPerSecond: 100})
	// 100 burst + 1,400 reserved up to 14 s ahead: a debt of 1,400 tokens.
	for i := 0; i < 1500; i++ {
		if g := acquire(t, s, time.Minute, 15*time.Second); !g.Granted {
			t.Fatalf("acquire %d at 100/s within 15 s: %+v", i, g)
		}
	}
	limitedApp(t, s, &manifest.Limits{MaxPerSecond: 1})
	g := acquire(t, s, time.Minute, 0)
	if g.Granted || g.Wait < 55*time.Second || g.Wait > 62*time.Second {
		t.Fatalf("first acquire at 1/s after the debt: %+v, want refused with a wait of about 61 s (not 1,400 s)", g)
	}
}

// TestReturnedTurnsCancelTheOldRatesDebt: turns reserved ahead under a
// rate and given back (ReturnDelivery, as waits do when the rate is
// raised) leave no debt: the next turn under the raised rate is at once,
// the bucket never holds more than its burst, and the in-flight lease
// ends. AppLimits reads the limits the waits watch.
func TestReturnedTurnsCancelTheOldRatesDebt(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	limitedApp(t, s, &manifest.Limits{MaxPerSecond: 1, MaxInFlight: 50})
	var leases []string
	for i := 0; i < 10; i++ { // 1 at once, 9 reserved up to 9 s ahead
		g := acquire(t, s, time.Minute, 10*time.Second)
		if !g.Granted {
			t.Fatalf("acquire %d at 1/s within 10 s: %+v", i, g)
		}
		leases = append(leases, g.Lease)
	}
	limitedApp(t, s, &manifest.Limits{MaxPerSecond: 2, MaxInFlight: 50})
	if g := acquire(t, s, time.Minute, 0); g.Granted || g.Wait < 4*time.Second {
		t.Fatalf("under the raised rate with the old turns held: %+v, want a wait of about 5 s", g)
	}
	got, err := s.AppLimits(ctx, []string{"billing", "nobody"})
	if err != nil || len(got) != 1 || got["billing"] != (store.Limits{MaxPerSecond: 2, MaxInFlight: 50}) {
		t.Fatalf("AppLimits = %v, %v; want billing's 2/s and 50 in flight only", got, err)
	}
	for _, l := range leases {
		if err := s.ReturnDelivery(ctx, "billing", l); err != nil {
			t.Fatal(err)
		}
	}
	g := acquire(t, s, time.Minute, 0)
	if !g.Granted || g.Wait != 0 || g.InFlight != 1 {
		t.Fatalf("after the old turns came back: %+v, want a turn at once with only itself in flight", g)
	}
	var tokens float64
	if err := s.Pool.QueryRow(ctx, `SELECT tokens FROM app_limit_state WHERE app = 'billing'`).Scan(&tokens); err != nil || tokens > 2 {
		t.Fatalf("bucket holds %v tokens (%v), want at most its burst of 2", tokens, err)
	}
}

func TestLimitsRateRaised(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		was, now store.Limits
		want     bool
	}{
		{store.Limits{MaxPerSecond: 5}, store.Limits{MaxPerSecond: 10}, true},
		{store.Limits{MaxPerSecond: 5}, store.Limits{}, true},
		{store.Limits{MaxPerSecond: 5}, store.Limits{MaxPerSecond: 5}, false},
		{store.Limits{MaxPerSecond: 5}, store.Limits{MaxPerSecond: 2}, false},
		{store.Limits{MaxPerSecond: 5}, store.Limits{MaxPerSecond: 5, MaxInFlight: 3}, false},
		{store.Limits{MaxPerSecond: 5, MaxInFlight: 3}, store.Limits{MaxPerSecond: 5}, false},
		{store.Limits{MaxInFlight: 3}, store.Limits{}, false},
		{store.Limits{}, store.Limits{MaxPerSecond: 1}, false},
		{store.Limits{MaxPerSecond: 5, MaxInFlight: 3}, store.Limits{MaxPerSecond: 9, MaxInFlight: 1}, true},
	} {
		if got := c.was.RateRaised(c.now); got != c.want {
			t.Errorf("%+v.RateRaised(%+v) = %v, want %v", c.was, c.now, got, c.want)
		}
	}
}

package e2e_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/subscriber"
)

// limitedSub is a subscriber for app billing that records when each
// delivery arrived, per key in order, and how many were under way at once.
type limitedSub struct {
	hold time.Duration

	inFlight, maxInFlight atomic.Int64
	mu                    sync.Mutex
	at                    []time.Time
	got                   map[string][]int
}

func (l *limitedSub) handle(_ context.Context, ev subscriber.Event) error {
	n := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	for {
		m := l.maxInFlight.Load()
		if n <= m || l.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	var data struct {
		N int `json:"n"`
	}
	if err := ev.DecodeData(&data); err != nil {
		return err
	}
	time.Sleep(l.hold) // the subscriber's work: keeps the request in flight
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	l.got[ev.Subject] = append(l.got[ev.Subject], data.N)
	l.mu.Unlock()
	return nil
}

func (l *limitedSub) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

// startLimited starts two workers on one database schema, Temporal
// namespace and task queue, and a billing subscriber, and applies contacts
// (the publisher) and billing with limits.
func startLimited(t *testing.T, hold time.Duration, limits manifest.Limits) (*system.System, *limitedSub, func(manifest.Limits)) {
	t.Helper()
	s := system.Start(t)
	second := s.Cfg
	second.HTTPAddr = "127.0.0.1:0"
	_, stop := system.RunWorker(t, second, zapcore.WarnLevel)
	t.Cleanup(stop)

	l := &limitedSub{hold: hold, got: map[string][]int{}}
	h, err := subscriber.New(subscriber.Config{
		Audience: "app:billing", JWKSURL: s.WorkerURL() + "/.well-known/jwks.json",
		AllowLoopbackHTTP: true,
	}, l.handle)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	apply := func(m *manifest.Manifest) {
		t.Helper()
		if _, err := s.Svc.Store.ApplyManifest(context.Background(), m, "e2e"); err != nil {
			t.Fatal(err)
		}
	}
	// The fixture's contacts and billing (audit-log would get deliveries
	// this subscriber refuses).
	apply(system.Manifest("contacts", srv.URL))
	setLimits := func(lim manifest.Limits) {
		billing := system.Manifest("billing", srv.URL)
		billing.Limits = &lim
		apply(billing)
	}
	setLimits(limits)
	return s, l, setLimits
}

// checkAllInOrder fails unless every key got 1..perKey exactly, in order.
func checkAllInOrder(t *testing.T, l *limitedSub, keys, perKey int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := 0; k < keys; k++ {
		subj := fmt.Sprintf("person-%d", k)
		got := l.got[subj]
		ok := len(got) == perKey
		for i := 0; ok && i < perKey; i++ {
			ok = got[i] == i+1
		}
		if !ok {
			t.Errorf("key %s received %v, want 1..%d in order", subj, got, perKey)
		}
	}
}

// TestRateLimitAcrossTwoWorkers: with maxPerSecond 5 and two workers
// delivering 50 busy keys, the subscriber sees about 5 a second, not 5 per
// worker; raising the limit takes effect within seconds, and every event
// arrives, in order per key.
func TestRateLimitAcrossTwoWorkers(t *testing.T) {
	// Serial: measures a delivery rate over 20 s.
	const keys, perKey, rate = 50, 4, 5
	s, l, setLimits := startLimited(t, 0, manifest.Limits{MaxPerSecond: rate})
	for n := 1; n <= perKey; n++ {
		for k := 0; k < keys; k++ {
			s.Publish(fmt.Sprintf("person-%d", k), n)
		}
	}
	// The window starts once every key is busy: the relay has handed out
	// every event (its pace is not what is measured) and deliveries began.
	testkit.Eventually(t, 60*time.Second, "the relay to hand out every event", func() bool {
		lag, err := s.Svc.Store.RelayLag(context.Background())
		return err == nil && lag.Undispatched == 0
	})
	testkit.Eventually(t, 60*time.Second, "the first delivery", func() bool { return l.total() > 0 })
	first := time.Now()
	if n := l.total(); n > keys*perKey-rate*25 {
		t.Fatalf("%d of %d events delivered before the window: too few left to measure 20 s", n, keys*perKey)
	}
	const window = 20 * time.Second
	time.Sleep(time.Until(first.Add(window + 500*time.Millisecond))) // collect the window, then count it
	l.mu.Lock()
	in := 0
	for _, at := range l.at {
		if !at.Before(first) && at.Before(first.Add(window)) {
			in++
		}
	}
	l.mu.Unlock()
	l.mu.Lock()
	hist := make([]int, 16)
	for _, at := range l.at {
		if d := at.Sub(first); d < 0 {
			continue // before the window (it starts at the first delivery seen by polling)
		} else if i := int(d / (2 * time.Second)); i < len(hist) {
			hist[i]++
		}
	}
	l.mu.Unlock()
	t.Logf("deliveries per 2 s from the window's start: %v", hist)
	got := float64(in) / window.Seconds()
	t.Logf("%d deliveries in the %v window: %.2f/s (limit %d/s, burst %d)", in, window, got, rate, rate)
	if got > 5.5 || got < 4 {
		t.Fatalf("measured %.2f deliveries/s over %v, want 4 to 5.5 under a limit of %d/s across two workers", got, window, rate)
	}

	// Raised, the limit applies within seconds, also to the keys holding
	// turns reserved under the old rate.
	setLimits(manifest.Limits{MaxPerSecond: 1000})
	raised := time.Now()
	left := keys*perKey - l.total()
	testkit.Eventually(t, 60*time.Second, "every event delivered", func() bool { return l.total() >= keys*perKey })
	t.Logf("the last %d events took %v after the limit was raised", left, time.Since(raised))
	l.mu.Lock()
	after := make([]int, 20)
	for _, at := range l.at {
		if d := at.Sub(raised); d >= 0 && int(d/time.Second) < len(after) {
			after[int(d/time.Second)]++
		}
	}
	l.mu.Unlock()
	t.Logf("deliveries per second after the raise: %v", after)
	// The waits watch the app's limits (once a second): the keys waiting for
	// turns under the old rate, reserved up to 10 s ahead or none, give
	// them back and go at once. The old rate lets 3*rate (+ the burst) through
	// in 3 s; the first 3 s after the raise must see twice that. (Waits that
	// slept out their old turns delivered about 5 a second for 10 s; the
	// keys between executions take their next one at a loaded Temporal's
	// pace, so the rest as a whole makes no bound.)
	if left < 50 {
		t.Fatalf("only %d events were left when the limit was raised: too few to measure the raise", left)
	}
	if soon := after[0] + after[1] + after[2]; soon < 2*(3*rate+rate) {
		t.Errorf("%d of the %d events left went in the 3 s after the limit was raised (per second: %v); the old %d/s allows %d", soon, left, after, rate, 3*rate+rate)
	}
	checkAllInOrder(t, l, keys, perKey)
}

// TestInFlightLimitAcrossTwoWorkers: with maxInFlight 3, two workers and a
// subscriber that holds each request 100 ms, never more than 3 requests
// are under way at the subscriber, and every event arrives in order.
func TestInFlightLimitAcrossTwoWorkers(t *testing.T) {
	// Serial: measures deliveries in flight, with a timing bound.
	const keys, perKey, limit = 20, 5, 3
	s, l, _ := startLimited(t, 100*time.Millisecond, manifest.Limits{MaxInFlight: limit})
	for n := 1; n <= perKey; n++ {
		for k := 0; k < keys; k++ {
			s.Publish(fmt.Sprintf("person-%d", k), n)
		}
	}
	testkit.Eventually(t, 90*time.Second, "every event delivered", func() bool { return l.total() >= keys*perKey })
	peak := l.maxInFlight.Load()
	t.Logf("peak concurrency at the subscriber: %d (limit %d)", peak, limit)
	if peak > limit {
		t.Fatalf("the subscriber saw %d requests at once, limit %d", peak, limit)
	}
	if peak < 2 {
		t.Errorf("the subscriber never saw two requests at once (peak %d): the limit is not what holds them back", peak)
	}
	checkAllInOrder(t, l, keys, perKey)
	l.mu.Lock()
	span := l.at[len(l.at)-1].Sub(l.at[0])
	l.mu.Unlock()
	t.Logf("%d deliveries in %v", keys*perKey, span)
}

package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"herald/internal/testkit"
	"herald/manifest"
	"herald/relay"
	"herald/store"
)

// TestTwoRelaysSharePartitions: two relays on one database both lead
// partitions, each some, together all, none twice; when one is killed the
// other leads all of them within 15 s, and every key's events are signalled
// in sequence order throughout, each of them at least once. Killed twice
// over: its connection terminated (pg_terminate_backend; taken over at the
// survivor's next tick), and its context cancelled with nothing given back
// and its connection lingering, as a frozen host (taken over when the
// leases expire).
func TestTwoRelaysSharePartitions(t *testing.T) {
	// Serial: hand-over within a timing bound.
	for _, kill := range []string{"terminated", "frozen"} {
		t.Run(kill, func(t *testing.T) { twoRelays(t, kill) })
	}
}

func twoRelays(t *testing.T, kill string) {
	st, p := setup(t)
	ctx := context.Background()
	tmp := &fakeTemporal{delay: 2 * time.Millisecond}
	ctx1, stop1 := context.WithCancel(ctx)
	ctx2, stop2 := context.WithCancel(ctx)
	r1 := &relay.Relay{Store: st, Temporal: tmp, PollInterval: 50 * time.Millisecond, BatchSize: 7}
	r2 := &relay.Relay{Store: st, Temporal: tmp, PollInterval: 50 * time.Millisecond, BatchSize: 7}
	relay.AbandonOnStop(r2) // a killed worker gives nothing back
	var running sync.WaitGroup
	for _, run := range []struct {
		r   *relay.Relay
		ctx context.Context
	}{{r1, ctx1}, {r2, ctx2}} {
		running.Add(1)
		go func() { defer running.Done(); _ = run.r.Run(run.ctx) }()
	}
	defer func() { stop1(); stop2(); running.Wait() }()

	// No partition is ever led by both: watched every few milliseconds
	// until the test ends.
	watch, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watch.Err() == nil {
			p1, p2 := r1.Partitions(), r2.Partitions()
			for _, q := range p1 {
				if slices.Contains(p2, q) {
					t.Errorf("partition %d led by both relays: %v and %v", q, p1, p2)
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { stopWatch(); <-watched }()

	testkit.Eventually(t, 20*time.Second, "both relays to lead, all partitions between them", func() bool {
		n1, n2 := len(r1.Partitions()), len(r2.Partitions())
		return n1 > 0 && n2 > 0 && n1+n2 == store.RelayPartitions
	})
	var holders int
	if err := st.Pool.QueryRow(ctx, `SELECT count(DISTINCT holder) FROM relay_partitions
		WHERE holder IS NOT NULL AND expires_at > now()`).Scan(&holders); err != nil || holders != 2 {
		t.Fatalf("holders of relay_partitions: %d (%v), want 2", holders, err)
	}

	const keys, perKey = 24, 20
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- tryPublishN(p, "contacts.person.updated", fmt.Sprintf("k%d", k), perKey)
		}()
	}
	testkit.Eventually(t, 20*time.Second, "both relays to dispatch", func() bool { return len(tmp.bySeq()) > keys })

	victim := r2.Partitions()
	if kill == "terminated" {
		var pid int32
		if err := st.Pool.QueryRow(ctx, `SELECT holder_pid FROM relay_partitions WHERE partition = $1`,
			victim[0]).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		var ok bool
		if err := st.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
		}
	}
	killed := time.Now()
	stop2()
	testkit.Eventually(t, 20*time.Second, "the survivor to lead every partition", func() bool {
		return len(r1.Partitions()) == store.RelayPartitions
	})
	took := time.Since(killed)
	t.Logf("%s: %d partitions taken over after %v", kill, len(victim), took)
	switch {
	case took > 15*time.Second:
		t.Fatalf("took over %v after the kill, want within 15 s", took)
	case kill == "terminated" && took > 5*time.Second: // a tick of 1 s, with room; an expiry would take 12 s
		t.Fatalf("took over a terminated relay's partitions after %v, want at the next tick", took)
	case kill == "frozen" && took < store.PartitionLeaseTTL/2:
		t.Fatalf("took over a frozen relay's partitions after %v, before they could expire", took)
	}

	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 30*time.Second, "everything dispatched", func() bool {
		lag, err := st.RelayLag(ctx)
		return err == nil && lag.Undispatched == 0
	})
	got := tmp.bySeq()
	if len(got) != 2*keys { // billing and crm subscribe
		t.Fatalf("%d key workflows signalled, want %d", len(got), 2*keys)
	}
	for id, seqs := range got {
		seen := map[int64]bool{}
		var last int64
		for _, s := range seqs {
			if seen[s] {
				continue // a re-send of a round cut short by the kill; the workflow drops it
			}
			if s < last {
				t.Fatalf("%s: seq %d signalled after %d", id, s, last)
			}
			seen[s], last = true, s
		}
		if len(seen) != perKey {
			t.Fatalf("%s: %d distinct events, want %d", id, len(seen), perKey)
		}
	}
}

// TestOnlyPartitionZeroSweeps: of two relays leading partitions, only the
// one leading partition 0 sweeps the keys of removed subscriptions (and
// re-drives keys, with it), so no such key is told twice per interval.
func TestOnlyPartitionZeroSweeps(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "p1", 2)
	if _, err := (&relay.Relay{Store: st, Temporal: &fakeTemporal{}}).DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// billing stops subscribing: its key p1 still holds two events.
	if _, err := st.ApplyManifest(ctx, &manifest.Manifest{App: "billing", Endpoint: "http://billing.test"}, "test"); err != nil {
		t.Fatal(err)
	}
	tmp1, tmp2 := &fakeTemporal{}, &fakeTemporal{}
	r1 := &relay.Relay{Store: st, Temporal: tmp1, PollInterval: 50 * time.Millisecond, SweepInterval: 20 * time.Millisecond}
	r2 := &relay.Relay{Store: st, Temporal: tmp2, PollInterval: 50 * time.Millisecond, SweepInterval: 20 * time.Millisecond}
	rctx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	for _, r := range []*relay.Relay{r1, r2} {
		running.Add(1)
		go func() { defer running.Done(); _ = r.Run(rctx) }()
	}
	defer func() { stop(); running.Wait() }()
	testkit.Eventually(t, 20*time.Second, "both relays to lead", func() bool {
		n1, n2 := len(r1.Partitions()), len(r2.Partitions())
		return n1 > 0 && n2 > 0 && n1+n2 == store.RelayPartitions
	})
	zero, other := tmp1, tmp2
	if !slices.Contains(r1.Partitions(), 0) {
		zero, other = tmp2, tmp1
	}
	told := func(f *fakeTemporal) int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.told)
	}
	before := told(other)
	testkit.Eventually(t, 10*time.Second, "the leader of partition 0 to sweep", func() bool { return told(zero) > 2 })
	time.Sleep(200 * time.Millisecond) // ten more sweep intervals
	if n := told(other); n != before {
		t.Fatalf("the relay without partition 0 told %d keys of removed subscriptions", n-before)
	}
}

// TestHandOverEndsTheRoundUnderWay: when a relay joins, the one leading
// every partition gives half of them back without cutting the rounds under
// way short: not one of its eager starts is cancelled (a start cut short
// may have created a run whose first workflow task no worker holds, and
// its key waits out the task's timeout), it warns of nothing, and the two
// then lead the partitions between them with every event dispatched.
func TestHandOverEndsTheRoundUnderWay(t *testing.T) {
	// Serial: rounds in flight at the moment of a hand-over.
	st, p := setup(t)
	ctx := context.Background()
	core, logs := observer.New(zap.WarnLevel)
	slow := &cuttableStarter{delay: 300 * time.Millisecond}
	r1 := &relay.Relay{Store: st, Temporal: slow, StartNewKeys: true, ParallelStarts: 64,
		PollInterval: 50 * time.Millisecond, Logger: zap.New(core)}
	r2 := &relay.Relay{Store: st, Temporal: &startingTemporal{}, StartNewKeys: true, PollInterval: 50 * time.Millisecond}
	join := leadAlone(t, r1, r2)

	// New keys, one event each, 50 a second, until the hand-over is done:
	// the first relay's partitions have starts in flight all along.
	pctx, stopPublishing := context.WithCancel(ctx)
	published := make(chan error, 1)
	go func() {
		var err error
		for k := 0; pctx.Err() == nil && err == nil; k++ {
			err = tryPublishN(p, "contacts.person.deleted", fmt.Sprintf("k%d", k), 1) // crm's only
			time.Sleep(20 * time.Millisecond)
		}
		published <- err
	}()
	testkit.Eventually(t, 20*time.Second, "starts in flight", func() bool { return slow.inFlight.Load() > 0 })
	join()
	testkit.Eventually(t, 20*time.Second, "both relays to lead, all partitions between them", func() bool {
		n1, n2 := len(r1.Partitions()), len(r2.Partitions())
		return n1 > 0 && n2 > 0 && n1+n2 == store.RelayPartitions
	})
	time.Sleep(300 * time.Millisecond)
	stopPublishing()
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "everything dispatched", func() bool {
		lag, err := st.RelayLag(ctx)
		return err == nil && lag.Undispatched == 0
	})
	if n := slow.cut.Load(); n != 0 {
		t.Fatalf("%d eager starts cut short by the hand-over, want none (%d went through)", n, slow.startedEagerly.Load())
	}
	if slow.startedEagerly.Load() == 0 {
		t.Fatal("the first relay started no key: nothing was in flight to cut")
	}
	if logs.Len() != 0 {
		t.Fatalf("warnings from the relay that gave partitions back: %v", logs.All())
	}
}

// TestHandOverLeavesKeysNotBegun: a round of a partition being handed over
// finishes the starts under way and begins no other: the keys still
// waiting for a start slot are left to the new leader, so the hand-over
// takes a tick or two, not the 8 s the partition is still trusted (nor
// the time its keys would wait for slots), and no start is cut short.
func TestHandOverLeavesKeysNotBegun(t *testing.T) {
	// Serial: bounds how long a hand-over takes.
	st, p := setup(t)
	ctx := context.Background()
	slow := &cuttableStarter{delay: 400 * time.Millisecond}
	// One start at a time: every round waits its turn for the one slot.
	r1 := &relay.Relay{Store: st, Temporal: slow, StartNewKeys: true, ParallelStarts: 1, PollInterval: 50 * time.Millisecond}
	fast := &startingTemporal{}
	r2 := &relay.Relay{Store: st, Temporal: fast, StartNewKeys: true, PollInterval: 50 * time.Millisecond}
	join := leadAlone(t, r1, r2)
	const keys = 40 // 16 s of starts one at a time
	for k := range keys {
		publishN(t, p, "contacts.person.deleted", fmt.Sprintf("k%d", k), 1) // crm's only
	}
	testkit.Eventually(t, 20*time.Second, "a start in flight", func() bool { return slow.inFlight.Load() > 0 })
	joined := time.Now()
	join()
	testkit.Eventually(t, 20*time.Second, "the second relay to lead half the partitions", func() bool {
		return len(r2.Partitions()) == store.RelayPartitions/2
	})
	took := time.Since(joined)
	testkit.Eventually(t, 60*time.Second, "everything dispatched", func() bool {
		lag, err := st.RelayLag(ctx)
		return err == nil && lag.Undispatched == 0
	})
	fast.smu.Lock()
	byR2 := len(fast.started)
	fast.smu.Unlock()
	t.Logf("hand-over in %v; %d keys started by the first relay, %d by the second", took, slow.startedEagerly.Load(), byR2)
	if took > 6*time.Second {
		t.Errorf("the second relay led its half %v after it joined, want a tick or two: the rounds handed over waited for their keys' turns", took)
	}
	if n := slow.cut.Load(); n != 0 {
		t.Errorf("%d starts cut short by the hand-over, want none", n)
	}
	if got := slow.startedEagerly.Load() + int64(byR2); got != keys {
		t.Errorf("%d keys started in all, want %d, each once", got, keys)
	}
	for seq := int64(1); seq <= keys; seq++ { // the keys left were neither failed nor backing off
		if ev := relayState(t, st, seq); ev.RelayAttempts != 0 || ev.RelayError != "" || ev.RelayNextTry != nil {
			t.Errorf("event %d after the hand-over: %d attempts, error %q: want none", seq, ev.RelayAttempts, ev.RelayError)
		}
	}
}

// leadAlone runs r1 until the test ends and waits until it leads every
// partition; join then runs r2 beside it.
func leadAlone(t *testing.T, r1, r2 *relay.Relay) (join func()) {
	t.Helper()
	ctx1, stop1 := context.WithCancel(context.Background())
	ctx2, stop2 := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { _ = r1.Run(ctx1) })
	t.Cleanup(func() { stop1(); stop2(); running.Wait() })
	testkit.Eventually(t, 20*time.Second, "the first relay to lead every partition", func() bool {
		return len(r1.Partitions()) == store.RelayPartitions
	})
	return func() { running.Go(func() { _ = r2.Run(ctx2) }) }
}

// TestPartitionGivenBackUnseenIsFreedAtOnce: a member may take partitions
// and give them back to balance the relays before its relay reconciles
// (the relay was waiting for a loop to end, say). The relay never started
// a loop for them, so it never told the member they stopped, and they
// waited for their leases to lapse (12 s) before another relay could lead
// them, their events undispatched meanwhile. The first reconcile that
// sees them now tells the member, which frees them at its next tick.
func TestPartitionGivenBackUnseenIsFreedAtOnce(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := st.JoinRelay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Leave)
	testkit.Eventually(t, 10*time.Second, "the first member to lead every partition", func() bool {
		return len(first.Partitions()) == store.RelayPartitions
	})
	second, err := st.JoinRelay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Leave)
	testkit.Eventually(t, 10*time.Second, "the first member to give half its partitions back", func() bool {
		return len(first.Shedding()) == store.RelayPartitions/2
	})
	// The relay's first reconcile, after the member gave back half of what
	// it took: it starts loops for the half it leads, none for the rest.
	r := &relay.Relay{Store: st, Temporal: &startingTemporal{}, PollInterval: 50 * time.Millisecond, Logger: zap.NewNop()}
	stop := relay.ReconcileOnce(ctx, r, first)
	defer stop()
	start := time.Now()
	testkit.Eventually(t, store.PartitionLeaseTTL/2, "the second member to lead the half given back", func() bool {
		return len(second.Partitions()) == store.RelayPartitions/2
	})
	t.Logf("the second member led the half given back %v after the reconcile", time.Since(start).Round(time.Millisecond))
	if n := len(first.Partitions()); n != store.RelayPartitions/2 {
		t.Fatalf("the first member leads %d partitions, want %d", n, store.RelayPartitions/2)
	}
}

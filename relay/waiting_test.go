package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"herald/internal/testkit"
	"herald/relay"
	"herald/store"
)

// gatedStarter holds every start until open is closed.
type gatedStarter struct {
	startingTemporal
	open     chan struct{}
	inFlight atomic.Int64
}

func (g *gatedStarter) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	<-g.open
	return g.startingTemporal.ExecuteWorkflow(ctx, opts, wf, args...)
}

// roundGoroutines counts the goroutines of the relay's dispatch rounds: the
// round's own and every key's it spawned.
func roundGoroutines(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range bytes.Split(b.Bytes(), []byte("\n\n")) {
		if bytes.Contains(g, []byte("relay.(*Relay).dispatch")) {
			n++
		}
	}
	return n
}

// TestKeysWaitingForSlotsHoldNoGoroutine: a round of many new keys, whose
// starts wait for the one start slot, keeps a few goroutines waiting, not
// one per key (each goroutine's stack is worker memory: with 10,000 new
// keys a worker's goroutine stacks took 55 MB, 36 MB without them). Every
// key is started once the starts go. Not parallel: it counts the
// process's goroutines, and parallel tests of this package wait while it
// runs.
func TestKeysWaitingForSlotsHoldNoGoroutine(t *testing.T) {
	st, _ := setup(t)
	const keys = 150 // two subscriptions each: 300 starts
	if _, err := st.InsertEvents(context.Background(), oneEventKeys("contacts.person.updated", "waiting-", keys)); err != nil {
		t.Fatal(err)
	}
	tmp := &gatedStarter{open: make(chan struct{})}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, Parallel: 4, ParallelStarts: 1}
	type result struct {
		round relay.Round
		err   error
	}
	done := make(chan result, 1)
	go func() {
		round, err := r.DispatchOnce(context.Background())
		done <- result{round, err}
	}()
	testkit.Eventually(t, 30*time.Second, "the first start to be under way", func() bool {
		return tmp.inFlight.Load() == 1
	})
	// The round waits in wg.Wait, its starts' queue for the start slot, and
	// the one start under way; give a key's goroutine that would wait for a
	// slot of its own the time to show.
	time.Sleep(100 * time.Millisecond)
	if n := roundGoroutines(t); n > 5 {
		t.Errorf("%d goroutines in the round while %d starts wait for one slot, want at most 5", n, 2*keys)
	}
	close(tmp.open)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.round.Signals != 2*keys || res.round.Failed != 0 {
		t.Fatalf("round %+v, want %d starts and no failure", res.round, 2*keys)
	}
}

// TestRoundsCutByTheirBytesGoOn: a round that read its envelope bytes
// (RoundBytes) may have left events behind, so the partition's next round
// follows at once, as after a round of BatchSize events, not after the
// poll interval (here a minute).
func TestRoundsCutByTheirBytesGoOn(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	tmp := &fakeTemporal{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// Every round takes one event: any envelope reaches one byte.
	r := &relay.Relay{Store: st, Temporal: tmp, RoundBytes: 1, PollInterval: time.Minute, IdlePoll: 100 * time.Millisecond}
	go func() { _ = r.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "the relay to lead", r.IsLeader)
	publishN(t, p, "contacts.person.updated", "cut-by-bytes", 6)
	testkit.Eventually(t, 20*time.Second, "the 6 events to be signalled to both subscriptions", func() bool {
		n := 0
		for _, subs := range tmp.bySeq() {
			n += len(subs)
		}
		return n == 12
	})
}

// TestRefusedKeyCutByBytesHoldsNoOtherKey: a round cut by its bytes may
// hold one key's events alone. When Temporal refuses that key (a reason of
// the key's own, not an outage), the round accepted nothing, but the
// partition goes on at once: another key's event behind it is signalled
// well within the poll interval (here 5 s), not after it. (Found by a
// review helper: the "Temporal accepted nothing" pause took such a round
// for an outage.)
func TestRefusedKeyCutByBytesHoldsNoOtherKey(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	const bad = "refused-key"
	good := keysBeside(t, st, bad, "healthy", 1)[0]
	tmp := &fakeTemporal{refuse: func(id string) bool { return strings.Contains(id, bad) }}
	// Every round takes one event.
	r := &relay.Relay{Store: st, Temporal: tmp, RoundBytes: 1, PollInterval: 5 * time.Second,
		IdlePoll: 50 * time.Millisecond}
	publishN(t, p, "contacts.person.updated", bad, 3)
	publishN(t, p, "contacts.person.updated", good, 1)
	go func() { _ = r.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "the relay to lead", r.IsLeader)
	start := time.Now()
	testkit.Eventually(t, 20*time.Second, "the healthy key's event to be signalled", func() bool {
		for id := range tmp.bySeq() {
			if strings.Contains(id, good) {
				return true
			}
		}
		return false
	})
	if waited := time.Since(start); waited > 3*time.Second {
		t.Errorf("the healthy key waited %v behind the refused one, want well within the 5 s poll interval", waited)
	}
}

// TestOutageCutByBytesPauses: a round that more events wait behind, whose
// signals all failed because Temporal did not answer, still pauses for the
// poll interval: the relay does not run through the backlog giving every
// key a failed attempt.
func TestOutageCutByBytesPauses(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// Five keys of one partition, one event each.
	keys := append([]string{"outage"}, keysBeside(t, st, "outage", "outage", 4)...)
	var attempts atomic.Int64
	tmp := &fakeTemporal{refuse: func(string) bool { attempts.Add(1); return true },
		refuseWith: serviceerror.NewUnavailable("down")}
	r := &relay.Relay{Store: st, Temporal: tmp, RoundBytes: 1, PollInterval: 3 * time.Second,
		IdlePoll: 50 * time.Millisecond}
	for _, k := range keys {
		publishN(t, p, "contacts.person.updated", k, 1)
	}
	go func() { _ = r.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "a first attempt", func() bool { return attempts.Load() > 0 })
	time.Sleep(time.Second)
	// The first round's event, to its two subscriptions; then the pause.
	if n := attempts.Load(); n != 2 {
		t.Errorf("%d attempts in the second after the first, want the first round's 2", n)
	}
}

// keysBeside returns n subject keys named prefix-<i> that fall into the
// relay partition of subject.
func keysBeside(t *testing.T, st *store.Store, subject, prefix string, n int) []string {
	t.Helper()
	partition := func(subject string) int {
		var p int
		if err := st.Pool.QueryRow(context.Background(), `SELECT `+store.SubjectPartitionSQL+`::int`, subject).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := partition(subject)
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if s := fmt.Sprintf("%s-%d", prefix, i); partition(s) == want {
			keys = append(keys, s)
		}
	}
	return keys
}

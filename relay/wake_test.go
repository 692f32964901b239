package relay_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"herald/internal/testkit"
	"herald/publish"
	"herald/relay"
	"herald/store"
)

// TestPublishTxEventIsDispatchedByThePoll: a PublishTx commit wakes no one
// (no publishing transaction notifies), so the relay finds the event at its
// idle poll, well before its error pause, here 1 minute.
func TestPublishTxEventIsDispatchedByThePoll(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	tmp := &fakeTemporal{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r := &relay.Relay{Store: st, Temporal: tmp, PollInterval: time.Minute, IdlePoll: 100 * time.Millisecond}
	go func() { _ = r.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "the relay to lead", r.IsLeader)
	// Let the leader go idle: it now waits for a wake-up or its poll.
	time.Sleep(300 * time.Millisecond)

	tx, err := st.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := p.PublishTx(ctx, tx, publish.Request{App: "contacts", Type: "contacts.person.updated", Version: 1,
		Subject: "polled", Data: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the PublishTx event to be signalled", func() bool {
		return len(tmp.bySeq()) == 2 // billing and crm subscribe
	})
	// The idle poll is 100 ms; the bound leaves room for a loaded machine
	// but not for the one-minute pause a missing poll would fall back to.
	if waited := time.Since(committed); waited > 10*time.Second {
		t.Errorf("dispatched %v after the commit, want within the idle poll", waited)
	}
}

// TestIdleLeaderProbesRatherThanPolls: an idle leader with a short idle
// poll runs a round only when the log grew (the probe reads one number),
// or once a PollInterval, not every IdlePoll: reading the undispatched
// events costs the database far more than the probe.
func TestIdleLeaderProbesRatherThanPolls(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	var rounds atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r := &relay.Relay{Store: st, Temporal: &fakeTemporal{}, PollInterval: time.Minute, IdlePoll: 20 * time.Millisecond,
		OnRound: func(relay.Round) { rounds.Add(1) }}
	go func() { _ = r.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "the relay to lead and run a first round in every partition", func() bool {
		return rounds.Load() >= store.RelayPartitions
	})
	// The probe's first read finds the log's top above "nothing seen" and
	// wakes every loop once; a loop that had already run its first round
	// runs a second. Wait for the start to settle: 300 ms without a round
	// is 15 idle polls, which a leader that polled on every tick would
	// never give.
	testkit.Eventually(t, 20*time.Second, "the start-up rounds to settle", func() bool {
		n := rounds.Load()
		time.Sleep(300 * time.Millisecond)
		return rounds.Load() == n
	})
	before := rounds.Load()
	time.Sleep(time.Second) // 50 idle polls
	if idle := rounds.Load() - before; idle > 2 {
		t.Errorf("%d rounds in an idle second with a 20 ms idle poll, want at most 2", idle)
	}
	publishN(t, p, "contacts.person.updated", "probed", 1)
	testkit.Eventually(t, 10*time.Second, "a round after the publish", func() bool { return rounds.Load() > before })
}

// TestWakeRelayFoldsABurst: a burst of wake-ups costs a notification or
// two, never one per publish, and sends at least one.
func TestWakeRelayFoldsABurst(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := listenWakeUps(ctx, t, st)
	for range 1000 {
		st.WakeRelay()
	}
	got := w.count(ctx)
	if got < 1 || got > 10 {
		t.Errorf("%d notifications for 1000 wake-ups, want 1 to 10", got)
	}
	// After Close, a wake-up is a no-op rather than a panic or a leak.
	st.Close()
	st.WakeRelay()
}

// TestWakeRelayPacesASteadyStream: wake-ups asked for without pause, as a
// steady stream of publishes asks for them, cost one notification every
// gap (25 ms), not one per round trip of the notifying connection; and a
// wake-up asked for within the gap is sent when it ends.
func TestWakeRelayPacesASteadyStream(t *testing.T) {
	t.Parallel()
	st, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := listenWakeUps(ctx, t, st)
	// One wake-up, then another at once, within the gap after the first
	// notification: both are sent.
	st.WakeRelay()
	for i := range 2 {
		if err := w.next(ctx, 5*time.Second); err != nil {
			t.Fatalf("notification %d of two wake-ups: %v", i+1, err)
		}
		if i == 0 {
			st.WakeRelay()
		}
	}
	const stream = time.Second
	for start := time.Now(); time.Since(start) < stream; time.Sleep(200 * time.Microsecond) {
		st.WakeRelay()
	}
	got := w.count(ctx)
	// A second of wake-ups: at most 41 gaps, and the stream may have run a
	// little longer than its clock says; at least 5 unless a notification
	// took over 175 ms.
	if got < 5 || got > 45 {
		t.Errorf("%d notifications for a stream of wake-ups over %v, want 5 to 45 (one every 25 ms)", got, stream)
	}
}

// wakeUps is a connection listening for a schema's wake-ups.
type wakeUps struct {
	listener *pgx.Conn
	schema   string
}

// listenWakeUps listens for the wake-ups of st's schema until the test ends.
func listenWakeUps(ctx context.Context, t *testing.T, st *store.Store) *wakeUps {
	t.Helper()
	schema, err := testkit.Schema(ctx, st.Pool)
	if err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, st.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN herald_events"); err != nil {
		t.Fatal(err)
	}
	return &wakeUps{listener: listener, schema: schema}
}

// next waits up to within for the schema's next wake-up.
func (w *wakeUps) next(ctx context.Context, within time.Duration) error {
	waitCtx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, err := testkit.WaitWakeUp(waitCtx, w.listener, w.schema)
	return err
}

// count counts the wake-ups that arrive until none has for 500 ms.
func (w *wakeUps) count(ctx context.Context) int {
	n := 0
	for w.next(ctx, 500*time.Millisecond) == nil {
		n++
	}
	return n
}

// TestProbeWakesOnlyThePartitionsPublishedTo: an idle leader runs a round
// in the partition a publish reached, and none in the 15 others (each
// would read the log for nothing).
func TestProbeWakesOnlyThePartitionsPublishedTo(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	var rounds, empty, events atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r := &relay.Relay{Store: st, Temporal: &fakeTemporal{}, PollInterval: time.Minute, IdlePoll: 20 * time.Millisecond,
		OnRound: func(rd relay.Round) {
			rounds.Add(1)
			events.Add(int64(rd.Events))
			if rd.Events == 0 {
				empty.Add(1)
			}
		}}
	go func() { _ = r.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "the relay to lead and run a first round in every partition", func() bool {
		return rounds.Load() >= store.RelayPartitions
	})
	testkit.Eventually(t, 20*time.Second, "the start-up rounds to settle", func() bool {
		n := rounds.Load()
		time.Sleep(300 * time.Millisecond)
		return rounds.Load() == n
	})
	emptyBefore := empty.Load()
	publishN(t, p, "contacts.person.updated", "woken", 1)
	testkit.Eventually(t, 10*time.Second, "a round that reads the event", func() bool { return events.Load() == 1 })
	time.Sleep(300 * time.Millisecond) // 15 idle polls: time for any other round to run
	if n := empty.Load() - emptyBefore; n != 0 {
		t.Errorf("%d rounds read nothing after a publish to one key, want none (only its partition's loop is woken)", n)
	}
}

// TestPartitionsAbove: the partitions holding undispatched events above a
// sequence number, each once, in order; none above the log's top, and a
// partition whose new events were dispatched is no longer among them.
func TestPartitionsAbove(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	subjects := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	want := map[int]bool{}
	for _, s := range subjects {
		publishN(t, p, "contacts.person.updated", s, 2)
		var part int
		if err := st.Pool.QueryRow(ctx, `SELECT `+store.SubjectPartitionSQL, s).Scan(&part); err != nil {
			t.Fatal(err)
		}
		want[part] = true
	}
	got, err := st.PartitionsAbove(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || !slices.IsSorted(got) {
		t.Fatalf("partitions above 0: %v, want each of %v once, in order", got, want)
	}
	for _, g := range got {
		if !want[g] {
			t.Fatalf("partitions above 0: %v, want those of the subjects: %v", got, want)
		}
	}
	top, err := st.MaxSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.PartitionsAbove(ctx, top); err != nil || len(got) != 0 {
		t.Errorf("partitions above the top: %v, %v; want none", got, err)
	}
	// The last event's partition: only it holds events above top-1, until
	// that event is dispatched.
	var last int
	if err := st.Pool.QueryRow(ctx, `SELECT `+store.SubjectPartitionSQL, subjects[len(subjects)-1]).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if got, err := st.PartitionsAbove(ctx, top-1); err != nil || !slices.Equal(got, []int{last}) {
		t.Errorf("partitions above %d: %v, %v; want [%d]", top-1, got, err, last)
	}
	if err := st.MarkDispatched(ctx, []int64{top}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.PartitionsAbove(ctx, top-1); err != nil || len(got) != 0 {
		t.Errorf("partitions above %d once its event was dispatched: %v, %v; want none", top-1, got, err)
	}
}

package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
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
	st, p, rounds := settledRelay(t)
	subject := subjectsInPartitions(t, st, 1)[0]
	before := rounds.count()
	publishN(t, p, "contacts.person.updated", subject.name, 1)
	testkit.Eventually(t, 10*time.Second, "a round that reads the event", func() bool { return rounds.events(before) == 1 })
	time.Sleep(300 * time.Millisecond) // 15 idle polls: time for any other round to run
	for _, rd := range rounds.since(before) {
		if rd.Partition != subject.partition {
			t.Errorf("a round in partition %d (%d events) after a publish to a key of partition %d, want none",
				rd.Partition, rd.Events, subject.partition)
		}
	}
}

// TestProbeFindsLateCommits: an event whose transaction took its sequence
// number before a later event's but committed after the probe saw that
// one is dispatched at the probe's next reads (every IdlePoll), with no
// other publish or wake-up, not at its partition's next full round, here
// a minute on.
func TestProbeFindsLateCommits(t *testing.T) {
	t.Parallel()
	st, p, _ := settledRelay(t)
	ctx := context.Background()
	subjects := subjectsInPartitions(t, st, 4) // each in a partition of its own
	dispatched := func(subject string) bool {
		var n int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE subject = $1 AND state = 'dispatched'`, subject).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	late := func(subject string) pgx.Tx {
		tx, err := st.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := p.PublishTx(ctx, tx, publish.Request{App: "contacts", Type: "contacts.person.updated", Version: 1,
			Subject: subject, Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	for _, wake := range []struct {
		name          string
		late, earlier string
		wakeUp        func()
	}{
		{"nothing else", subjects[0].name, subjects[1].name, func() {}},
		{"a notification", subjects[2].name, subjects[3].name, st.WakeRelay},
	} {
		tx := late(wake.late)
		publishN(t, p, "contacts.person.updated", wake.earlier, 1) // a higher number, committed first
		testkit.Eventually(t, 10*time.Second, wake.name+": the earlier commit dispatched", func() bool { return dispatched(wake.earlier) })
		time.Sleep(100 * time.Millisecond) // 5 idle polls: the probe has seen the top
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wake.wakeUp()
		testkit.Eventually(t, 10*time.Second, wake.name+": the late commit dispatched", func() bool { return dispatched(wake.late) })
	}
}

// settledRelay runs a relay that leads every partition of a new schema,
// probes every 20 ms and runs a full round only every minute, until the
// test ends; it returns once the relay's start-up rounds are over.
func settledRelay(t *testing.T) (*store.Store, *publish.Publisher, *roundLog) {
	t.Helper()
	st, p := setup(t)
	rounds := &roundLog{}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	r := &relay.Relay{Store: st, Temporal: &fakeTemporal{}, PollInterval: time.Minute, IdlePoll: 20 * time.Millisecond,
		OnRound: rounds.add}
	go func() { defer close(done); _ = r.Run(ctx) }()
	rounds.settle(t)
	return st, p, rounds
}

// roundLog records a relay's rounds (Relay.OnRound).
type roundLog struct {
	mu     sync.Mutex
	rounds []relay.Round
}

func (l *roundLog) add(r relay.Round) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rounds = append(l.rounds, r)
}

func (l *roundLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.rounds)
}

func (l *roundLog) since(i int) []relay.Round {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rounds[i:])
}

// events counts the events the rounds since the i-th read.
func (l *roundLog) events(i int) int {
	n := 0
	for _, r := range l.since(i) {
		n += r.Events
	}
	return n
}

// settle waits for the relay to lead and run its start-up rounds in every
// partition (a first round, and a second when the probe's first read woke
// a loop that had run one), then for a second without a round.
func (l *roundLog) settle(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "the relay to lead and run a first round in every partition", func() bool {
		return l.count() >= store.RelayPartitions
	})
	testkit.Eventually(t, 30*time.Second, "the start-up rounds to settle", func() bool {
		n := l.count()
		time.Sleep(time.Second)
		return l.count() == n
	})
}

type partitioned struct {
	name      string
	partition int
}

// subjectsInPartitions finds n subject keys in n different partitions.
func subjectsInPartitions(t *testing.T, st *store.Store, n int) []partitioned {
	t.Helper()
	var out []partitioned
	taken := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("key-%d", i)
		var part int
		if err := st.Pool.QueryRow(context.Background(), `SELECT `+store.SubjectPartitionSQL, name).Scan(&part); err != nil {
			t.Fatal(err)
		}
		if !taken[part] {
			taken[part] = true
			out = append(out, partitioned{name, part})
		}
	}
	return out
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
	// Backing off (tried, failed): its partition's full rounds find it
	// when it comes due, not a wake-up.
	for _, failed := range []bool{true, false} {
		if _, err := st.Pool.Exec(ctx, `UPDATE events SET relay_error = CASE WHEN $2 THEN 'unavailable' END,
		       relay_next_try = CASE WHEN $2 THEN now() + interval '1 hour' END WHERE seq = $1`, top, failed); err != nil {
			t.Fatal(err)
		}
		got, err := st.PartitionsAbove(ctx, top-1)
		wantNow := []int{last}
		if failed {
			wantNow = nil
		}
		if err != nil || len(got) != len(wantNow) || len(got) > 0 && !slices.Equal(got, wantNow) {
			t.Errorf("partitions above %d, the event backing off %v: %v, %v; want %v", top-1, failed, got, err, wantNow)
		}
	}
	if err := st.MarkDispatched(ctx, []int64{top}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.PartitionsAbove(ctx, top-1); err != nil || len(got) != 0 {
		t.Errorf("partitions above %d once its event was dispatched: %v, %v; want none", top-1, got, err)
	}
}

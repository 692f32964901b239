package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/store"
)

// TestUndispatchedInSplitsTheLogByKey: every undispatched event is in
// exactly one partition, every event of one subject key (whatever its type)
// in the same one, each partition's read is in sequence order and one range
// of the index events_relay_partition, and the keys spread over the
// partitions.
func TestUndispatchedInSplitsTheLogByKey(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	var evs []store.NewEvent
	for k := range 200 {
		for _, typ := range []string{"contacts.person.updated", "contacts.person.deleted"} {
			evs = append(evs, newEvent(typ, fmt.Sprintf("key-%d", k), "h"))
		}
	}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	all, err := s.Undispatched(ctx, 10000, 0)
	if err != nil {
		t.Fatal(err)
	}
	partOf := map[string]int{}    // subject → partition
	bySeq := map[int64]int{}      // seq → partition
	perPartition := map[int]int{} // events per partition
	for p := range store.RelayPartitions {
		got, err := s.UndispatchedIn(ctx, p, 10000, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range got {
			if i > 0 && got[i-1].Seq >= ev.Seq {
				t.Fatalf("partition %d: seq %d after %d", p, ev.Seq, got[i-1].Seq)
			}
			if q, ok := bySeq[ev.Seq]; ok {
				t.Fatalf("event %d in partitions %d and %d", ev.Seq, q, p)
			}
			bySeq[ev.Seq] = p
			if q, ok := partOf[ev.Subject]; ok && q != p {
				t.Fatalf("key %s in partitions %d and %d", ev.Subject, q, p)
			}
			partOf[ev.Subject] = p
			perPartition[p]++
		}
	}
	if len(bySeq) != len(all) || len(all) != len(evs) {
		t.Fatalf("%d events over the partitions, %d undispatched, %d published", len(bySeq), len(all), len(evs))
	}
	if len(perPartition) != store.RelayPartitions {
		t.Fatalf("200 keys fell into %d of %d partitions: %v", len(perPartition), store.RelayPartitions, perPartition)
	}
	if _, err := s.UndispatchedIn(ctx, store.RelayPartitions, 1, 0); err == nil {
		t.Fatal("no error for a partition out of range")
	}
	// One index range per partition, not a scan of every undispatched event
	// (once the table has statistics, as autovacuum gives it).
	if _, err := s.Pool.Exec(ctx, `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool.Query(ctx, "EXPLAIN "+store.UndispatchedInSQL(), 1000, int64(4<<20), 3)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "events_relay_partition") {
		t.Fatalf("a partition's read does not use events_relay_partition:\n%s", p)
	}
}

// follow stands in for a relay: it reports every partition m stops
// leading as stopped, so that a partition to give back is freed.
func follow(ctx context.Context, m *store.Member) {
	go func() {
		var led []int
		for {
			now := m.Partitions()
			for _, p := range led {
				if !slices.Contains(now, p) {
					m.Stopped(p)
				}
			}
			led = now
			select {
			case <-ctx.Done():
				return
			case <-m.Changed():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
}

// holders counts the partitions of each holder of relay_partitions whose
// lease has not expired.
func holders(t *testing.T, s *store.Store) map[string]int {
	t.Helper()
	rows, err := s.Pool.Query(context.Background(),
		`SELECT holder, count(*) FROM relay_partitions WHERE holder IS NOT NULL AND expires_at > now() GROUP BY holder`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var h string
		var n int
		if err := rows.Scan(&h, &n); err != nil {
			t.Fatal(err)
		}
		out[h] = n
	}
	return out
}

// partitionTestTTL is the lease of the members in the tests of sharing:
// ticks of 250 ms, a renewal trusted for 2 s. Each tick's statements must
// end within that trust (a tick that fails loses the member for good),
// which a loaded machine under -race can stretch; with 1.2 s, two ticks
// had 700 ms.
const partitionTestTTL = 3 * time.Second

// TestMembersShareThePartitions: one member takes every partition; a second
// one joining gets half, given back by the first; the partitions two
// members lead never overlap; when one member's connection ends, the other
// takes all of them back within a few ticks.
func TestMembersShareThePartitions(t *testing.T) {
	t.Parallel()
	a, b := openLeaderStores(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = partitionTestTTL
	ma, err := a.JoinRelayTTL(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ma.Leave) // before the store closes, whatever fails
	follow(ctx, ma)
	testkit.Eventually(t, 20*time.Second, "the first member to lead every partition", func() bool {
		return len(ma.Partitions()) == store.RelayPartitions
	})
	mb, err := b.JoinRelayTTL(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mb.Leave)
	follow(ctx, mb)
	overlap := func() {
		pa, pb := ma.Partitions(), mb.Partitions()
		for _, p := range pa {
			if slices.Contains(pb, p) {
				t.Fatalf("partition %d led by both members: %v and %v", p, pa, pb)
			}
		}
	}
	testkit.Eventually(t, 20*time.Second, "the members to share the partitions half and half", func() bool {
		overlap()
		return len(ma.Partitions()) == store.RelayPartitions/2 && len(mb.Partitions()) == store.RelayPartitions/2
	})
	if h := holders(t, a); len(h) != 2 {
		t.Fatalf("holders of relay_partitions: %v, want two with 8 each", h)
	}
	if ma.Workers() != 2 || mb.Workers() != 2 {
		t.Fatalf("live workers seen: %d and %d, want 2", ma.Workers(), mb.Workers())
	}
	// The second member's connection ends, as at a crash.
	var ok bool
	if err := a.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, store.MemberPID(mb)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate: %v %v", ok, err)
	}
	select {
	case <-mb.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the member whose connection ended was not lost")
	}
	if len(mb.Partitions()) != 0 || mb.Check(0) == nil {
		t.Fatalf("a lost member still leads %v", mb.Partitions())
	}
	testkit.Eventually(t, 10*time.Second, "the first member to take every partition back", func() bool {
		return len(ma.Partitions()) == store.RelayPartitions
	})
}

// TestMemberStandsByForAnEarlierRelease: while a leader of the single
// lease (an earlier release's relay) holds relay_lease, a member leads no
// partition; once it gives the lease back, the member takes relay_lease
// itself, so that such a leader stands by, and leads every partition.
func TestMemberStandsByForAnEarlierRelease(t *testing.T) {
	t.Parallel()
	a, b := openLeaderStores(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old, err := b.TryLead(ctx)
	if err != nil || old == nil {
		t.Fatalf("lead as an earlier release: %v, %v", old, err)
	}
	m, err := a.JoinRelayTTL(ctx, partitionTestTTL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Leave)
	follow(ctx, m)
	time.Sleep(10 * partitionTestTTL / 12) // ten ticks
	if p := m.Partitions(); len(p) != 0 {
		t.Fatalf("a member leads %v beside an earlier release's leader", p)
	}
	old.Release()
	testkit.Eventually(t, 20*time.Second, "the member to lead every partition", func() bool {
		return len(m.Partitions()) == store.RelayPartitions
	})
	if again, err := b.TryLead(ctx); err != nil || again != nil {
		t.Fatalf("an earlier release's relay leads beside the members: %v, %v", again, err)
	}
}

// TestAbandonedMemberExpires: a member that stops without giving anything
// back, its connection lingering, keeps its partitions until they expire;
// then another takes them, and never before.
func TestAbandonedMemberExpires(t *testing.T) {
	t.Parallel()
	a, b := openLeaderStores(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = 3 * time.Second
	ma, err := a.JoinRelayTTL(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ma.Leave) // nothing after Abandon; for a failure before it
	follow(ctx, ma)
	testkit.Eventually(t, 10*time.Second, "the first member to lead every partition", func() bool {
		return len(ma.Partitions()) == store.RelayPartitions
	})
	mb, err := b.JoinRelayTTL(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mb.Leave)
	follow(ctx, mb)
	testkit.Eventually(t, 10*time.Second, "the second member to lead", func() bool { return len(mb.Partitions()) > 0 })
	ma.Abandon()
	abandoned := time.Now()
	testkit.Eventually(t, 10*time.Second, "the second member to lead every partition", func() bool {
		n := len(mb.Partitions())
		if n > store.RelayPartitions/2 && time.Since(abandoned) < ttl/2 {
			t.Fatalf("took an abandoned member's partitions %v after it stopped, before they expired", time.Since(abandoned))
		}
		return n == store.RelayPartitions
	})
	// At expiry: within the TTL and the taker's tick, with room for a
	// loaded machine.
	if took := time.Since(abandoned); took > ttl+2*time.Second {
		t.Fatalf("took over %v after the member stopped; want within the TTL (%v) and a tick", took, ttl)
	}
}

// TestThreeMembersTakeAtMostTheirShare: with three members each leads at
// most ceil(16 / 3) = 6 partitions, none twice, all 16 between them.
func TestThreeMembersTakeAtMostTheirShare(t *testing.T) {
	t.Parallel()
	a, b := openLeaderStores(t)
	c, err := store.Open(context.Background(), a.Pool.Config().ConnString(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ms []*store.Member
	for _, s := range []*store.Store{a, b, c} {
		m, err := s.JoinRelayTTL(ctx, partitionTestTTL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Leave)
		follow(ctx, m)
		ms = append(ms, m)
	}
	testkit.Eventually(t, 30*time.Second, "three members to share the partitions", func() bool {
		led := map[int]bool{}
		for _, m := range ms {
			ps := m.Partitions()
			if len(ps) > 6 {
				return false
			}
			for _, p := range ps {
				if led[p] {
					t.Fatalf("partition %d led twice", p)
				}
				led[p] = true
			}
		}
		return len(led) == store.RelayPartitions
	})
}

// TestGivingBackOnlyToBalance: a partition a member sheds because another
// joined is handed over (GivingBack: the round under way may end while the
// member still trusts it); when a relay of an earlier release holds
// relay_lease, every partition is shed and none is handed over: each must
// stop at once.
func TestGivingBackOnlyToBalance(t *testing.T) {
	t.Parallel()
	a, b := openLeaderStores(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = 6 * time.Second // ticks of 500 ms; a shed partition trusted 4 s
	ma, err := a.JoinRelayTTL(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ma.Leave)
	testkit.Eventually(t, 10*time.Second, "the first member to lead every partition", func() bool {
		return len(ma.Partitions()) == store.RelayPartitions
	})
	givingBack := func() (n int) {
		for p := range store.RelayPartitions {
			if until, ok := ma.GivingBack(p); ok && until.After(time.Now()) {
				n++
			}
		}
		return n
	}
	if n := givingBack(); n != 0 {
		t.Fatalf("%d partitions given back by a member alone", n)
	}
	mb, err := b.JoinRelayTTL(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mb.Leave)
	testkit.Eventually(t, 10*time.Second, "the first member to hand half its partitions over", func() bool {
		return givingBack() == store.RelayPartitions/2
	})

	// An earlier release's relay takes relay_lease (its own live session).
	old, err := b.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release()
	if _, err := old.Exec(ctx, `UPDATE relay_lease SET holder = 'earlier-release', holder_pid = pg_backend_pid(),
		holder_started = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()),
		expires_at = now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the member to give every partition back", func() bool {
		return len(ma.Partitions()) == 0
	})
	if n := givingBack(); n != 0 {
		t.Fatalf("%d partitions handed over while an earlier release leads, want every one stopped at once", n)
	}
}

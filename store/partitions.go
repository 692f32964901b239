package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RelayPartitions is the number of partitions of the log's keys, each led
// by one relay at a time (docs/design.md#relay-partitions). An event's
// partition is a pure function of its subject (partitionOf), so every event
// of one (subscription, subject key) is in one partition and a key's order
// needs no more than one leader per partition. Changing it needs every
// worker stopped and a migration that remakes the rows of relay_partitions,
// its CHECK and the index events_relay_partition (0029 makes 0..15).
const RelayPartitions = 16

// partitionOf is the SQL expression of an event row's partition, exactly as
// the index events_relay_partition has it: PostgreSQL's hash of the subject
// (the one hash partitioning relies on staying fixed) masked to
// RelayPartitions.
const partitionOf = `(hashtextextended(subject, 0) & 15)`

// SubjectPartitionSQL is partitionOf of the subject given as a statement's
// first argument ($1): which partition a key's events are in, for
// diagnostics that read relay_partitions.
const SubjectPartitionSQL = `(SELECT ` + partitionOf + ` FROM (SELECT $1::text AS subject) AS k)`

// PartitionLeaseTTL is how long a relay's partition leases and its worker
// row last unless renewed. Renewals run every memberTick (1 s), so a relay
// whose connection lingers without answering (a network partition, a frozen
// host) is replaced within PartitionLeaseTTL plus a tick of the one that
// takes over, under 15 s; one whose connection is gone within a tick.
const PartitionLeaseTTL = 12 * time.Second

// Member is a relay's place among the relays of one database: a connection
// of its own, which LISTENs on NotifyChannel, a row of relay_workers, and
// the rows of relay_partitions it holds (holder, the backend of that
// connection, expiry). Only Herald's roles may update those rows. Every
// memberTick it renews them, counts the live workers and takes free
// partitions up to ceil(RelayPartitions / live workers), or marks the
// partitions above that share to be given back; the relay stops
// dispatching those and calls Stopped, and the next tick frees their rows.
//
// A partition is trusted for two thirds of the TTL after the renewal that
// last extended it was sent (Check), so its dispatching stops before its
// row can expire for another relay. The member dispatches nothing while a
// relay of an earlier release leads through relay_lease or the advisory
// lock before it (the gate): the members hold relay_lease themselves, so
// such a relay stands by.
type Member struct {
	conn   *pgxpool.Conn
	holder string
	ttl    time.Duration

	wake    chan struct{} // a notification arrived (capacity 1)
	changed chan struct{} // the partitions led changed (capacity 1)
	lost    chan struct{} // closed when the member's connection or a renewal failed
	stop    context.CancelFunc
	done    chan struct{} // closed when the keeping goroutine ended
	end     sync.Once     // Leave or Abandon, whichever comes first

	mu      sync.Mutex
	err     error             // why the member was lost
	valid   map[int]time.Time // held partitions, trusted until then (local clock)
	shed    map[int]bool      // held partitions to give back: no longer renewed
	stopped map[int]bool      // shed or lapsed partitions whose dispatching ended: to free
	workers int               // live workers at the last tick
	oldLock bool              // holds the advisory lock of releases before 0014
	// gateShut: at the last tick a relay of an earlier release led (or
	// relay_lease had no live holder), so every partition is given back
	// and must stop at once (GivingBack).
	gateShut bool
}

// memberTick is how often a member renews, counts and rebalances: a
// twelfth of its TTL.
func memberTick(ttl time.Duration) time.Duration { return ttl / 12 }

// JoinRelay makes this relay a member of its database's relays, on a
// connection of its own. It holds no partition yet; the first tick, at
// once, takes its share.
func (s *Store) JoinRelay(ctx context.Context) (*Member, error) {
	return s.joinRelay(ctx, PartitionLeaseTTL)
}

func (s *Store) joinRelay(ctx context.Context, ttl time.Duration) (*Member, error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire the relay's connection: %w", err)
	}
	m := &Member{conn: conn, holder: uuid.NewString(), ttl: ttl,
		wake: make(chan struct{}, 1), changed: make(chan struct{}, 1), lost: make(chan struct{}),
		done: make(chan struct{}), valid: map[int]time.Time{}, shed: map[int]bool{}, stopped: map[int]bool{}}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("listen on %s: %w", NotifyChannel, err)
	}
	rctx, stop := context.WithCancel(context.Background())
	m.stop = stop
	go m.keep(rctx)
	return m, nil
}

// keep owns the member's connection: it waits for notifications and ticks,
// until ctx ends or the member is lost.
func (m *Member) keep(ctx context.Context) {
	defer close(m.done)
	next := time.Now()
	for {
		wctx, cancel := context.WithDeadline(ctx, next)
		_, err := m.conn.Conn().WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			select {
			case m.wake <- struct{}{}:
			default:
			}
			continue
		case !errors.Is(err, context.DeadlineExceeded):
			m.lose(fmt.Errorf("the relay partitions' connection failed: %w", err))
			return
		}
		if err := m.tick(ctx); err != nil {
			if ctx.Err() == nil {
				m.lose(err)
			}
			return
		}
		next = time.Now().Add(memberTick(m.ttl))
	}
}

// The statements of a tick. $1 is the member's holder, $2 the TTL in
// seconds. A row's holder counts as gone when its backend is no longer in
// pg_stat_activity; a holder's backend_start shows only to roles that may
// see its session, and unseen, a live pid counts as the holder's.
const (
	backendStart = `(SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())`

	heartbeat = `
		INSERT INTO relay_workers (holder, holder_pid, holder_started, expires_at)
		VALUES ($1, pg_backend_pid(), ` + backendStart + `, now() + make_interval(secs => $2))
		ON CONFLICT (holder) DO UPDATE SET holder_pid = EXCLUDED.holder_pid,
		       holder_started = EXCLUDED.holder_started, expires_at = EXCLUDED.expires_at`
	renewPartitions = `
		UPDATE relay_partitions SET expires_at = now() + make_interval(secs => $2)
		 WHERE holder = $1 AND holder_pid = pg_backend_pid() AND partition = ANY($3::smallint[])
		RETURNING partition`
	freePartitions = `
		UPDATE relay_partitions SET holder = NULL, holder_pid = NULL, holder_started = NULL, expires_at = '-infinity'
		 WHERE holder = $1 AND partition = ANY($2::smallint[])`
	// takeGate renews relay_lease when this member holds it and takes it
	// when it is free, as a leader of an earlier release would.
	takeGate = `
		UPDATE relay_lease AS l
		   SET holder = $1, holder_pid = pg_backend_pid(), holder_started = ` + backendStart + `,
		       expires_at = now() + make_interval(secs => $2)
		 WHERE (l.holder = $1 AND l.holder_pid = pg_backend_pid())
		    OR l.holder IS NULL OR l.expires_at < now() OR NOT ` + `EXISTS (SELECT 1 FROM pg_stat_activity a
	                  WHERE a.pid = l.holder_pid
	                    AND (a.backend_start IS NULL OR a.backend_start = l.holder_started))`
	// gateOpen: a live member (this one or another) holds relay_lease. A
	// statement of its own after takeGate, so that it sees the lease another
	// member took while takeGate waited for it.
	gateOpen = `
		SELECT EXISTS (SELECT 1 FROM relay_lease l JOIN relay_workers w ON w.holder = l.holder
		                WHERE l.expires_at > now() AND w.expires_at > now())`
	dropWorkers = `
		DELETE FROM relay_workers w
		 WHERE w.holder <> $1 AND (w.expires_at < now() OR NOT ` + `EXISTS (SELECT 1 FROM pg_stat_activity a
	                  WHERE a.pid = w.holder_pid
	                    AND (a.backend_start IS NULL OR a.backend_start = w.holder_started)))`
	liveWorkers = `SELECT count(*) FROM relay_workers WHERE expires_at > now()`
	// takePartitions takes up to $3 free partitions, lowest first: given
	// back, expired, or their holder's backend gone.
	takePartitions = `
		UPDATE relay_partitions AS p
		   SET holder = $1, holder_pid = pg_backend_pid(), holder_started = ` + backendStart + `,
		       expires_at = now() + make_interval(secs => $2)
		 WHERE p.partition IN (
		         SELECT q.partition FROM relay_partitions q
		          WHERE q.holder IS NULL OR q.expires_at < now() OR NOT ` + `EXISTS (SELECT 1 FROM pg_stat_activity a
	                  WHERE a.pid = q.holder_pid
	                    AND (a.backend_start IS NULL OR a.backend_start = q.holder_started))
		          ORDER BY q.partition LIMIT $3 FOR UPDATE SKIP LOCKED)
		   AND (p.holder IS NULL OR p.expires_at < now() OR NOT ` + `EXISTS (SELECT 1 FROM pg_stat_activity a
	                  WHERE a.pid = p.holder_pid
	                    AND (a.backend_start IS NULL OR a.backend_start = p.holder_started)))
		RETURNING partition`
)

// tick renews the member's rows, frees the partitions whose dispatching
// ended after they were shed, and takes or sheds partitions toward its
// share. Its statements are bounded by the time the member still trusts
// the partitions it holds, so a hung connection makes it lost before they
// can expire for another.
func (m *Member) tick(ctx context.Context) error {
	m.mu.Lock()
	var renew, free []int16
	deadline := time.Now().Add(m.ttl)
	for p, v := range m.valid {
		if !m.shed[p] {
			renew = append(renew, int16(p))
			if v.Before(deadline) {
				deadline = v
			}
		}
	}
	for p := range m.stopped {
		free = append(free, int16(p))
	}
	oldLock := m.oldLock
	m.mu.Unlock()
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	sent := time.Now()
	gate := true
	if !oldLock {
		got, old, err := oldLeaderRuns(tctx, m.conn)
		if err != nil {
			return err
		}
		oldLock, gate = got, !old
	}
	secs := m.ttl.Seconds()
	b := &pgx.Batch{}
	b.Queue(heartbeat, m.holder, secs)
	b.Queue(renewPartitions, m.holder, secs, renew)
	b.Queue(freePartitions, m.holder, free)
	b.Queue(takeGate, m.holder, secs)
	b.Queue(gateOpen)
	b.Queue(dropWorkers, m.holder)
	b.Queue(liveWorkers)
	br := m.conn.SendBatch(tctx, b)
	renewed, open, workers, err := readTick(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("renew the relay partitions: %w", err)
	}
	gate = gate && open
	share := 0
	if gate {
		share = (RelayPartitions + workers - 1) / max(workers, 1)
	}
	var took []int16
	if want := share - len(renewed); want > 0 {
		rows, err := m.conn.Query(tctx, takePartitions, m.holder, secs, want)
		if err == nil {
			took, err = pgx.CollectRows(rows, pgx.RowTo[int16])
		}
		if err != nil {
			return fmt.Errorf("take relay partitions: %w", err)
		}
	}
	m.settle(sent, renew, renewed, took, free, share, workers, oldLock, gate)
	return nil
}

// readTick reads the results of a tick's batch: the partitions renewed,
// whether the gate is open and how many workers live.
func readTick(br pgx.BatchResults) (renewed []int16, open bool, workers int, err error) {
	if _, err := br.Exec(); err != nil {
		return nil, false, 0, fmt.Errorf("worker row: %w", err)
	}
	rows, err := br.Query()
	if err == nil {
		renewed, err = pgx.CollectRows(rows, pgx.RowTo[int16])
	}
	if err != nil {
		return nil, false, 0, fmt.Errorf("renew: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, false, 0, fmt.Errorf("give back: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, false, 0, fmt.Errorf("relay_lease: %w", err)
	}
	if err := br.QueryRow().Scan(&open); err != nil {
		return nil, false, 0, fmt.Errorf("relay_lease: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, false, 0, fmt.Errorf("drop gone workers: %w", err)
	}
	if err := br.QueryRow().Scan(&workers); err != nil {
		return nil, false, 0, fmt.Errorf("count workers: %w", err)
	}
	return renewed, open, workers, nil
}

// settle records a tick's outcome: renewed and taken partitions are
// trusted until validFor after sent; partitions not renewed lapse (another
// relay took them, which a member that honours Check never allows); freed
// ones are forgotten; the partitions above share are marked to be given
// back, highest first, so partition 0 (and its global duties) moves least.
func (m *Member) settle(sent time.Time, renew, renewed, took, free []int16, share, workers int, oldLock, gate bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	before := m.ledLocked()
	m.workers, m.oldLock, m.gateShut = workers, oldLock, !gate
	until := sent.Add(validFor(m.ttl))
	for _, p := range free {
		delete(m.stopped, int(p))
		delete(m.shed, int(p))
		delete(m.valid, int(p))
	}
	for _, p := range renew {
		if !slices.Contains(renewed, p) {
			delete(m.valid, int(p)) // lapsed: the relay stops it and calls Stopped
		}
	}
	for _, p := range renewed {
		m.valid[int(p)] = until
	}
	for _, p := range took {
		m.valid[int(p)] = until
		delete(m.shed, int(p))
		delete(m.stopped, int(p))
	}
	led := m.ledLocked()
	for i, n := len(led)-1, len(led); i >= 0 && n > share; i, n = i-1, n-1 {
		m.shed[led[i]] = true
	}
	if !slices.Equal(before, m.ledLocked()) {
		select {
		case m.changed <- struct{}{}:
		default:
		}
	}
}

// ledLocked lists the partitions held and not shed, in ascending order.
func (m *Member) ledLocked() []int {
	var out []int
	for p := range m.valid {
		if !m.shed[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// lose records why the member was lost and wakes whoever waits on it.
func (m *Member) lose(err error) {
	m.mu.Lock()
	m.err = err
	m.valid = map[int]time.Time{}
	m.mu.Unlock()
	close(m.lost)
}

// Partitions lists the partitions this member leads: held, trusted and not
// to be given back, in ascending order.
func (m *Member) Partitions() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []int
	for _, p := range m.ledLocked() {
		if now.Before(m.valid[p]) {
			out = append(out, p)
		}
	}
	return out
}

// Workers is how many relays were live at the last tick, this one included.
func (m *Member) Workers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workers
}

// Changed receives after a tick changed the partitions led.
func (m *Member) Changed() <-chan struct{} { return m.changed }

// Wake receives when an event was published (a notification arrived).
func (m *Member) Wake() <-chan struct{} { return m.wake }

// Lost is closed when the member is lost: its connection failed or a tick
// failed. It must stop dispatching every partition then.
func (m *Member) Lost() <-chan struct{} { return m.lost }

// Err is why the member was lost (nil while it is not).
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Check reports an error unless partition p is still this member's to
// dispatch: held, renewed in time, not to be given back, on a connection
// that has not failed. Every round of a partition checks first, so a relay
// that lost a partition stops within a round.
func (m *Member) Check(p int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch v, held := m.valid[p]; {
	case m.err != nil:
		return m.err
	case !held:
		return fmt.Errorf("relay partition %d is no longer this relay's", p)
	case m.shed[p]:
		return fmt.Errorf("relay partition %d is being given back to balance the relays", p)
	case time.Now().After(v):
		return fmt.Errorf("relay partition %d was not renewed in time", p)
	}
	return nil
}

// GivingBack reports whether partition p is being given back to balance
// the relays while the member still trusts it, and until when: its
// dispatching may end the round under way until then (not start another:
// Check), and must have stopped by then. Not while the gate is shut: a
// relay of an earlier release may be dispatching every partition, and
// this member's must stop at once.
func (m *Member) GivingBack(p int) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, held := m.valid[p]
	if m.err != nil || m.gateShut || !held || !m.shed[p] || !time.Now().Before(v) {
		return time.Time{}, false
	}
	return v, true
}

// Shedding lists the partitions the member gives back whose dispatching
// it has not been told ended (Stopped), in ascending order.
func (m *Member) Shedding() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for p := range m.shed {
		if !m.stopped[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Stopped tells the member that the dispatching of partition p ended; a
// partition it gives back is freed at the next tick.
func (m *Member) Stopped(p int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shed[p] {
		m.stopped[p] = true
	}
}

// Leave gives back every partition and relay_lease, deletes the member's
// worker row and closes its connection, which holds a LISTEN and must
// never go back to the pool. Call it once nothing dispatches any more; it
// does nothing after Leave or Abandon.
func (m *Member) Leave() { m.end.Do(m.leave) }

func (m *Member) leave() {
	m.stop()
	<-m.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`UPDATE relay_partitions SET holder = NULL, holder_pid = NULL, holder_started = NULL,
		expires_at = '-infinity' WHERE holder = $1`, m.holder)
	b.Queue(`UPDATE relay_lease SET holder = NULL, holder_pid = NULL, holder_started = NULL,
		expires_at = '-infinity' WHERE holder = $1`, m.holder)
	b.Queue(`DELETE FROM relay_workers WHERE holder = $1`, m.holder)
	_ = m.conn.SendBatch(ctx, b).Close()
	closeConn(m.conn)
}

// Abandon stops the member without giving anything back, as a worker that
// froze would: its rows stay until they expire, and its connection stays
// open (out of the pool) for twice the TTL, so others take its partitions
// only at their expiry. For failover tests and drills; it does nothing
// after Leave or Abandon.
func (m *Member) Abandon() { m.end.Do(m.abandon) }

func (m *Member) abandon() {
	m.stop()
	<-m.done
	conn := m.conn.Hijack()
	time.AfterFunc(2*m.ttl, func() { _ = conn.Close(context.Background()) })
}

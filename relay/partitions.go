package relay

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"herald/store"
)

// partitionLoop is the dispatching of one partition this relay leads.
type partitionLoop struct {
	p      int
	cancel context.CancelFunc
	wake   chan struct{} // a round is due (capacity 1)
	done   chan struct{} // closed when the loop ended
	// handOver, set when the member gives the partition back, cancels the
	// loop when the member stops trusting the partition, if the round
	// under way has not ended by then; drain is closed then, so that the
	// round begins no other key (withDrain).
	handOver *time.Timer
	drain    chan struct{}
}

// serve joins the database's relays (store.Member) and dispatches the
// partitions that fall to this relay, one loop each, until ctx ends or the
// member is lost. It starts and stops loops as the member takes and gives
// back partitions; a partition is given back only after its loop ended.
// The duties that are not per key (the sweep of removed subscriptions and
// the re-drive of keys whose workflow is gone) belong to the leader of
// partition 0.
func (r *Relay) serve(ctx context.Context) error {
	m, err := r.Store.JoinRelay(ctx)
	if err != nil {
		return err
	}
	sctx, stopAll := context.WithCancel(ctx)
	loops := map[int]*partitionLoop{}
	ended := make(chan *partitionLoop)
	defer func() {
		stopAll()
		for _, l := range loops {
			<-l.done
		}
		r.setLed(nil)
		if r.abandon {
			m.Abandon()
		} else {
			m.Leave()
		}
	}()
	var found atomic.Uint64 // the partitions the probe found new events in, a bit each
	pulse := make(chan struct{}, 1)
	go r.probe(sctx, m.Wake(), &found, pulse)
	for {
		r.reconcile(sctx, m, loops, ended)
		select {
		case <-ctx.Done():
			return nil
		case <-m.Lost():
			return m.Err()
		case <-m.Changed():
		case <-pulse:
			wakeFound(loops, found.Swap(0))
		case l := <-ended:
			if loops[l.p] == l {
				if l.handOver != nil {
					l.handOver.Stop()
				}
				delete(loops, l.p)
				m.Stopped(l.p)
			}
		}
	}
}

// reconcile stops the loops of partitions the member no longer leads (and
// tells it they stopped) and starts one for each partition it newly leads.
//
// A partition given back to balance the relays (a relay joined) is handed
// over: its loop's round under way finishes the keys it began, leaves the
// others to the next leader (withDrain), and the loop stops before the
// next round (Member.Check); serve tells the member once it ended. Cancelling that
// round would cut its calls short, and an eager start cut short may have
// created a run whose first workflow task no worker holds (the key waits
// out the task's 10 s timeout: start.go). The member trusts the partition
// until its lease could lapse, and the loop is cancelled then if it has not
// ended. A partition the member lost, or stopped trusting, or gives back
// because a relay of an earlier release leads (the gate), is stopped at
// once, even while it was being handed over. One given back with no loop
// (taken and given back between two reconciles) is stopped already.
func (r *Relay) reconcile(ctx context.Context, m *store.Member, loops map[int]*partitionLoop, ended chan<- *partitionLoop) {
	// A partition taken and given back again before a reconcile saw it has
	// no loop: nothing dispatches it, and the member frees it at its next
	// tick rather than leaving it to lapse. This runs before want is read,
	// so no loop starts below for a partition the member was told stopped.
	for _, p := range m.Shedding() {
		if loops[p] == nil {
			m.Stopped(p)
		}
	}
	want := m.Partitions()
	for p, l := range loops {
		if slices.Contains(want, p) {
			continue
		}
		if until, ok := m.GivingBack(p); ok {
			if l.handOver == nil {
				l.handOver = time.AfterFunc(time.Until(until), l.cancel)
				close(l.drain) // the round under way begins no other key
				wakeLoop(l)    // a loop waiting for its next round stops now
			}
			continue
		}
		if l.handOver != nil {
			l.handOver.Stop()
		}
		l.cancel()
		<-l.done
		delete(loops, p)
		m.Stopped(p)
	}
	for _, p := range want {
		if loops[p] != nil {
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		l := &partitionLoop{p: p, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}), drain: make(chan struct{})}
		loops[p] = l
		go func() {
			err := r.leadPartition(lctx, m, l)
			cancel()
			if err != nil && ctx.Err() == nil {
				r.Logger.Info("relay partition stopped", zap.Int("partition", p), zap.Error(err))
			}
			close(l.done)
			select {
			case ended <- l:
			case <-ctx.Done():
			}
		}()
	}
	var led []int
	for p, l := range loops {
		if l.handOver == nil {
			led = append(led, p)
		}
	}
	slices.Sort(led)
	if !slices.Equal(led, r.Partitions()) {
		r.Logger.Info("relay partitions led", zap.Ints("partitions", led), zap.Int("relays", m.Workers()))
	}
	r.setLed(led)
}

// closed reports whether ch is closed (a nil ch never is).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// One bit a partition in the probe's findings: fails to compile with more
// than 64 partitions.
var _ [64 - store.RelayPartitions]struct{}

// wakeFound wakes the loops of the partitions whose bits are set in found.
func wakeFound(loops map[int]*partitionLoop, found uint64) {
	for p, l := range loops {
		if found&(1<<p) != 0 {
			wakeLoop(l)
		}
	}
}

func wakeLoop(l *partitionLoop) {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// probe wakes the partition loops when the log grew: on a notification
// (the HTTP API's and starter publish's commits send one) and every
// IdlePoll it reads the log's highest sequence number, one index probe.
// While that is above the top it saw PollInterval ago (lookBack: the log
// grew within the last PollInterval), it reads which partitions hold
// events not tried yet above that older top (one probe a partition), adds
// them to found and sends on pulse, so that only their loops run a round:
// a publish to a few keys costs a few reads of the log, not one per
// partition, and an idle log one read of its top. Looking back a
// PollInterval finds, at the next probe, an event whose sequence number
// was taken before the last top seen but whose transaction committed after
// it (a concurrent publish, a PublishTx that went on working); one that
// committed later than that waits for its partition's round of every
// PollInterval. Its first read, and one whose partitions it could not
// read, wake every loop. Events committed in other transactions than
// Herald's own (PublishTx, a publisher role, a key workflow's operational
// event) send no wake-up, so they wait at most IdlePoll.
func (r *Relay) probe(ctx context.Context, notified <-chan struct{}, found *atomic.Uint64, pulse chan<- struct{}) {
	seen := int64(-1)
	var back lookBack
	t := time.NewTicker(r.IdlePoll)
	defer t.Stop()
	for {
		top, err := r.Store.MaxSeq(ctx)
		now := time.Now()
		if err == nil {
			after := back.after(now, r.PollInterval)
			grew := top > seen
			if after < top { // grew, or did within the last PollInterval
				wake := ^uint64(0) // every partition
				if seen >= 0 {
					if ps, err := r.Store.PartitionsAbove(ctx, after); err == nil {
						wake = 0
						for _, p := range ps {
							wake |= 1 << p
						}
					}
				}
				if grew {
					back.saw(now, top)
					seen = top
				}
				if wake != 0 {
					found.Or(wake) // before the send: serve takes the bits when it receives
					select {
					case pulse <- struct{}{}:
					default:
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-notified:
		case <-t.C:
		}
	}
}

// lookBack remembers the tops of the log the probe saw within the last
// window (PollInterval), oldest first, and the newest one seen before.
type lookBack []topMark

type topMark struct {
	at  time.Time
	top int64
}

// saw records top, seen at now.
func (b *lookBack) saw(now time.Time, top int64) { *b = append(*b, topMark{at: now, top: top}) }

// after is the newest top seen at least window before now: events above
// it may have committed since the probe last looked (-1 while no top seen
// is that old: any event may).
func (b *lookBack) after(now time.Time, window time.Duration) int64 {
	for len(*b) > 1 && now.Sub((*b)[1].at) >= window {
		*b = (*b)[1:]
	}
	if len(*b) == 0 || now.Sub((*b)[0].at) < window {
		return -1
	}
	return (*b)[0].top
}

// leadPartition dispatches partition l.p until ctx ends or the member
// stops trusting the partition. Every round first checks that it still
// does: a backlog keeps the loop going without waiting on the member, and
// a partition lost may already have another leader. A round under way when
// the member is lost or stops trusting the partition is cancelled (the key
// workflows drop what they already have); one under way when it gives the
// partition back ends first (reconcile). An idle partition runs a round
// when woken (a notification or the probe) and at least every
// PollInterval, which finds events backing off that came due.
func (r *Relay) leadPartition(ctx context.Context, m *store.Member, l *partitionLoop) error {
	if l.p == 0 {
		var wg sync.WaitGroup
		wg.Add(1)
		// The sweep runs beside dispatching, so a removal with many held
		// keys never delays the events of other subscriptions. It stops
		// with the loop.
		sctx, stopSweep := context.WithCancel(ctx)
		go func() { defer wg.Done(); r.sweepLoop(sctx) }()
		defer wg.Wait()
		defer stopSweep()
	}
	for ctx.Err() == nil && !closed(l.drain) {
		if err := m.Check(l.p); err != nil {
			return err
		}
		select {
		case <-l.wake: // this round covers it
		default:
		}
		started := time.Now()
		evs, err := r.Store.UndispatchedIn(ctx, l.p, r.BatchSize, r.RoundBytes)
		var round Round
		if err == nil {
			round, err = r.dispatch(withDrain(ctx, l.drain), evs)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.Logger.Warn("relay round failed", zap.Int("partition", l.p), zap.Error(err))
			sleep(ctx, r.PollInterval)
			continue
		}
		round.Partition = l.p
		if r.OnRound != nil {
			r.OnRound(round)
		}
		if closed(l.drain) {
			return nil // handed over: the next leader sends the rest
		}
		more := round.Events == r.BatchSize || store.EnvelopeBytes(evs) >= r.RoundBytes
		switch {
		case round.Failed > 0 && round.Signals == 0 && (round.Unavailable > 0 || !more):
			// Temporal accepted nothing: do not spin through the backlog.
			// A round that more events wait behind and whose keys were
			// refused for reasons of their own goes on: a round cut by its
			// bytes may hold one failing key's events alone, and the other
			// keys behind them would wait out the poll interval.
			sleep(ctx, r.PollInterval)
			continue
		case more:
			continue // more is waiting; failed keys back off
		}
		t := time.NewTimer(r.PollInterval - time.Since(started))
		select {
		case <-ctx.Done():
		case <-l.wake:
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

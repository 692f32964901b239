package store

import (
	"context"
	"sync"
	"time"
)

// Publishing wakes the relay without serialising publishers.
//
// PostgreSQL commits the transactions that ran NOTIFY one at a time, under
// one lock for the whole server: a pg_notify inside every publish would
// queue every app's publishing transactions (PublishTx's too, with the
// caller's own rows and locks held) behind each other's commits. So no
// publishing transaction notifies. A publish in a transaction of Herald's
// own (InsertEvents: the HTTP API, starter publish) wakes the relay after it
// committed, through this store's wake-up: one goroutine sends pg_notify on
// NotifyChannel, folding every wake-up asked for while it was sending, or
// within wakeGap of that, into the next one, so a burst of publishers costs
// a notification or two and a steady stream one every wakeGap, none of them
// inside a publisher's transaction. Events committed in a caller's
// transaction (PublishTx, the publisher-role functions) and operational
// events wait for the relay's poll (HERALD_RELAY_POLL_INTERVAL).
type wake struct {
	mu      sync.Mutex
	started bool
	closed  bool
	poke    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// wakeTimeout bounds one notification: the relay polls anyway.
const wakeTimeout = 5 * time.Second

// wakeGap is the least time between two notifications. A transaction that
// notifies takes a transaction id and commits, waiting for its WAL flush
// with synchronous_commit on, under PostgreSQL's server-wide notify lock:
// sent back to back while publishers commit without pause, they were about
// one commit more for every two or three publishes, and 64 publishers
// through InsertEvents reached 0.71x and 0.73x of plain autocommit INSERTs
// against 0.86x and 0.91x with no notification (BenchmarkConcurrentPublish
// at 7c08af5, durable cluster, 2026-12-05). A wake-up asked for within the
// gap is sent at its end, folded with any other, so the relay waits at most
// this much more under a steady stream of publishes, and not at all for a
// publish after a pause.
const wakeGap = 25 * time.Millisecond

// WakeRelay asks for the relay to be woken: at once when no notification
// is being sent or was sent within wakeGap, else when the gap after the
// last one ends. It never blocks. A
// notification that fails is dropped: the relay's poll finds the events.
func (s *Store) WakeRelay() {
	w := &s.wake
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	if !w.started {
		w.started = true
		w.poke = make(chan struct{}, 1)
		w.stop = make(chan struct{})
		w.done = make(chan struct{})
		go s.sendWakeUps(w.poke, w.stop, w.done)
	}
	poke := w.poke
	w.mu.Unlock()
	select {
	case poke <- struct{}{}:
	default: // one is pending already: it covers this one
	}
}

// sendWakeUps sends one notification per pending wake-up until stop, at
// most one every wakeGap.
func (s *Store) sendWakeUps(poke <-chan struct{}, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-poke:
		}
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		// The payload names the schema, which the relay ignores: the
		// channel is database-wide, and tests in schemas of their own tell
		// their wake-ups apart by it.
		_, _ = s.Pool.Exec(ctx, `SELECT pg_notify($1, current_schema())`, NotifyChannel)
		cancel()
		gap := time.NewTimer(wakeGap)
		select {
		case <-stop:
			gap.Stop()
			return
		case <-gap.C:
		}
	}
}

// closeWake stops the wake-up goroutine (waiting for a notification under
// way) before the pool closes.
func (s *Store) closeWake() {
	w := &s.wake
	w.mu.Lock()
	started := w.started && !w.closed
	w.closed = true
	w.mu.Unlock()
	if started {
		close(w.stop)
		<-w.done
	}
}

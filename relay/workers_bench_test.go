package relay_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"herald/internal/testkit"
	"herald/relay"
	"herald/store"
)

// latencySignaler stands in for Temporal: every SignalWithStart costs a
// fixed round trip, and is counted.
type latencySignaler struct {
	latency time.Duration
	signals atomic.Int64
}

func (l *latencySignaler) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions,
	any, ...any) (client.WorkflowRun, error) {
	time.Sleep(l.latency)
	l.signals.Add(1)
	return nil, nil
}

func (l *latencySignaler) SignalWorkflow(context.Context, string, string, string, any) error {
	return nil
}

// benchRecordParallel is the relays' RecordParallel in
// BenchmarkDispatchWorkers: -args -relay.record-parallel=-1 measures them
// without the cap, beside the default (0).
var benchRecordParallel = flag.Int("relay.record-parallel", 0, "Relay.RecordParallel of BenchmarkDispatchWorkers's relays")

// Shape of BenchmarkDispatchWorkers: a burst of benchEvents events, one per
// key, each for one subscription.
const benchEvents = 5000

// dispatchEnv is one database with its relays running, balanced.
type dispatchEnv struct {
	st     *store.Store
	sig    *latencySignaler
	relays []*relay.Relay
	stop   func()
	burst  int
}

func newDispatchEnv(b *testing.B, relays int, latency time.Duration) *dispatchEnv {
	st, _ := setup(b)
	env := &dispatchEnv{st: st, sig: &latencySignaler{latency: latency}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range relays {
		// Each relay is a worker of its own, with its own pool of the
		// workers' default size (config.DefaultDBMaxConns).
		own, err := store.Open(ctx, st.Pool.Config().ConnString(), store.Options{MaxConns: 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(own.Close)
		r := &relay.Relay{Store: own, Temporal: env.sig, RecordParallel: *benchRecordParallel}
		env.relays = append(env.relays, r)
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	env.stop = func() { cancel(); wg.Wait() }
	testkit.Eventually(b, 30*time.Second, "the relays to share the partitions evenly", func() bool {
		for _, r := range env.relays {
			if len(r.Partitions()) != store.RelayPartitions/relays {
				return false
			}
		}
		return true
	})
	return env
}

// burst publishes benchEvents events in one transaction (one per new key,
// contacts.person.deleted, to which crm alone subscribes) and returns how
// long after the commit the relays took to signal all of them.
func (e *dispatchEnv) burst1(b *testing.B) time.Duration {
	e.burst++
	evs := oneEventKeys("contacts.person.deleted", fmt.Sprintf("b%d-k", e.burst), benchEvents)
	want := e.sig.signals.Load() + benchEvents
	if _, err := e.st.InsertEvents(context.Background(), evs); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for e.sig.signals.Load() < want {
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("%d of %d signals after 2 minutes", e.sig.signals.Load()-want+benchEvents, benchEvents)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// BenchmarkDispatchWorkers measures publish → signal throughput with one
// relay and with two relays on one database (issue 29's goal: two ≥ 1.6×
// one). Each signal costs a fixed round trip standing in for Temporal's:
// 5 ms, and 20 ms as on a cluster across a network. A relay's throughput is
// bounded by its signals in flight (Relay.Parallel, 64) over that round
// trip, and by PostgreSQL's share of the machine; the two set-ups take
// turns, one burst each per iteration, so drift on a shared machine hits
// both.
func BenchmarkDispatchWorkers(b *testing.B) {
	for _, latency := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond} {
		b.Run(fmt.Sprintf("signal=%v", latency), func(b *testing.B) {
			one, two := newDispatchEnv(b, 1, latency), newDispatchEnv(b, 2, latency)
			defer one.stop()
			defer two.stop()
			var t1, t2 time.Duration
			b.ResetTimer()
			for range b.N {
				t1 += one.burst1(b)
				t2 += two.burst1(b)
			}
			b.StopTimer()
			r1 := float64(benchEvents*b.N) / t1.Seconds()
			r2 := float64(benchEvents*b.N) / t2.Seconds()
			b.ReportMetric(r1, "events/s-1relay")
			b.ReportMetric(r2, "events/s-2relays")
			b.ReportMetric(r2/r1, "ratio")
			b.Logf("publish → signal, %d events of one key each, %v a signal: 1 relay %.0f events/s, 2 relays %.0f events/s (%.2f×)",
				benchEvents, latency, r1, r2, r2/r1)
		})
	}
}

// oneEventKeys returns n events of type typ (of app contacts, version 1),
// each of a key of its own, prefix<i>, as the relay reads them from the
// log: the row insert of a burst, without the publisher.
func oneEventKeys(typ, prefix string, n int) []store.NewEvent {
	evs := make([]store.NewEvent, n)
	for i := range evs {
		id := uuid.NewString()
		evs[i] = store.NewEvent{ID: id, SourceApp: "contacts", Type: typ, Version: 1,
			Subject: fmt.Sprintf("%s%d", prefix, i), Envelope: []byte(fmt.Sprintf(`{"id":%q}`, id)), ContentHash: id}
	}
	return evs
}

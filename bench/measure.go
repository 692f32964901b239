package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"herald/internal/procstat"
)

// plannedEvent is one event of a measurement: its id, key and number within
// the key (1, 2, …), which the sink checks for order.
type plannedEvent struct {
	ID  string
	Key string
	N   int
}

// phase is one measurement being driven: the events in publishing order,
// the subscriptions each goes to, and when each delivery was published.
type phase struct {
	shape  Shape
	system string
	keys   []string
	events []plannedEvent
	subs   []string

	mu        sync.Mutex
	published map[delivery]time.Time
	// arrived is when the sink first received each delivery, once measured.
	arrived map[delivery]time.Time
}

// newPhase plans a shape: keys named after the run and shape, events ordered
// number-major (event 1 of every key, then event 2, …) so every key is busy
// from the start.
func newPhase(runID string, sh Shape, system string, subs []string) (*phase, error) {
	ph := &phase{shape: sh, system: system, subs: subs, published: make(map[delivery]time.Time, sh.Deliveries())}
	for k := range sh.Keys {
		ph.keys = append(ph.keys, fmt.Sprintf("%s-%s-%05d", runID, sh.Name, k+1))
	}
	for n := 1; n <= sh.EventsPerKey; n++ {
		for _, key := range ph.keys {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("generate event id: %w", err)
			}
			ph.events = append(ph.events, plannedEvent{ID: id.String(), Key: key, N: n})
		}
	}
	return ph, nil
}

// expected lists every delivery the sink should see.
func (ph *phase) expected() []delivery {
	out := make([]delivery, 0, len(ph.events)*len(ph.subs))
	for _, ev := range ph.events {
		for _, sub := range ph.subs {
			out = append(out, delivery{Sub: sub, ID: ev.ID})
		}
	}
	return out
}

// stamp records that event id was published to sub at t.
func (ph *phase) stamp(sub, id string, t time.Time) {
	ph.mu.Lock()
	ph.published[delivery{Sub: sub, ID: id}] = t
	ph.mu.Unlock()
}

// publishedFor looks up when an event was published to sub.
func (ph *phase) publishedFor(sub string) func(id string) (time.Time, bool) {
	return func(id string) (time.Time, bool) {
		ph.mu.Lock()
		defer ph.mu.Unlock()
		t, ok := ph.published[delivery{Sub: sub, ID: id}]
		return t, ok
	}
}

// stampAll records that event id was published to every subscription at t.
func (ph *phase) stampAll(id string, t time.Time) {
	for _, sub := range ph.subs {
		ph.stamp(sub, id, t)
	}
}

// measure runs drive (which publishes the phase's events) against a fresh
// sink recording, waits for the deliveries and computes the figures.
// workerPID, when not 0, adds the worker process to the CPU accounting.
func (b *bench) measure(ctx context.Context, ph *phase, workerPID int, drive func(context.Context) error) (Measurement, error) {
	m := Measurement{Shape: ph.shape, System: ph.system, Deliveries: len(ph.events) * len(ph.subs)}
	rec := b.sink.begin(ph.expected())
	m.LoadBefore = procstat.LoadAverage()
	vis0, visErr := b.visibilityBefore(ctx) // before the CPU: the reading costs some
	cpu0 := b.cpu(workerPID)
	machine0, machineErr := procstat.ReadMachine()
	start := time.Now()
	if err := drive(ctx); err != nil {
		b.sink.finish(rec)
		return m, err
	}
	b.progress("%s %s: published %d events in %.2fs; waiting for %d deliveries",
		ph.system, ph.shape.Name, len(ph.events), time.Since(start).Seconds(), m.Deliveries)
	rec.wait(ctx, b.cfg.Timeout)
	if err := ctx.Err(); err != nil {
		b.sink.finish(rec)
		return m, err
	}
	cpu1 := b.cpu(workerPID)
	machine1, err := procstat.ReadMachine()
	if share, ok := machine1.Sub(machine0).IdleShare(); machineErr != nil || err != nil {
		b.progress("%s %s: no machine idle share: %v", ph.system, ph.shape.Name, errors.Join(machineErr, err))
	} else if ok {
		idle := round(100*share, 1)
		m.MachineIdle = &idle
	}
	time.Sleep(b.cfg.Grace)
	t := b.sink.finish(rec)
	ph.arrived = t.arrived
	// After the grace: the server writes a run's visibility records
	// shortly after the run starts or closes.
	if vis1, err := b.visibilityAfter(ctx); visErr == nil && err == nil {
		v := vis1.Sub(vis0)
		m.Visibility = &v
	} else if b.cfg.TemporalMetrics != "" {
		b.progress("%s %s: no visibility counts: %v", ph.system, ph.shape.Name, errors.Join(visErr, err))
	}
	m.LoadAfter = procstat.LoadAverage()
	m.CPUSeconds = map[string]float64{}
	for name, v := range cpu1 {
		if before, ok := cpu0[name]; ok {
			m.CPUSeconds[name] = round(v-before, 2)
		}
	}
	m.Lost, m.Duplicates, m.OutOfOrder, m.Stray = t.lost, t.duplicates, t.outOfOrder, t.stray
	m.Delivered = len(t.arrived)

	var last time.Time
	lat := make([]time.Duration, 0, len(t.arrived))
	ph.mu.Lock()
	for d, at := range t.arrived {
		if at.After(last) {
			last = at
		}
		if pub, ok := ph.published[d]; ok {
			lat = append(lat, max(0, at.Sub(pub)))
		}
	}
	ph.mu.Unlock()
	if m.Delivered > 0 {
		m.Seconds = round(last.Sub(start).Seconds(), 3)
		m.PerSecond = round(float64(m.Delivered)/last.Sub(start).Seconds(), 1)
	}
	m.LatencyMS = percentiles(lat)
	b.progress("%s %s: %d/%d delivered in %.2fs = %.1f/s, p50 %.0fms p99 %.0fms, lost %d, out of order %d, duplicates %d",
		ph.system, ph.shape.Name, m.Delivered, m.Deliveries, m.Seconds, m.PerSecond,
		m.LatencyMS.P50, m.LatencyMS.P99, m.Lost, m.OutOfOrder, m.Duplicates)
	return m, nil
}

// The visibility windows of a run's measurements are contiguous: each
// begins where the last ended, so a record written after one
// measurement's grace (a late close; with -keep-runs, an idle run's close
// ten minutes on) counts in the next one, never in none. The bench's own
// terminations (endRuns) count in none: the chain skips their stretch
// (or, when a reading fails, starts again). The counters are the
// server's, all namespaces together.

// visibilityBefore is the reading a measurement starts from: where the
// last one ended, or else a fresh one (zero before the server's first
// visibility request).
func (b *bench) visibilityBefore(ctx context.Context) (Visibility, error) {
	if b.visLast != nil {
		return *b.visLast, nil
	}
	if b.cfg.TemporalMetrics == "" {
		return Visibility{}, errors.New("the server's metrics endpoint is not known")
	}
	v, _, err := readVisibility(ctx, b.cfg.TemporalMetrics)
	return v, err
}

// visibilityAfter reads where a measurement ends; the server must have
// the counter by then (its runs started).
func (b *bench) visibilityAfter(ctx context.Context) (Visibility, error) {
	// A window that fails leaves none to follow: the next measurement
	// starts from a fresh reading, not from before this one.
	b.visLast = nil
	v, err := b.readCounters(ctx)
	if err != nil {
		return v, err
	}
	b.visLast = &v
	return v, nil
}

// percentiles summarises latencies (nearest rank) in milliseconds.
func percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	rank := func(p float64) float64 {
		i := int(math.Ceil(float64(len(sorted))*p)) - 1
		return ms(sorted[min(max(i, 0), len(sorted)-1)])
	}
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return Latency{P50: rank(0.50), P95: rank(0.95), P99: rank(0.99), Max: ms(sorted[len(sorted)-1]),
		Mean: ms(sum / time.Duration(len(sorted)))}
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 1) }

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

// pace sleeps until event i of a paced phase is due: start + i/rate.
func pace(ctx context.Context, start time.Time, i int, rate float64) error {
	due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

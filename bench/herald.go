package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"herald/internal/procstat"
	"herald/manifest"
	"herald/publish"
	"herald/store"
	"herald/workflows"
)

// The benchmark's apps: one publisher declaring one event type per fan-out
// (the number of subscriptions each event goes to), and subscriber apps
// sink-1…sink-N all pointing at the sink. sink-i subscribes to every type
// whose fan-out is at least i.
const (
	sourceApp    = "bench-src"
	eventVersion = 1
)

// dataSchema is the declared schema of the benchmark's events: Herald
// validates every event against it.
var dataSchema = json.RawMessage(`{"type":"object","required":["n","name"],` +
	`"properties":{"n":{"type":"integer","minimum":1},"name":{"type":"string","maxLength":200}}}`)

func eventName(fanOut int) string { return fmt.Sprintf("fanout-%d", fanOut) }

func eventType(fanOut int) string { return manifest.EventType(sourceApp, eventName(fanOut)) }

func sinkApp(i int) string { return fmt.Sprintf("sink-%d", i) }

// heraldSubscriptions are the subscription ids an event of the given
// fan-out is delivered to; Herald sends them in the Herald-Subscription header.
func heraldSubscriptions(fanOut int) []string {
	var out []string
	for i := 1; i <= fanOut; i++ {
		out = append(out, manifest.SubscriptionID(sinkApp(i), eventType(fanOut), eventVersion))
	}
	return out
}

// benchManifests are the publisher's and subscribers' manifests, the
// publisher first so the subscriptions start active.
func benchManifests(sinkURL string, fanOuts []int) []*manifest.Manifest {
	src := &manifest.Manifest{App: sourceApp, Endpoint: sinkURL}
	most := 0
	for _, f := range fanOuts {
		src.Events = append(src.Events, manifest.Event{
			Name: eventName(f), Version: eventVersion, Subject: "item",
			Title: fmt.Sprintf("Benchmark event delivered to %d subscriptions", f), DataSchema: dataSchema,
		})
		most = max(most, f)
	}
	out := []*manifest.Manifest{src}
	for i := 1; i <= most; i++ {
		m := &manifest.Manifest{App: sinkApp(i), Endpoint: sinkURL}
		for _, f := range fanOuts {
			if f >= i {
				m.Subscribes = append(m.Subscribes, manifest.Subscription{Type: eventType(f), Version: eventVersion})
			}
		}
		out = append(out, m)
	}
	return out
}

// applyManifests validates and applies the benchmark's manifests.
func applyManifests(ctx context.Context, st *store.Store, sinkURL string, fanOuts []int) error {
	return apply(ctx, st, benchManifests(sinkURL, fanOuts))
}

// apply validates and applies manifests in order.
func apply(ctx context.Context, st *store.Store, ms []*manifest.Manifest) error {
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("manifest %s: %w", m.App, err)
		}
		if _, err := st.ApplyManifest(ctx, m, "bench"); err != nil {
			return fmt.Errorf("apply manifest %s: %w", m.App, err)
		}
	}
	return nil
}

// herald measures a shape end to end through Herald: publish (in batches,
// or one at a time when paced) → outbox → relay → Temporal → the worker's
// signed POST → the sink. The worker process is started for this
// measurement alone, so its peak RSS belongs to this shape.
func (b *bench) herald(ctx context.Context, sh Shape) (Measurement, error) {
	return b.heraldWith(ctx, sh, heraldRun{system: SystemHerald})
}

// heraldRun varies a measurement on Herald.
type heraldRun struct {
	system string
	// api starts the worker's publishing API too.
	api bool
	// neighbours, when set, misbehave for the whole measurement (behave,
	// with calm: the control).
	neighbours *neighbours
	calm       bool
}

// heraldWith is herald with the variations of run.
func (b *bench) heraldWith(ctx context.Context, sh Shape, run heraldRun) (Measurement, error) {
	// The comparison's two measurements of a shape use keys of their own, so
	// the second does not find the first's workflows still running.
	prefix := b.runID
	switch run.system {
	case SystemAlone:
		prefix += "-alone"
	case SystemAloneAgain:
		prefix += "-again"
	case SystemNeighbours:
		prefix += "-beside"
	case SystemCalm:
		prefix += "-calm"
	}
	ph, err := newPhase(prefix, sh, run.system, heraldSubscriptions(sh.Subscriptions))
	if err != nil {
		return Measurement{}, err
	}
	b.progress("%s %s: starting the worker process", run.system, sh.Name)
	ws := workerSettings{
		DatabaseURL: b.cfg.DatabaseURL, TemporalAddress: b.cfg.TemporalAddress,
		Namespace: b.cfg.Namespace, SigningKeyDir: b.keyDir, Env: b.cfg.WorkerEnv,
	}
	if run.api {
		if ws.APIAddr, err = freeLoopbackAddr(); err != nil {
			return Measurement{}, err
		}
	}
	w, err := startWorker(ctx, b.workerBin, filepath.Join(b.logDir, "worker-"+logName(run.system)+"-"+sh.Name+".log"), ws)
	if err != nil {
		return Measurement{}, err
	}
	var stats chan *NeighbourStats
	stopNeighbours := func() *NeighbourStats { return nil }
	if run.neighbours != nil {
		nctx, cancel := context.WithCancel(ctx)
		stats = make(chan *NeighbourStats, 1)
		seeded := make(chan struct{})
		go func() {
			stats <- run.neighbours.drive(nctx, b.publisher, "http://"+ws.APIAddr, prefix+"-"+sh.Name, b.cfg.NeighbourLoad, run.calm, seeded)
		}()
		stopNeighbours = func() *NeighbourStats {
			cancel()
			return <-stats
		}
		// Let every neighbour key get its workflow, then their failures
		// start, before the healthy events are published.
		b.progress("%s %s: neighbours publishing to each of their keys, then at work for %v before the healthy events", run.system, sh.Name, neighbourLead)
		if err := awaitNeighbours(ctx, seeded, neighbourLead); err != nil {
			stopNeighbours()
			_ = w.stop()
			return Measurement{}, err
		}
	}
	request := func(ev plannedEvent) publish.Request {
		return publish.Request{
			ID: ev.ID, App: sourceApp, Type: eventType(sh.Subscriptions), Version: eventVersion, Subject: ev.Key,
			Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"name":"item %s"}`, ev.N, ev.Key)),
		}
	}
	drive := func(ctx context.Context) error {
		if sh.Rate > 0 {
			start := time.Now()
			for i, ev := range ph.events {
				if err := pace(ctx, start, i, sh.Rate); err != nil {
					return err
				}
				if _, err := b.publisher.Publish(ctx, request(ev)); err != nil {
					return fmt.Errorf("publish: %w", err)
				}
				ph.stampAll(ev.ID, time.Now())
			}
			return nil
		}
		for i := 0; i < len(ph.events); i += b.cfg.PublishBatch {
			batch := ph.events[i:min(i+b.cfg.PublishBatch, len(ph.events))]
			reqs := make([]publish.Request, len(batch))
			for j, ev := range batch {
				reqs[j] = request(ev)
			}
			outs, err := b.publisher.PublishBatch(ctx, reqs)
			if err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			now := time.Now()
			for j, out := range outs {
				if out.Rejection != nil {
					return fmt.Errorf("publish %s: %w", batch[j].ID, out.Rejection)
				}
				ph.stampAll(batch[j].ID, now)
			}
		}
		return nil
	}
	sizeBefore, sizeErr := b.schemaBytes(ctx)
	m, err := b.measure(ctx, ph, w.pid(), drive)
	m.Neighbours = stopNeighbours()
	if after, aerr := b.schemaBytes(ctx); aerr == nil && sizeErr == nil {
		m.PostgresMB = round(float64(after)/(1<<20), 1)
		m.PostgresGrowthMB = round(float64(after-sizeBefore)/(1<<20), 1)
	}
	if rss, rerr := procstat.PeakRSS(w.pid()); rerr == nil {
		m.WorkerPeakRSSMB = round(float64(rss)/(1<<20), 1)
	}
	if serr := w.stop(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return m, err
	}
	var ids []string
	for _, key := range spread(ph.keys, b.cfg.SampleWorkflows) {
		ids = append(ids, workflows.DeliveryID(ph.subs[0], key))
	}
	m.Actions = countActions(ctx, b.temporal, ids, sh.EventsPerKey, ph.publishedFor(ph.subs[0]))
	if sh.Rate > 0 {
		m.Tail = explainTail(ctx, b.temporal, ph)
	}
	if !b.cfg.KeepRuns {
		b.endRuns(ctx, ph, &m)
	}
	return m, nil
}

// logName makes a system's name fit a file name: "herald + neighbours" is
// "herald-neighbours".
func logName(system string) string {
	return strings.Join(strings.FieldsFunc(system, func(r rune) bool { return r == ' ' || r == '+' }), "-")
}

// neighbourLead is how long the neighbours misbehave, once each of their
// keys has its workflow, before a measurement's healthy events are
// published: long enough for the first timeouts to be hanging and the first
// failures retried.
const neighbourLead = 5 * time.Second

// awaitNeighbours waits until the neighbours have published to each of their
// keys (seeded closes), then for lead. The healthy events must not meet the
// neighbours' start-up: a key's first event costs the Temporal server an
// eager start and the new run's first workflow tasks (several history and
// visibility writes), later events a signal. A fixed 5 s lead ended when each
// neighbour had created 25 of its 50 keys, so the healthy keys' creation
// overlapped theirs on one dev server; in the histories of the calm control's
// slowest events, their key's first workflow task timed out (10 s
// start-to-close) while that server's writes queued. A deployment's
// neighbours are not all creating their keys at the moment a healthy app
// starts publishing, and the comparison is of neighbours at work.
func awaitNeighbours(ctx context.Context, seeded <-chan struct{}, lead time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-seeded:
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(lead):
		return nil
	}
}

// schemaBytes is the size on disk of Herald's tables in the bench's schema,
// with their indexes and TOAST: what a measurement's events, outcome rows
// and audit rows take in PostgreSQL.
func (b *bench) schemaBytes(ctx context.Context) (int64, error) {
	var n int64
	err := b.store.Pool.QueryRow(ctx, `
		SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		  FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		 WHERE ns.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')`).Scan(&n)
	return n, err
}

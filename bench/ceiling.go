package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"herald/workflows"
)

// The ceiling is the bare shape Herald is measured against: per event one
// SignalWithStartWorkflow to a workflow per key, which runs one activity
// doing one HTTP POST per signal. It has its own task queue and names so it
// never meets Herald's workers.
const (
	// CeilingTaskQueue is the task queue of the ceiling's worker.
	CeilingTaskQueue = "bench-ceiling"
	// CeilingWorkflowType is the registered name of the ceiling's workflow.
	CeilingWorkflowType = "BenchCeiling"
	// CeilingActivityName is the registered name of the ceiling's activity.
	CeilingActivityName   = ceilingActivityPrefix + "Post"
	ceilingActivityPrefix = "BenchCeiling"
	// ceilingSignal is the signal that carries one event.
	ceilingSignal = "event"
	// ceilingIdle completes a ceiling workflow that received nothing for this long.
	ceilingIdle = 5 * time.Second

	// BatchedWorkflowType is the registered name of the batched ceiling's
	// workflow, which runs on the ceiling's worker.
	BatchedWorkflowType = "BenchCeilingBatched"
	// BatchedActivityName is the registered name of its activity.
	BatchedActivityName = ceilingActivityPrefix + "PostBatch"
)

// CeilingInput starts a ceiling workflow: where its key's events go.
type CeilingInput struct {
	SinkURL      string `json:"sinkUrl"`
	Subscription string `json:"subscription"`
	Key          string `json:"key"`
}

// CeilingEvent is the payload of the ceiling's signal: one event.
type CeilingEvent struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

// CeilingPost is the input of the ceiling's activity: one event to POST.
type CeilingPost struct {
	CeilingInput
	Event CeilingEvent `json:"event"`
	// Herald, on the shaped floor only, is the start input Herald's relay
	// gives the key; the workflow then writes a Herald key's history
	// (floor.go).
	Herald *workflows.Params `json:"herald,omitempty"`
}

// CeilingWorkflow receives one event per signal and POSTs each with its own
// activity, in signal order; it completes after ceilingIdle without signals.
// It starts an idle timer only when no signal is waiting, so a busy key
// costs exactly one signal, one activity and the workflow tasks around them.
func CeilingWorkflow(ctx workflow.Context, in CeilingInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	events := workflow.GetSignalChannel(ctx, ceilingSignal)
	for {
		var ev CeilingEvent
		if !events.ReceiveAsync(&ev) {
			var ok bool
			if ev, ok = nextEvent(ctx, events); !ok {
				return nil
			}
		}
		if err := workflow.ExecuteActivity(ctx, CeilingActivityName, CeilingPost{CeilingInput: in, Event: ev}).Get(ctx, nil); err != nil {
			return fmt.Errorf("post event %s: %w", ev.ID, err)
		}
	}
}

// nextEvent waits for the next event signal, up to ceilingIdle; ok is false
// when the key stayed idle that long (its workflow then completes).
func nextEvent(ctx workflow.Context, events workflow.ReceiveChannel) (ev CeilingEvent, ok bool) {
	timerCtx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(events, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, &ev)
		ok = true
	})
	sel.AddFuture(workflow.NewTimer(timerCtx, ceilingIdle), func(workflow.Future) {})
	sel.Select(ctx)
	if !ok {
		ok = events.ReceiveAsync(&ev)
	}
	return ev, ok
}

// CeilingBatch is the input of the batched ceiling's activity: the events of
// one key drained from its signals, to POST in order.
type CeilingBatch struct {
	CeilingInput
	Events []CeilingEvent `json:"events"`
}

// BatchedWorkflow is the batched ceiling: like CeilingWorkflow, one signal
// per event, but each activity POSTs every event that has arrived since the
// previous one (a drained batch of the key), in signal order. It is the
// cheapest honest shape of Herald's own batching, without its validation,
// storage, signing and audit.
func BatchedWorkflow(ctx workflow.Context, in CeilingInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 60 * time.Second})
	events := workflow.GetSignalChannel(ctx, ceilingSignal)
	var batch []CeilingEvent
	for {
		for {
			var ev CeilingEvent
			if !events.ReceiveAsync(&ev) {
				break
			}
			batch = append(batch, ev)
		}
		if len(batch) == 0 {
			ev, ok := nextEvent(ctx, events)
			if !ok {
				return nil
			}
			// Drain whatever else came with it before posting.
			batch = append(batch, ev)
			continue
		}
		if err := workflow.ExecuteActivity(ctx, BatchedActivityName, CeilingBatch{CeilingInput: in, Events: batch}).Get(ctx, nil); err != nil {
			return fmt.Errorf("post %d events from %s: %w", len(batch), batch[0].ID, err)
		}
		batch = nil
	}
}

// CeilingActivities holds the ceiling activity's HTTP client.
type CeilingActivities struct {
	Client *http.Client
}

// Post sends one event to the sink as a small CloudEvent-like JSON document;
// any answer but 2xx is an error, retried by Temporal's default policy.
func (a *CeilingActivities) Post(ctx context.Context, in CeilingPost) error {
	body, err := json.Marshal(map[string]any{
		"id": in.Event.ID, "subject": in.Key, "data": map[string]int{"n": in.Event.N},
	})
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.SinkURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set(subscriptionHeader, in.Subscription)
	resp, err := a.Client.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post: status %d (attempt %d)", resp.StatusCode, activity.GetInfo(ctx).Attempt)
	}
	return nil
}

// PostBatch sends the events one after the other, as Post does each; the
// first failure fails the whole batch, which Temporal retries whole.
func (a *CeilingActivities) PostBatch(ctx context.Context, in CeilingBatch) error {
	for _, ev := range in.Events {
		if err := a.Post(ctx, CeilingPost{CeilingInput: in.CeilingInput, Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

// startCeilingWorker runs the ceiling's workflow and activity in this
// process. pollers, when positive, sets its workflow and activity task
// pollers; zero keeps the SDK's defaults, which is the bare shape.
func startCeilingWorker(c client.Client, pollers int) (worker.Worker, error) {
	// The shaped floor's starts name this worker's build id (floorBuildID).
	worker.SetBinaryChecksum(floorBuildID)
	w := worker.New(c, CeilingTaskQueue, worker.Options{
		MaxConcurrentWorkflowTaskPollers: pollers, MaxConcurrentActivityTaskPollers: pollers,
	})
	w.RegisterWorkflowWithOptions(CeilingWorkflow, workflow.RegisterOptions{Name: CeilingWorkflowType})
	w.RegisterWorkflowWithOptions(BatchedWorkflow, workflow.RegisterOptions{Name: BatchedWorkflowType})
	acts := &CeilingActivities{Client: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		Timeout:   30 * time.Second,
	}}
	w.RegisterWorkflowWithOptions((&floorWorkflow{acts: acts}).Run, workflow.RegisterOptions{Name: FloorWorkflowType})
	// Registered with a prefix, the methods Post and PostBatch become
	// CeilingActivityName and BatchedActivityName.
	w.RegisterActivityWithOptions(acts, activity.RegisterOptions{Name: ceilingActivityPrefix})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start the ceiling worker: %w", err)
	}
	return w, nil
}

// ceilingWorkflowID is the id of the ceiling workflow of one subscription
// label and key; the labels of the two ceilings differ.
func ceilingWorkflowID(sub, key string) string { return "bench-ceiling:" + sub + ":" + key }

// signalCeiling sends one event to its key's workflow of the given type,
// starting it when needed.
func signalCeiling(ctx context.Context, c client.Client, workflowType string, in CeilingInput, ev CeilingEvent) error {
	id := ceilingWorkflowID(in.Subscription, in.Key)
	opts := client.StartWorkflowOptions{ID: id, TaskQueue: CeilingTaskQueue}
	if _, err := c.SignalWithStartWorkflow(ctx, id, ceilingSignal, ev, opts, workflowType, in); err != nil {
		return fmt.Errorf("signal-with-start %s: %w", id, err)
	}
	return nil
}

// ceiling measures a shape on the bare shape (system SystemCeiling) or the
// batched ceiling (SystemBatched). Each (subscription, key) has its own
// workflow; a key's signals go one after the other, different keys in
// parallel (up to Parallel at once, like Herald's relay). A paced shape
// sends each event when it is due.
func (b *bench) ceiling(ctx context.Context, sh Shape, system string) (Measurement, error) {
	workflowType := CeilingWorkflowType
	if system == SystemBatched {
		workflowType = BatchedWorkflowType
	}
	var subs []string
	for i := range sh.Subscriptions {
		subs = append(subs, fmt.Sprintf("%s-%d", system, i+1))
	}
	ph, err := newPhase(b.runID, sh, system, subs)
	if err != nil {
		return Measurement{}, err
	}
	input := func(sub, key string) CeilingInput {
		return CeilingInput{SinkURL: b.sink.URL(), Subscription: sub, Key: key}
	}
	drive := func(ctx context.Context) error {
		if sh.Rate > 0 {
			start := time.Now()
			for i, ev := range ph.events {
				if err := pace(ctx, start, i, sh.Rate); err != nil {
					return err
				}
				for _, sub := range ph.subs {
					if err := signalCeiling(ctx, b.temporal, workflowType, input(sub, ev.Key), CeilingEvent{ID: ev.ID, N: ev.N}); err != nil {
						return err
					}
					ph.stamp(sub, ev.ID, time.Now())
				}
			}
			return nil
		}
		byKey := map[string][]plannedEvent{}
		for _, ev := range ph.events {
			byKey[ev.Key] = append(byKey[ev.Key], ev)
		}
		var seqs []CeilingInput
		for _, key := range ph.keys {
			for _, sub := range ph.subs {
				seqs = append(seqs, input(sub, key))
			}
		}
		return forEachParallel(ctx, b.cfg.Parallel, seqs, func(ctx context.Context, in CeilingInput) error {
			for _, ev := range byKey[in.Key] {
				if err := signalCeiling(ctx, b.temporal, workflowType, in, CeilingEvent{ID: ev.ID, N: ev.N}); err != nil {
					return err
				}
				ph.stamp(in.Subscription, ev.ID, time.Now())
			}
			return nil
		})
	}
	return b.measureSampled(ctx, sh, ph, drive, func(key string) string { return ceilingWorkflowID(subs[0], key) })
}

// measureSampled measures a reference system's phase, then counts the
// Temporal actions of its first subscription's workflows of a sample of
// keys (workflowID names a key's workflow).
func (b *bench) measureSampled(ctx context.Context, sh Shape, ph *phase, drive func(context.Context) error,
	workflowID func(key string) string) (Measurement, error) {
	m, err := b.measure(ctx, ph, 0, drive)
	if err != nil {
		return m, err
	}
	var ids []string
	for _, key := range spread(ph.keys, b.cfg.SampleWorkflows) {
		ids = append(ids, workflowID(key))
	}
	m.Actions = countActions(ctx, b.temporal, ids, sh.EventsPerKey, ph.publishedFor(ph.subs[0]))
	return m, nil
}

// spread picks n of keys evenly spaced from the first to the last: the
// first keys of a shape alone would be the first started, whose runs Herald
// treats apart (the first HERALD_WORKFLOW_CACHE_SIZE wait idle).
func spread(keys []string, n int) []string {
	if n >= len(keys) {
		return keys
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, keys[i*len(keys)/n])
	}
	return out
}

// forEachParallel calls fn for every item with at most n calls at once,
// stopping at the first error.
func forEachParallel[T any](ctx context.Context, n int, items []T, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, it); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

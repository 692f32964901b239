package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/workflows"
)

// The floor is the least a workflow per key can cost Temporal for one event:
// the workflow is started eagerly (its first task comes back in the start's
// answer, to this process's worker) with the event in its input, makes one
// local activity that POSTs it, and completes. Nothing is signalled, no timer
// waits, nothing is written but the start, one marker and the completion. It
// is measured only on shapes of one event per key, where it is a faithful
// lower bound of a workflow per key; Herald's ratio to it is what issue 29's
// goal is written in.
//
// The shaped floor (-shaped-floor) is the same workflow writing the history
// of a Herald key started for one event: its start carries Herald's input
// (the settings), search attributes and summary; a first local activity
// returns what Herald's start read returns (the settings, the key's one
// queued event, the error policy), the second POSTs and returns Herald's
// delivery result, and an idle timer of Herald's idle timeout keeps the run
// open, as Herald's does. Herald's ratio to it is the part of the gap to the
// floor that is Herald's own work (the relay, PostgreSQL, the worker); its
// ratio to the floor is what Temporal charges for Herald's history shape.
const (
	// FloorWorkflowType is the registered name of the floor's workflow,
	// which runs on the ceiling's worker (eager start needs the worker and
	// the starting client in one process).
	FloorWorkflowType = "BenchFloor"
)

// HeraldShape is what the shaped floor's workflow writes in Herald's place:
// the payloads of Herald's own types with Herald's default settings.
type HeraldShape struct {
	// Params is a Herald key's start input as the relay writes it.
	Params workflows.Params `json:"params"`
	// Start and Deliver are the results its start read and its delivery
	// return, for the shaped floor's two local activities to record.
	Start   workflows.StartResult    `json:"start"`
	Deliver activities.DeliverResult `json:"deliver"`
}

// heraldShape is the shaped floor's HeraldShape for one event of a key.
func heraldShape(sub, key string, ev CeilingEvent) *HeraldShape {
	p := workflows.Params{SubscriptionID: sub, SubscriberApp: "bench", EventType: "bench.event", SubjectKey: key,
		Version: workflows.NoMarkerVersion}.WithDefaults()
	settings := p
	settings.SubscriptionID, settings.SubscriberApp, settings.EventType, settings.SubjectKey, settings.Version = "", "", "", "", 0
	e := activities.Event{ID: ev.ID, Seq: int64(ev.N)}
	return &HeraldShape{
		Params: p,
		Start: workflows.StartResult{Settings: settings,
			Queue:  activities.QueueResult{Events: []activities.HeldEvent{{Event: e, QueuedAt: time.Now().UTC()}}},
			Policy: workflows.ErrorPolicy{OnFailure: "hold"}},
		Deliver: activities.DeliverResult{Outcome: "delivered",
			Done: []activities.Settled{{ID: ev.ID, Seq: e.Seq, Result: "delivered", Attempts: 1}}},
	}
}

// postShaped POSTs the shaped floor's event and returns Herald's delivery
// result (HeraldShape.Deliver).
func (f *floorWorkflow) postShaped(ctx context.Context, in CeilingPost) (activities.DeliverResult, error) {
	if err := f.acts.Post(ctx, in); err != nil {
		return activities.DeliverResult{}, err
	}
	return in.Herald.Deliver, nil
}

// shapedStart returns the shaped floor's start read (HeraldShape.Start).
func shapedStart(_ context.Context, h *HeraldShape) (workflows.StartResult, error) {
	return h.Start, nil
}

// floorWorkflow holds the activities its local activity calls.
type floorWorkflow struct {
	acts *CeilingActivities
}

// Run POSTs the one event of its input with a local activity and completes.
func (f *floorWorkflow) Run(ctx workflow.Context, in CeilingPost) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
	if in.Herald == nil {
		if err := workflow.ExecuteLocalActivity(ctx, f.acts.Post, in).Get(ctx, nil); err != nil {
			return fmt.Errorf("post event %s: %w", in.Event.ID, err)
		}
		return nil
	}
	h := in.Herald
	if err := workflow.ExecuteLocalActivity(ctx, shapedStart, h).Get(ctx, nil); err != nil {
		return fmt.Errorf("read key %s: %w", in.Key, err)
	}
	if err := workflow.ExecuteLocalActivity(ctx, f.postShaped, in).Get(ctx, nil); err != nil {
		return fmt.Errorf("post event %s: %w", in.Event.ID, err)
	}
	return workflow.Sleep(ctx, h.Params.IdleTimeout)
}

// floorWorkflowID is the id of the floor's workflow of one subscription
// label and key.
func floorWorkflowID(sub, key string) string { return "bench-floor:" + sub + ":" + key }

// startFloor starts the floor workflow of one event, eagerly; on the shaped
// floor with Herald's search attributes and summary.
func startFloor(ctx context.Context, c client.Client, in CeilingPost) error {
	id := floorWorkflowID(in.Subscription, in.Key)
	opts := client.StartWorkflowOptions{ID: id, TaskQueue: CeilingTaskQueue, EnableEagerStart: true}
	if in.Herald != nil {
		opts.TypedSearchAttributes = workflows.OneEventStartAttributes(in.Herald.Params)
		opts.StaticSummary = workflows.Summary(in.Herald.Params)
	}
	if _, err := c.ExecuteWorkflow(ctx, opts, FloorWorkflowType, in); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	return nil
}

// hasFloor reports whether the floor is measured on a shape: one event per
// key, published at once (a key with more events would need signals, which
// is no longer the floor).
func hasFloor(sh Shape) bool { return sh.EventsPerKey == 1 && sh.Rate == 0 }

// floor measures a shape of one event per key on the floor: every
// (subscription, key) gets its own eagerly started workflow, up to Parallel
// starts at once, like the ceilings.
func (b *bench) floor(ctx context.Context, sh Shape, system string) (Measurement, error) {
	if !hasFloor(sh) {
		return Measurement{}, fmt.Errorf("shape %s: the floor takes one event per key, published at once", sh.Name)
	}
	var subs []string
	for i := range sh.Subscriptions {
		subs = append(subs, fmt.Sprintf("%s-%d", system, i+1))
	}
	ph, err := newPhase(b.runID, sh, system, subs)
	if err != nil {
		return Measurement{}, err
	}
	var posts []CeilingPost
	for _, ev := range ph.events {
		for _, sub := range ph.subs {
			in := CeilingPost{
				CeilingInput: CeilingInput{SinkURL: b.sink.URL(), Subscription: sub, Key: ev.Key},
				Event:        CeilingEvent{ID: ev.ID, N: ev.N},
			}
			if system == SystemShapedFloor {
				in.Herald = heraldShape(sub, ev.Key, in.Event)
			}
			posts = append(posts, in)
		}
	}
	drive := func(ctx context.Context) error {
		return forEachParallel(ctx, b.cfg.Parallel, posts, func(ctx context.Context, in CeilingPost) error {
			if err := startFloor(ctx, b.temporal, in); err != nil {
				return err
			}
			ph.stamp(in.Subscription, in.Event.ID, time.Now())
			return nil
		})
	}
	return b.measureSampled(ctx, sh, ph, drive, func(key string) string { return floorWorkflowID(subs[0], key) })
}

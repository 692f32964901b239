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
// of a Herald key the relay starts for one event, with Herald's default
// settings: its start carries the relay's input (workflows.Params), search
// attributes and summary; a first local activity returns what Herald's start
// read returns (the settings, the key's one queued event, the error policy),
// the second POSTs and returns Herald's delivery result, and a timer keeps
// the run open, as Herald's idle timer does. Like the relay's, its start
// names the build id of the worker that takes its first task in BuildIds
// (workflows.WithBuildID; the bench's worker is floorBuildID), so that task
// changes nothing in Temporal's visibility store. Its input also holds the event
// and the sink, as the floor's does. Herald's ratio to it leaves out what
// Temporal charges for Herald's history, and keeps Herald's own work (the
// relay, PostgreSQL, its worker) and the difference between Herald's worker
// process and the bench's in-process worker.
const (
	// FloorWorkflowType is the registered name of the floor's workflow,
	// which runs on the ceiling's worker (eager start needs the worker and
	// the starting client in one process).
	FloorWorkflowType = "BenchFloor"
	// shapedIdle is the shaped floor's timer. A timer's start costs the
	// same whatever its length; Herald's fires after its idle timeout (10
	// minutes by default), this one after the bench, so its runs' firings
	// never land in a later measurement.
	shapedIdle = 24 * time.Hour
	// floorBuildID is the build id of the bench's own Temporal worker
	// (worker.SetBinaryChecksum in startCeilingWorker), which the shaped
	// floor's starts name.
	floorBuildID = "herald-bench"
)

// shapedParams is the relay's start input of a Herald key (keyParams) for
// the shaped floor's event: Herald's default settings, no marker.
func shapedParams(sub, key string) *workflows.Params {
	p := workflows.Params{SubscriptionID: sub, SubscriberApp: "bench", EventType: "bench.event", SubjectKey: key,
		Version: workflows.NoMarkerVersion}.WithDefaults()
	return &p
}

// shapedStart returns what Herald's start read (DeliveryStart) returns for a
// key with one queued event: the settings without the key, the event, the
// error policy.
func shapedStart(_ context.Context, in CeilingPost) (workflows.StartResult, error) {
	settings := *in.Herald
	settings.SubscriptionID, settings.SubscriberApp, settings.EventType, settings.SubjectKey, settings.Version = "", "", "", "", 0
	ev := activities.Event{ID: in.Event.ID, Seq: int64(in.Event.N)}
	return workflows.StartResult{Settings: settings,
		Queue:  activities.QueueResult{Events: []activities.HeldEvent{{Event: ev, QueuedAt: time.Now().UTC()}}},
		Policy: workflows.ErrorPolicy{OnFailure: "hold"}}, nil
}

// postShaped POSTs the shaped floor's event and returns what Herald's
// delivery (Deliver) returns for it.
func (f *floorWorkflow) postShaped(ctx context.Context, in CeilingPost) (activities.DeliverResult, error) {
	if err := f.acts.Post(ctx, in); err != nil {
		return activities.DeliverResult{}, err
	}
	return activities.DeliverResult{Outcome: "delivered",
		Done: []activities.Settled{{ID: in.Event.ID, Seq: int64(in.Event.N), Result: "delivered", Attempts: 1}}}, nil
}

// floorWorkflow holds the activities its local activity calls.
type floorWorkflow struct {
	acts *CeilingActivities
}

// Run POSTs the one event of its input with a local activity and completes;
// on the shaped floor it writes a Herald key's history instead.
func (f *floorWorkflow) Run(ctx workflow.Context, in CeilingPost) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
	if in.Herald == nil {
		if err := workflow.ExecuteLocalActivity(ctx, f.acts.Post, in).Get(ctx, nil); err != nil {
			return fmt.Errorf("post event %s: %w", in.Event.ID, err)
		}
		return nil
	}
	if err := workflow.ExecuteLocalActivity(ctx, shapedStart, in).Get(ctx, nil); err != nil {
		return fmt.Errorf("read key %s: %w", in.Key, err)
	}
	if err := workflow.ExecuteLocalActivity(ctx, f.postShaped, in).Get(ctx, nil); err != nil {
		return fmt.Errorf("post event %s: %w", in.Event.ID, err)
	}
	return workflow.Sleep(ctx, shapedIdle)
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
		opts.TypedSearchAttributes = workflows.WithBuildID(workflows.OneEventStartAttributes(*in.Herald), floorBuildID)
		opts.StaticSummary = workflows.Summary(*in.Herald)
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

// floor measures a shape of one event per key on the floor, or on the
// shaped floor when system is SystemShapedFloor: every (subscription, key)
// gets its own eagerly started workflow, up to Parallel starts at once,
// like the ceilings.
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
				in.Herald = shapedParams(sub, ev.Key)
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

package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"
)

// The floor is the least a workflow per key can cost Temporal for one event:
// the workflow is started eagerly (its first task comes back in the start's
// answer, to this process's worker) with the event in its input, makes one
// local activity that POSTs it, and completes. Nothing is signalled, no timer
// waits, nothing is written but the start, one marker and the completion. It
// is measured only on shapes of one event per key, where it is a faithful
// lower bound of a workflow per key; Herald's ratio to it is what issue 29's
// goal is written in.
const (
	// FloorWorkflowType is the registered name of the floor's workflow,
	// which runs on the ceiling's worker (eager start needs the worker and
	// the starting client in one process).
	FloorWorkflowType = "BenchFloor"
)

// floorWorkflow holds the activities its local activity calls.
type floorWorkflow struct {
	acts *CeilingActivities
}

// Run POSTs the one event of its input with a local activity and completes.
func (f *floorWorkflow) Run(ctx workflow.Context, in CeilingPost) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
	if err := workflow.ExecuteLocalActivity(ctx, f.acts.Post, in).Get(ctx, nil); err != nil {
		return fmt.Errorf("post event %s: %w", in.Event.ID, err)
	}
	return nil
}

// floorWorkflowID is the id of the floor's workflow of one subscription
// label and key.
func floorWorkflowID(sub, key string) string { return "bench-floor:" + sub + ":" + key }

// startFloor starts the floor workflow of one event, eagerly.
func startFloor(ctx context.Context, c client.Client, in CeilingPost) error {
	id := floorWorkflowID(in.Subscription, in.Key)
	opts := client.StartWorkflowOptions{ID: id, TaskQueue: CeilingTaskQueue, EnableEagerStart: true}
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
func (b *bench) floor(ctx context.Context, sh Shape) (Measurement, error) {
	if !hasFloor(sh) {
		return Measurement{}, fmt.Errorf("shape %s: the floor takes one event per key, published at once", sh.Name)
	}
	var subs []string
	for i := range sh.Subscriptions {
		subs = append(subs, fmt.Sprintf("%s-%d", SystemFloor, i+1))
	}
	ph, err := newPhase(b.runID, sh, SystemFloor, subs)
	if err != nil {
		return Measurement{}, err
	}
	var posts []CeilingPost
	for _, ev := range ph.events {
		for _, sub := range ph.subs {
			posts = append(posts, CeilingPost{
				CeilingInput: CeilingInput{SinkURL: b.sink.URL(), Subscription: sub, Key: ev.Key},
				Event:        CeilingEvent{ID: ev.ID, N: ev.N},
			})
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

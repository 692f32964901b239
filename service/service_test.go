package service

import (
	"reflect"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"herald/config"
)

// TestWorkerOptionsFixedPollers guards issues 13 and 19: the worker polls
// with a fixed number of pollers, never scaled down (the SDK's autoscaling
// stalled workflow tasks on servers without autoscaling support), and for
// workflow tasks with separate normal and sticky pollers (one mixed pool
// starved the normal queue while the sticky queue had a backlog).
func TestWorkerOptionsFixedPollers(t *testing.T) {
	o := workerOptions(config.Worker{DeliveryTimeout: 30 * time.Second})
	// Workflow tasks: separate normal and sticky pollers (the autoscaling
	// behaviour), pinned at WorkflowTaskPollers so they never scale down.
	want := worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{
		InitialNumberOfPollers: WorkflowTaskPollers, MinimumNumberOfPollers: WorkflowTaskPollers,
		MaximumNumberOfPollers: WorkflowTaskPollers,
	})
	if !reflect.DeepEqual(o.WorkflowTaskPollerBehavior, want) || o.MaxConcurrentWorkflowTaskPollers != 0 || WorkflowTaskPollers < 2 {
		t.Errorf("workflow task pollers: behaviour %+v, count %d; want autoscaling pinned at %d", o.WorkflowTaskPollerBehavior,
			o.MaxConcurrentWorkflowTaskPollers, WorkflowTaskPollers)
	}
	if o.ActivityTaskPollerBehavior != nil || o.MaxConcurrentActivityTaskPollers != ActivityTaskPollers || ActivityTaskPollers < 1 {
		t.Errorf("activity pollers: behaviour %T, %d; want a fixed count of %d", o.ActivityTaskPollerBehavior,
			o.MaxConcurrentActivityTaskPollers, ActivityTaskPollers)
	}
	if o.WorkerStopTimeout != 35*time.Second {
		t.Errorf("stop timeout %v, want the delivery timeout plus 5s", o.WorkerStopTimeout)
	}
}

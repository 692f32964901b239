package service

import (
	"testing"
	"time"

	"herald/config"
)

// TestWorkerOptionsFixedPollers guards issue 13: the worker polls with a
// fixed number of pollers, never the SDK's autoscaling behaviour, which
// stalled workflow tasks on Temporal servers without autoscaling support.
func TestWorkerOptionsFixedPollers(t *testing.T) {
	o := workerOptions(config.Worker{DeliveryTimeout: 30 * time.Second})
	if o.WorkflowTaskPollerBehavior != nil || o.ActivityTaskPollerBehavior != nil {
		t.Errorf("poller behaviours set (%T, %T); want fixed poller counts", o.WorkflowTaskPollerBehavior, o.ActivityTaskPollerBehavior)
	}
	if o.MaxConcurrentWorkflowTaskPollers != WorkflowTaskPollers || o.MaxConcurrentActivityTaskPollers != ActivityTaskPollers ||
		WorkflowTaskPollers < 2 || ActivityTaskPollers < 1 {
		t.Errorf("pollers: %d workflow, %d activity; want %d and %d (at least 2 workflow pollers: one pool serves the sticky queue too)",
			o.MaxConcurrentWorkflowTaskPollers, o.MaxConcurrentActivityTaskPollers, WorkflowTaskPollers, ActivityTaskPollers)
	}
	if o.WorkerStopTimeout != 35*time.Second {
		t.Errorf("stop timeout %v, want the delivery timeout plus 5s", o.WorkerStopTimeout)
	}
}

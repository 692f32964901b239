package workflows

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
)

// WorkflowRegistry is where workflows are registered: a worker, the SDK's
// test environment or a replayer.
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// ActivityRegistry is where activities are registered: a worker or the SDK's
// test environment.
type ActivityRegistry interface {
	RegisterActivity(a any)
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Registry is a worker or the SDK's test environment.
type Registry interface {
	WorkflowRegistry
	ActivityRegistry
}

// RegisterWorkflows registers Herald's workflows under their names. The
// worker, the test environment and the replay test all go through it, so
// the names they use cannot drift apart.
func RegisterWorkflows(r WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(Delivery, workflow.RegisterOptions{Name: DeliveryWorkflowType})
	r.RegisterWorkflowWithOptions(Retention, workflow.RegisterOptions{Name: RetentionWorkflowType})
}

// Register registers the workflows, the activities of acts, the settings
// activity that answers a workflow started without settings (runs recorded
// before QueueFromLogVersion) with settings(), and StartActivity.
func Register(r Registry, acts *activities.Activities, settings func() (Params, error)) {
	RegisterWorkflows(r)
	r.RegisterActivity(acts)
	r.RegisterActivityWithOptions(func(context.Context) (Params, error) { return settings() },
		activity.RegisterOptions{Name: SettingsActivity})
	now := time.Now // the activities' clock, which Deliver reads too
	if acts.Clock != nil {
		now = acts.Clock
	}
	r.RegisterActivityWithOptions(func(ctx context.Context, in StartInput) (StartResult, error) {
		w, err := settings()
		if err != nil {
			return StartResult{}, err
		}
		w = w.WithDefaults()
		// The run's hints, recorded with the settings (StartInput).
		w.Busy, w.Quiet = in.Busy, in.Quiet
		// The rows, the pause and the subscription's error policy (from its
		// row, never from the workflow's input: ErrorPolicyChange), in one
		// round trip. A run's start has counted nothing yet, so what a
		// local attempt of the run delivered was delivered by a first
		// workflow task it lost.
		q, pol, err := activities.StartRead(ctx, acts, in.SubscriptionID, in.SubjectKey, w.MaxQueue)
		if err != nil {
			return StartResult{}, err
		}
		// The delivery, if the run asked for one, is made under the
		// subscription's policy, as the run's own first attempt would be
		// (the run applies it: a run that may ask is at OneMarkerVersion).
		return StartResult{Settings: w, Queue: q, Policy: pol,
			First: firstDelivery(ctx, acts, withPolicy(w, pol), q, in, now())}, nil
	}, activity.RegisterOptions{Name: StartActivity})
}

package workflows

import (
	"context"

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

// Register registers the workflows, the activities of acts, and the
// settings activity that answers a workflow started without settings (one
// an operator started) with settings().
func Register(r Registry, acts *activities.Activities, settings func() (Params, error)) {
	RegisterWorkflows(r)
	r.RegisterActivity(acts)
	r.RegisterActivityWithOptions(func(context.Context) (Params, error) { return settings() },
		activity.RegisterOptions{Name: SettingsActivity})
}

package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
)

// RetentionWorkflowType is the registered name of the Retention workflow.
const RetentionWorkflowType = "Retention"

// RetentionScheduleID is the id of the Temporal Schedule that runs retention.
const RetentionScheduleID = "herald-retention"

// RetentionParams configure one retention run. The worker's settings
// bound them: they may only make a run keep more.
type RetentionParams struct {
	// Keep is how long dispatched and rejected events are kept (default 30
	// days). A Keep shorter than the worker's HERALD_RETENTION is held to it
	// by the PurgeEvents activity; a longer one is honoured.
	Keep time.Duration `json:"keep,omitempty"`
	// BatchSize bounds each DELETE (default 1000, at most 10,000).
	BatchSize int `json:"batchSize,omitempty"`
}

// DefaultRetention is how long events are kept by default.
const DefaultRetention = activities.DefaultRetention

// Retention deletes dispatched and rejected events, and settled outcome
// rows, older than Keep, in bounded batches, and never anything newer than
// the worker's HERALD_RETENTION (the activity enforces it, so a run started
// by hand cannot go further). Undispatched events, held events and the
// audit trail are never touched; each run appends one retention.purged
// audit row. A Temporal Schedule runs it (daily by default).
func Retention(ctx workflow.Context, p RetentionParams) (activities.PurgeResult, error) {
	if p.Keep <= 0 {
		p.Keep = DefaultRetention
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 6 * time.Hour,
		HeartbeatTimeout:    2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 10 * time.Second, MaximumInterval: 10 * time.Minute},
	})
	in := activities.PurgeInput{Cutoff: workflow.Now(ctx).Add(-p.Keep), BatchSize: p.BatchSize}
	var res activities.PurgeResult
	err := workflow.ExecuteActivity(ctx, (*activities.Activities).PurgeEvents, in).Get(ctx, &res)
	if err == nil {
		workflow.GetLogger(ctx).Info("retention", "deleted", res.Deleted, "cutoff", res.Cutoff)
	}
	return res, err
}

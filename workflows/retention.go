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

// RetentionParams configure one retention run.
type RetentionParams struct {
	// Keep is how long dispatched and rejected events are kept (default 30 days).
	Keep time.Duration `json:"keep,omitempty"`
	// BatchSize bounds each DELETE (default 1000).
	BatchSize int `json:"batchSize,omitempty"`
}

// DefaultRetention is how long events are kept by default.
const DefaultRetention = 30 * 24 * time.Hour

// Retention deletes dispatched and rejected events older than Keep, in
// bounded batches. Undispatched events and the audit trail are never touched.
// A Temporal Schedule runs it (daily by default).
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
		workflow.GetLogger(ctx).Info("retention", "deleted", res.Deleted, "cutoff", in.Cutoff)
	}
	return res, err
}

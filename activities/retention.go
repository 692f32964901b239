package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// PurgeInput is the input of Activities.PurgeEvents.
type PurgeInput struct {
	// Cutoff: dispatched and rejected events older than this go.
	Cutoff time.Time `json:"cutoff"`
	// BatchSize bounds each DELETE (default 1000).
	BatchSize int `json:"batchSize,omitempty"`
}

// PurgeResult is what one retention run deleted.
type PurgeResult struct {
	Deleted int64 `json:"deleted"`
	Batches int   `json:"batches"`
}

// PurgeEvents deletes events past retention in bounded batches, heartbeating
// its progress so a long purge survives a worker restart.
func (a *Activities) PurgeEvents(ctx context.Context, in PurgeInput) (PurgeResult, error) {
	if in.BatchSize <= 0 {
		in.BatchSize = 1000
	}
	var res PurgeResult
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &res)
	}
	for {
		n, err := a.Store.PurgeEvents(ctx, in.Cutoff, in.BatchSize)
		if err != nil {
			return res, err
		}
		res.Deleted += n
		res.Batches++
		activity.RecordHeartbeat(ctx, res)
		if n < int64(in.BatchSize) {
			return res, nil
		}
	}
}

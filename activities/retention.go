package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"herald/store"
)

// DefaultRetention is how long events are kept when the worker sets no
// HERALD_RETENTION (Activities.Retention zero).
const DefaultRetention = 30 * 24 * time.Hour

// Bounds of PurgeInput.BatchSize.
const (
	DefaultPurgeBatch = 1000
	MaxPurgeBatch     = 10000
)

// PurgeInput is the input of Activities.PurgeEvents.
type PurgeInput struct {
	// Cutoff: dispatched and rejected events older than this go. It may
	// only make a run keep more: the activity never deletes anything newer
	// than the worker's Retention.
	Cutoff time.Time `json:"cutoff"`
	// BatchSize bounds each DELETE (default 1000, at most 10,000).
	BatchSize int `json:"batchSize,omitempty"`
}

// PurgeResult is what one retention run deleted. It is also the metadata
// of the run's retention.purged audit row.
type PurgeResult struct {
	// Deleted is Events + Outcomes.
	Deleted  int64 `json:"deleted"`
	Events   int64 `json:"events"`
	Outcomes int64 `json:"outcomes"`
	Batches  int   `json:"batches"`
	// CutoffRequested is the input's cutoff; Cutoff the one applied, which
	// is earlier when the request would have deleted rows newer than the
	// worker's Retention (Clamped).
	CutoffRequested time.Time `json:"cutoffRequested"`
	Cutoff          time.Time `json:"cutoff"`
	Clamped         bool      `json:"clamped"`
	// Retention is the worker's retention the cutoff was held to.
	Retention string `json:"retention"`
}

// PurgeEvents deletes events and settled outcome rows past retention in
// bounded batches, heartbeating its progress so a long purge survives a
// worker restart, and then appends one retention.purged audit row with the
// counts (also when it deleted nothing).
//
// The age limit is the worker's: the cutoff applied is never later than
// the time the activity was scheduled minus a.Retention, whatever the
// input asks (anyone who can reach Temporal can start a Retention run).
// The audit row is keyed by the scheduled activity: a retry after the row
// was written deletes nothing more and returns what the row recorded.
func (a *Activities) PurgeEvents(ctx context.Context, in PurgeInput) (PurgeResult, error) {
	info := activity.GetInfo(ctx)
	once := fmt.Sprintf("retention:%s/%s", info.WorkflowExecution.RunID, info.ActivityID)
	switch row, err := a.Store.AuditByOnceKey(ctx, once); {
	case err == nil:
		var done PurgeResult
		if err := json.Unmarshal(row.Metadata, &done); err != nil {
			return PurgeResult{}, fmt.Errorf("read audit row of once key %s: %w", once, err)
		}
		return done, nil
	case !errors.Is(err, store.ErrNotFound):
		return PurgeResult{}, err
	}
	batch := min(in.BatchSize, MaxPurgeBatch)
	if batch <= 0 {
		batch = DefaultPurgeBatch
	}
	keep := a.Retention
	if keep <= 0 {
		keep = DefaultRetention
	}
	// The scheduled time is the same for every attempt, so retries apply
	// the same cutoff; it is never later than now.
	now := time.Now()
	if s := info.ScheduledTime; !s.IsZero() && s.Before(now) {
		now = s
	}
	res := PurgeResult{CutoffRequested: in.Cutoff, Cutoff: in.Cutoff, Retention: keep.String()}
	if floor := now.Add(-keep); in.Cutoff.After(floor) {
		res.Cutoff, res.Clamped = floor, true
	}
	if res.Clamped && a.Logger != nil {
		a.Logger.Warn("retention cutoff held to the worker's retention", zap.Time("requested", in.Cutoff),
			zap.Time("applied", res.Cutoff), zap.Duration("retention", keep),
			zap.String("workflow", info.WorkflowExecution.ID))
	}
	if activity.HasHeartbeatDetails(ctx) {
		var prev PurgeResult
		if activity.GetHeartbeatDetails(ctx, &prev) == nil {
			res.Events, res.Outcomes, res.Batches = prev.Events, prev.Outcomes, prev.Batches
		}
	}
	for {
		n, err := a.Store.PurgeEvents(ctx, res.Cutoff, batch)
		res.Events += n.Events
		res.Outcomes += n.Outcomes
		res.Deleted = res.Events + res.Outcomes
		if err == nil {
			res.Batches++
		}
		activity.RecordHeartbeat(ctx, res)
		if err != nil {
			return res, err
		}
		if !n.Full(batch) {
			break
		}
	}
	meta := map[string]any{}
	b, err := json.Marshal(res)
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil {
		return res, fmt.Errorf("encode retention audit: %w", err)
	}
	if err := a.Store.Audit(ctx, store.AuditEntry{
		Action: store.ActionRetentionPurged, Actor: store.ActorSystem, TargetType: store.TargetRetention,
		TargetID: info.WorkflowExecution.ID, Metadata: meta, OnceKey: once,
	}); err != nil {
		return res, err
	}
	return res, nil
}

package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"herald/store"
	"herald/workflows"
)

// Describer is the part of a Temporal client that tells whether a key's
// workflow runs; a client.Client is one. Without it the relay re-drives
// nothing.
type Describer interface {
	DescribeWorkflow(ctx context.Context, workflowID, runID string) (*client.WorkflowExecutionDescription, error)
}

// RedriveObserver, when the relay's Observer is one, counts the keys the
// relay re-drove.
type RedriveObserver interface {
	Redriven(subscriptionID string)
}

// Bounds of a re-drive round: it looks at redriveScan keys that hold
// events (the next round goes on after the last), and asks Temporal about
// those whose head row has not changed for redriveQuiet and whose head
// event the relay has dispatched or failed to signal (QuietOwingKeys),
// redriveParallel at a time.
const (
	redriveQuiet    = 30 * time.Second
	redriveScan     = 1000
	redriveParallel = 8
)

// redriveCursor is where the next re-drive round starts.
type redriveCursor struct {
	mu           sync.Mutex
	sub, subject string
}

// Redrive starts the Delivery workflow of every key that owes events (its
// outcome rows) but whose workflow is gone: terminated, reset away, never
// started, or completed while a row was left held. The new run reads what
// the key owes from the rows. It returns how many keys it re-drove. The
// leader runs it with the sweep, every SweepInterval (20 s): such a key is
// driven again within a minute while fewer than 2 × redriveScan keys hold
// events, later beyond.
func (r *Relay) Redrive(ctx context.Context) (int, error) {
	r.defaults()
	desc, ok := r.Temporal.(Describer)
	if !ok {
		return 0, nil
	}
	r.cursor.mu.Lock()
	afterSub, afterSubject := r.cursor.sub, r.cursor.subject
	r.cursor.mu.Unlock()
	round, err := r.Store.QuietOwingKeys(ctx, afterSub, afterSubject, redriveQuiet, redriveScan)
	if err != nil {
		return 0, err
	}
	r.cursor.mu.Lock()
	r.cursor.sub, r.cursor.subject = round.LastSub, round.LastSubject
	r.cursor.mu.Unlock()
	return forEach(round.Quiet, redriveParallel, func(k store.OwingKey) bool {
		return r.redriveKey(ctx, desc, k)
	}), nil
}

// redriveKey starts one key's workflow if none runs, and reports whether
// it did.
func (r *Relay) redriveKey(ctx context.Context, desc Describer, k store.OwingKey) bool {
	id := workflows.DeliveryID(k.SubscriptionID, k.Subject)
	cctx, cancel := context.WithTimeout(ctx, sweepCallTimeout)
	defer cancel()
	d, err := desc.DescribeWorkflow(cctx, id, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		r.Logger.Warn("look up a key's workflow", zap.String("workflow", id), zap.Error(err))
		return false
	case d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		info := d.RawResponse.GetWorkflowExecutionInfo()
		if t, q := info.GetType().GetName(), info.GetTaskQueue(); t != workflows.DeliveryWorkflowType || q != workflows.TaskQueue {
			// Someone started another workflow type, or a Delivery on a
			// task queue no worker of Herald's polls, under the key's id:
			// signals reach it, not a run that delivers. An operator must
			// end it.
			r.Logger.Error("a key's workflow id is taken by a workflow that does not deliver",
				zap.String("workflow", id), zap.String("type", t), zap.String("taskQueue", q))
		}
		return false
	}
	params := r.keyParams(k.SubscriptionID, k.App, k.Type, k.Subject)
	opts := client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue, StaticSummary: workflows.Summary(params)}
	// No events in the signal: the new run reads them from the rows.
	err = r.withBuildIDs(&opts, workflows.StartAttributes(params), func() error {
		_, err := r.Temporal.SignalWithStartWorkflow(cctx, id, workflows.SignalEvent, workflows.EventSignal{}, opts,
			workflows.DeliveryWorkflowType, params)
		return err
	})
	if err != nil {
		r.Logger.Warn("re-drive a key whose workflow is gone", zap.String("workflow", id), zap.Error(err))
		return false
	}
	r.Logger.Info("re-drove a key whose workflow is gone", zap.String("workflow", id))
	if o, ok := r.Observer.(RedriveObserver); ok {
		o.Redriven(k.SubscriptionID)
	}
	return true
}

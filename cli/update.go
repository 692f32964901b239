package cli

import (
	"context"
	"errors"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"herald/workflows"
)

// updateTimeout bounds one operator Update. The key answers once the action
// is applied, and an action that touches the delivery in flight waits for
// the attempt under way (at most the delivery timeout, 30 s by default).
const updateTimeout = time.Minute

// rejectedError is an Update the workflow refused: its validator found the
// request malformed, or the workflow has no handler of that name. Nothing
// was applied and nothing was written to the workflow's history.
type rejectedError struct{ msg string }

func (e *rejectedError) Error() string { return e.msg }

// unknownUpdate reports whether the workflow rejected the Update because it
// has no handler of that name (yet, or at all).
func (e *rejectedError) unknownUpdate() bool { return strings.HasPrefix(e.msg, "unknown update") }

// updateOutcome reads the answer of an Update: the OpResult, or a
// rejectedError when the workflow refused the request.
func updateOutcome(ctx context.Context, h client.WorkflowUpdateHandle) (workflows.OpResult, error) {
	var res workflows.OpResult
	err := h.Get(ctx, &res)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return res, &rejectedError{msg: appErr.Message()}
	}
	return res, err
}

// update runs an operator Update on the current run of a key's workflow and
// waits for its answer.
func (tc *temporalConn) update(ctx context.Context, id, name string, payload any) (workflows.OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: []any{payload},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return workflows.OpResult{}, rejection(err)
	}
	return updateOutcome(ctx, h)
}

// updateWithStart runs an operator Update on a key's workflow, starting the
// workflow with params first when it is not running (Update-With-Start with
// the conflict policy USE_EXISTING), and waits for the answer.
func (tc *temporalConn) updateWithStart(ctx context.Context, id, name string, payload any, params workflows.Params) (workflows.OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	start := tc.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: id, TaskQueue: workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    workflows.StartAttributes(params),
		StaticSummary:            workflows.Summary(params),
	}, workflows.DeliveryWorkflowType, params)
	h, err := tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: name, Args: []any{payload},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return workflows.OpResult{}, rejection(err)
	}
	return updateOutcome(ctx, h)
}

// rejection turns an error that carries the workflow's refusal into a
// rejectedError; other errors pass through.
func rejection(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &rejectedError{msg: appErr.Message()}
	}
	return err
}

// updateCommand is the temporal CLI command line that runs the same Update.
func (tc *temporalConn) updateCommand(id, name string, payload any) string {
	return "temporal workflow update execute" + tc.temporalFlags() +
		" --workflow-id " + shellQuote(id) + " --name " + name + " --input " + shellQuote(compactPayload(payload))
}

// updateWithStartCommand is the temporal CLI command line that does the
// same Update-With-Start as updateWithStart.
func (tc *temporalConn) updateWithStartCommand(id, name string, payload any, params workflows.Params) string {
	return "temporal workflow execute-update-with-start" + tc.temporalFlags() +
		" --workflow-id " + shellQuote(id) + " --type " + workflows.DeliveryWorkflowType +
		" --task-queue " + workflows.TaskQueue + " --id-conflict-policy UseExisting" +
		" --input " + shellQuote(compactPayload(params)) +
		" --search-attribute " + shellQuote(workflows.SASubscription.GetName()+"="+quoteJSON(params.SubscriptionID)) +
		" --search-attribute " + shellQuote(workflows.SAApp.GetName()+"="+quoteJSON(params.SubscriberApp)) +
		" --search-attribute " + shellQuote(workflows.SAEventType.GetName()+"="+quoteJSON(params.EventType)) +
		" --update-name " + name + " --update-input " + shellQuote(compactPayload(payload))
}

// reasonTexts explain the reasons an operator action did nothing.
var reasonTexts = map[string]string{
	"nothing_to_redeliver": "the head is not failed, retrying or waiting",
	"no_failed_head":       "the head is not failed, retrying or waiting",
	"event_not_queued":     "that event is not queued for this key",
	"nothing_queued":       "nothing is queued for this key",
	"already_paused":       "the key is paused already",
	"not_paused":           "the key is not paused, and its subscription is not waiting to be re-checked",
	"event_not_found":      "the event is not in the event log",
	"event_not_for_key":    "the event belongs to another subject key or event type",
	"already_queued":       "the event is queued for this key already",
	"requeue_failed":       "the workflow could not read the event log; try again",
}

// reasonText is reason with its explanation, when there is one.
func reasonText(reason string) string {
	if reason == "" {
		reason = "no reason given"
	}
	if s, ok := reasonTexts[reason]; ok {
		return reason + " (" + s + ")"
	}
	return reason
}

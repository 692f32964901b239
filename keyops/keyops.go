// Package keyops sends operator actions to a delivery key's workflow from
// outside it: the Workflow Updates (redeliver, cancel, pause, resume) and
// their answer, with or without a start, and the signal with a start. `starter`
// (cli/) and the operations API (api/) both act through it, so an action
// is the same call, answered the same way, whichever way it comes in.
package keyops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"herald/store"
	"herald/workflows"
)

// UpdateTimeout bounds one operator Update. The key answers once the
// action is applied, and an action that touches the delivery in flight
// waits for the attempt under way (at most the delivery timeout, 30 s by
// default).
const UpdateTimeout = time.Minute

// Updater runs Workflow Updates (a client.Client does).
type Updater interface {
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
}

// SignalStarter sends a signal, starting the workflow when it is not
// running (a client.Client does).
type SignalStarter interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
}

// RejectedError is an Update the workflow refused: its validator found the
// request malformed, or the workflow has no handler of that name. Nothing
// was applied and nothing was written to the workflow's history.
type RejectedError struct {
	// Msg is the workflow's reason.
	Msg string
}

func (e *RejectedError) Error() string { return e.Msg }

// UnknownUpdate reports whether the workflow rejected the Update because
// it has no handler of that name (yet, or at all).
func (e *RejectedError) UnknownUpdate() bool { return strings.HasPrefix(e.Msg, "unknown update") }

// Update runs an operator Update on the current run of the key's workflow
// id and waits, at most UpdateTimeout, for its answer. A refusal by the
// workflow is a *RejectedError; other errors (a workflow that is not
// running is a *serviceerror.NotFound) come back as the client gave them.
func Update(ctx context.Context, c Updater, id, name string, payload any) (workflows.OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, UpdateTimeout)
	defer cancel()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: []any{payload},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return workflows.OpResult{}, rejection(err)
	}
	return outcome(ctx, h)
}

// UpdateStarter runs Update-With-Start (a client.Client does).
type UpdateStarter interface {
	NewWithStartWorkflowOperation(options client.StartWorkflowOptions, workflow any, args ...any) client.WithStartWorkflowOperation
	UpdateWithStartWorkflow(ctx context.Context, options client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error)
}

// UpdateWithStart runs an operator Update on the key's workflow id,
// starting the workflow with params first when it is not running
// (Update-With-Start with the conflict policy USE_EXISTING), and waits for
// the answer as Update does.
func UpdateWithStart(ctx context.Context, c UpdateStarter, id, name string, payload any, params workflows.Params) (workflows.OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, UpdateTimeout)
	defer cancel()
	opts := StartOptions(id, params)
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	start := c.NewWithStartWorkflowOperation(opts, workflows.DeliveryWorkflowType, params)
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: name, Args: []any{payload},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return workflows.OpResult{}, rejection(err)
	}
	return outcome(ctx, h)
}

// outcome reads the answer of an Update: the OpResult, or a RejectedError
// when the workflow refused the request.
func outcome(ctx context.Context, h client.WorkflowUpdateHandle) (workflows.OpResult, error) {
	var res workflows.OpResult
	return res, rejection(h.Get(ctx, &res))
}

// rejection turns an error that carries the workflow's refusal into a
// RejectedError; other errors pass through.
func rejection(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &RejectedError{Msg: appErr.Message()}
	}
	return err
}

// IdentityParams are the start input of a key's workflow started by an
// operator: who it delivers for, and no settings, so that the run takes
// the worker's.
func IdentityParams(sub store.Subscription, subject string) workflows.Params {
	return workflows.Params{SubscriptionID: sub.ID, SubscriberApp: sub.App, EventType: sub.Type, SubjectKey: subject}
}

// StartOptions start the delivery workflow of key id with params: on
// Herald's task queue, with the key's search attributes and summary.
func StartOptions(id string, params workflows.Params) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue,
		TypedSearchAttributes: workflows.StartAttributes(params), StaticSummary: workflows.Summary(params)}
}

// SignalWithStart sends one signal to the key's workflow id, starting the
// workflow with params first when it is not running (completed after
// being idle, or never started). The caller bounds the call with ctx.
func SignalWithStart(ctx context.Context, c SignalStarter, id, name string, payload any, params workflows.Params) error {
	_, err := c.SignalWithStartWorkflow(ctx, id, name, payload, StartOptions(id, params), workflows.DeliveryWorkflowType, params)
	return err
}

// Client runs Updates, with or without a start (a client.Client does).
type Client interface {
	Updater
	UpdateStarter
}

// KeyStart says whether the key an operator acts on, whose workflow is not
// running, is to get a run that takes the Update and, when it is, the
// input to start it with.
type KeyStart func(ctx context.Context) (params workflows.Params, start bool, err error)

// Resume runs the resume Update on the key's workflow id. A key paused in
// PostgreSQL whose workflow is not running (it was terminated with nothing
// queued) has no run to take the Update: when paused says so, the resume
// starts one with Update-With-Start, which reads the pause from the rows
// and takes the resume. Any other key's missing workflow is the
// *serviceerror.NotFound Update gives.
func Resume(ctx context.Context, c Client, id string, payload any, paused KeyStart) (workflows.OpResult, error) {
	return updateOrStart(ctx, c, id, workflows.UpdateResume, payload, paused, "whether the key is paused")
}

// Pause runs the pause Update on the key's workflow id. A key of the log
// whose run has ended (it completed once it owed nothing, or was
// terminated) has no run to take the Update: when known says the log holds
// events of the key, the pause starts one with Update-With-Start, which
// takes the pause, writes it to the key's paused_keys row and holds the key
// paused, its next events queued behind the pause, until a resume. Any
// other key's missing workflow (a subject the subscription never had) is
// the *serviceerror.NotFound Update gives.
func Pause(ctx context.Context, c Client, id string, payload any, known KeyStart) (workflows.OpResult, error) {
	return updateOrStart(ctx, c, id, workflows.UpdatePause, payload, known, "whether the log holds events of the key")
}

// KeyQuestion is what PostgreSQL is asked about a key with no run, whose
// yes gives it a run that takes an operator's Update (StartsKey).
type KeyQuestion func(st *store.Store, ctx context.Context, subscriptionID, subject string) (bool, error)

// StartsKey is, for the Update name, the question whose yes gives a key
// with no run one that takes it: a resume when PostgreSQL holds the key
// paused (terminated with nothing queued), a pause when the log holds an
// event of it (its run ended once it owed nothing). nil for the Updates
// that never start a run.
func StartsKey(name string) KeyQuestion {
	switch name {
	case workflows.UpdateResume:
		return (*store.Store).KeyPaused
	case workflows.UpdatePause:
		return (*store.Store).KeyHasEvents
	}
	return nil
}

// Act runs the Update name on the key's workflow id as Resume and Pause do
// for theirs, start answering StartsKey(name)'s question; any other Update
// as Update does (start is not asked).
func Act(ctx context.Context, c Client, id, name string, payload any, start KeyStart) (workflows.OpResult, error) {
	switch name {
	case workflows.UpdateResume:
		return Resume(ctx, c, id, payload, start)
	case workflows.UpdatePause:
		return Pause(ctx, c, id, payload, start)
	}
	return Update(ctx, c, id, name, payload)
}

// updateOrStart runs the Update name on the key's workflow id and, when no
// run takes it and start says the key is to get one, runs it again with
// Update-With-Start. what names start's question in its error.
func updateOrStart(ctx context.Context, c Client, id, name string, payload any, start KeyStart, what string) (workflows.OpResult, error) {
	res, err := Update(ctx, c, id, name, payload)
	var missing *serviceerror.NotFound
	if !errors.As(err, &missing) {
		return res, err
	}
	params, ok, serr := start(ctx)
	switch {
	case serr != nil:
		return res, fmt.Errorf("%v; and %s could not be read: %w", err, what, serr)
	case !ok:
		return res, err
	}
	return UpdateWithStart(ctx, c, id, name, payload, params)
}

package keyops_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"herald/keyops"
	"herald/workflows"
)

// fakeClient records what keyops asks of Temporal and answers as told.
type fakeClient struct {
	// callErr fails the call itself; answer and getErr are the Update's.
	callErr error
	answer  workflows.OpResult
	getErr  error

	update    client.UpdateWorkflowOptions
	deadline  time.Duration
	start     client.StartWorkflowOptions
	startType any
	startArgs []any
	signal    string
	signalArg any
	// missing: no run is there until an Update-With-Start; withStart
	// records one.
	missing   bool
	withStart bool
}

type fakeHandle struct{ c *fakeClient }

func (h fakeHandle) WorkflowID() string { return h.c.update.WorkflowID }
func (h fakeHandle) RunID() string      { return "" }
func (h fakeHandle) UpdateID() string   { return "" }
func (h fakeHandle) Get(_ context.Context, v any) error {
	if h.c.getErr != nil {
		return h.c.getErr
	}
	*v.(*workflows.OpResult) = h.c.answer
	return nil
}

func (c *fakeClient) UpdateWorkflow(ctx context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.update = o
	if d, ok := ctx.Deadline(); ok {
		c.deadline = time.Until(d)
	}
	if c.callErr != nil {
		return nil, c.callErr
	}
	return fakeHandle{c}, nil
}

func (c *fakeClient) NewWithStartWorkflowOperation(o client.StartWorkflowOptions, wf any, args ...any) client.WithStartWorkflowOperation {
	c.start, c.startType, c.startArgs = o, wf, args
	return nil
}

func (c *fakeClient) UpdateWithStartWorkflow(ctx context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.withStart = true
	if c.missing {
		c.missing = false // the start makes the run that takes the Update
		c.callErr = nil
	}
	return c.UpdateWorkflow(ctx, o.UpdateOptions)
}

func (c *fakeClient) SignalWithStartWorkflow(_ context.Context, id, name string, arg any,
	o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	c.start, c.startType, c.startArgs, c.signal, c.signalArg = o, wf, args, name, arg
	return nil, c.callErr
}

var params = workflows.Params{SubscriptionID: "billing:contacts.person.updated@1", SubscriberApp: "billing",
	EventType: "contacts.person.updated", SubjectKey: "person-1"}

// TestUpdateAnswers: an Update waits for its completion within
// UpdateTimeout and returns the key's answer; a refusal by the workflow,
// when the call is made or when it is answered, is a RejectedError with
// the workflow's message (UnknownUpdate for a workflow without that
// handler); other errors come back as they were.
func TestUpdateAnswers(t *testing.T) {
	ctx := context.Background()
	id := workflows.DeliveryID(params.SubscriptionID, params.SubjectKey)
	payload := workflows.ControlSignal{Actor: "ops", Reason: "maintenance"}

	c := &fakeClient{answer: workflows.OpResult{Changed: true, Status: "paused", Queued: 3}}
	res, err := keyops.Update(ctx, c, id, workflows.UpdatePause, payload)
	if err != nil || !reflect.DeepEqual(res, c.answer) {
		t.Fatalf("Update: %+v, %v; want %+v", res, err, c.answer)
	}
	if c.update.WorkflowID != id || c.update.UpdateName != workflows.UpdatePause || len(c.update.Args) != 1 ||
		!reflect.DeepEqual(c.update.Args[0], payload) || c.update.WaitForStage != client.WorkflowUpdateStageCompleted {
		t.Errorf("Update asked %+v", c.update)
	}
	if c.deadline <= 0 || c.deadline > keyops.UpdateTimeout {
		t.Errorf("Update's deadline is %s away, want within %s", c.deadline, keyops.UpdateTimeout)
	}

	for _, c := range []*fakeClient{
		{getErr: temporal.NewApplicationError("unknown update pause", "")},
		{callErr: temporal.NewApplicationError("unknown update pause", "")},
	} {
		_, err := keyops.Update(ctx, c, id, workflows.UpdatePause, payload)
		var rejected *keyops.RejectedError
		if !errors.As(err, &rejected) || rejected.Msg != "unknown update pause" || !rejected.UnknownUpdate() {
			t.Errorf("a refusal: %v (%T)", err, err)
		}
	}
	_, err = keyops.Update(ctx, &fakeClient{getErr: temporal.NewApplicationError("reason is over 1000 characters", "")}, id, workflows.UpdatePause, payload)
	var rejected *keyops.RejectedError
	if !errors.As(err, &rejected) || rejected.UnknownUpdate() {
		t.Errorf("a malformed request: %v", err)
	}
	_, err = keyops.Update(ctx, &fakeClient{callErr: serviceerror.NewNotFound("workflow not found")}, id, workflows.UpdatePause, payload)
	var missing *serviceerror.NotFound
	if !errors.As(err, &missing) {
		t.Errorf("a workflow that is not running: %v (%T)", err, err)
	}
}

// TestStartsTheKeysWorkflow: Update-With-Start and signal-with-start start
// the key's delivery workflow on Herald's task queue with its search
// attributes (Update-With-Start joining a running one), and pass the
// action on.
func TestStartsTheKeysWorkflow(t *testing.T) {
	ctx := context.Background()
	id := workflows.DeliveryID(params.SubscriptionID, params.SubjectKey)
	payload := workflows.RedeliverSignal{EventID: "0193f1d2-6f4e-7c6b-9a10-1b2c3d4e5f60", Actor: "ops"}
	checkStart := func(what string, c *fakeClient) {
		t.Helper()
		if c.start.ID != id || c.start.TaskQueue != workflows.TaskQueue || c.start.StaticSummary != workflows.Summary(params) ||
			c.start.TypedSearchAttributes.Size() != workflows.StartAttributes(params).Size() || c.start.TypedSearchAttributes.Size() == 0 ||
			c.startType != workflows.DeliveryWorkflowType || len(c.startArgs) != 1 || !reflect.DeepEqual(c.startArgs[0], params) {
			t.Errorf("%s started %+v, %v %v", what, c.start, c.startType, c.startArgs)
		}
	}

	c := &fakeClient{answer: workflows.OpResult{Changed: true}}
	if _, err := keyops.UpdateWithStart(ctx, c, id, workflows.UpdateRedeliver, payload, params); err != nil {
		t.Fatal(err)
	}
	checkStart("Update-With-Start", c)
	if c.start.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING || c.update.UpdateName != workflows.UpdateRedeliver {
		t.Errorf("Update-With-Start: policy %v, update %q", c.start.WorkflowIDConflictPolicy, c.update.UpdateName)
	}

	c = &fakeClient{}
	if err := keyops.SignalWithStart(ctx, c, id, workflows.SignalRedeliver, payload, params); err != nil {
		t.Fatal(err)
	}
	checkStart("signal-with-start", c)
	if c.signal != workflows.SignalRedeliver || !reflect.DeepEqual(c.signalArg, payload) {
		t.Errorf("signal-with-start sent %q %+v", c.signal, c.signalArg)
	}
	c = &fakeClient{callErr: errors.New("unavailable")}
	if err := keyops.SignalWithStart(ctx, c, id, workflows.SignalRedeliver, payload, params); err == nil {
		t.Error("a failed signal-with-start returned no error")
	}
}

// TestPauseAndResumeStartARunWhenTold: a pause or resume whose key has no
// run asks whether the key is to get one; when it is, the Update goes
// again with a start (the key's input), and its answer is the run's; when
// it is not, the NotFound stands and nothing is started; when the question
// cannot be answered, the error says why and is no NotFound (it is not
// known that no run is owed).
func TestPauseAndResumeStartARunWhenTold(t *testing.T) {
	ctx := context.Background()
	id := workflows.DeliveryID(params.SubscriptionID, params.SubjectKey)
	payload := workflows.ControlSignal{Actor: "ops", Reason: "maintenance"}
	for name, act := range map[string]func(context.Context, keyops.Client, string, any, keyops.KeyStart) (workflows.OpResult, error){
		workflows.UpdatePause:  keyops.Pause,
		workflows.UpdateResume: keyops.Resume,
	} {
		answer := workflows.OpResult{Changed: true, Status: "paused"}
		missing := func() *fakeClient {
			return &fakeClient{missing: true, callErr: serviceerror.NewNotFound("workflow not found"), answer: answer}
		}
		asked := 0
		start := func(ok bool, err error) keyops.KeyStart {
			return func(context.Context) (workflows.Params, bool, error) { asked++; return params, ok, err }
		}

		c := missing()
		res, err := act(ctx, c, id, payload, start(true, nil))
		if err != nil || !reflect.DeepEqual(res, answer) || !c.withStart || c.update.UpdateName != name ||
			c.start.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING || !reflect.DeepEqual(c.startArgs, []any{params}) {
			t.Errorf("%s of a key owed a run: %+v, %v; with start %v, update %q, start %+v %v", name, res, err, c.withStart, c.update.UpdateName, c.start, c.startArgs)
		}

		c = missing()
		_, err = act(ctx, c, id, payload, start(false, nil))
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) || c.withStart {
			t.Errorf("%s of a key owed no run: %v (with start %v), want the NotFound and no start", name, err, c.withStart)
		}

		c = missing()
		_, err = act(ctx, c, id, payload, start(true, errors.New("database down")))
		if err == nil || errors.As(err, &nf) || !strings.Contains(err.Error(), "database down") || c.withStart {
			t.Errorf("%s whose question failed: %v (with start %v), want the database's error, no NotFound, no start", name, err, c.withStart)
		}

		asked = 0
		c = &fakeClient{answer: answer}
		if _, err := act(ctx, c, id, payload, start(true, nil)); err != nil || asked != 0 || c.withStart {
			t.Errorf("%s of a running key: %v, asked %d, with start %v; want the Update alone", name, err, asked, c.withStart)
		}
	}
}

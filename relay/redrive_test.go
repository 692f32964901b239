package relay_test

import (
	"context"
	"slices"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"herald/relay"
	"herald/workflows"
)

// describingTemporal is a fakeTemporal that also answers DescribeWorkflow:
// running says which workflows run, and as what.
type describingTemporal struct {
	*fakeTemporal
	running map[string]*workflowpb.WorkflowExecutionInfo
}

func (d describingTemporal) DescribeWorkflow(_ context.Context, id, _ string) (*client.WorkflowExecutionDescription, error) {
	info, ok := d.running[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &client.WorkflowExecutionDescription{
		RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info},
	}, nil
}

// TestRedriveStartsKeysWhoseWorkflowIsGone: a key that owes events with no
// workflow running is started again with an empty signal; keys whose
// Delivery runs, or whose rows just moved, are left alone; a workflow that
// does not deliver (another type) is not replaced.
func TestRedriveStartsKeysWhoseWorkflowIsGone(t *testing.T) {
	t.Parallel()
	st, pub := setup(t)
	ctx := context.Background()
	for _, k := range []string{"gone", "runs", "other"} {
		publishN(t, pub, "contacts.person.updated", "person-"+k, 2)
	}
	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp}
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	sub := "billing:contacts.person.updated@1"
	running := func(typ, queue string) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			Type: &commonpb.WorkflowType{Name: typ}, TaskQueue: queue, Execution: &commonpb.WorkflowExecution{}}
	}
	dt := describingTemporal{fakeTemporal: &fakeTemporal{}, running: map[string]*workflowpb.WorkflowExecutionInfo{
		workflows.DeliveryID(sub, "person-runs"):  running(workflows.DeliveryWorkflowType, workflows.TaskQueue),
		workflows.DeliveryID(sub, "person-other"): running("Retention", workflows.TaskQueue),
		// crm's keys all run.
		workflows.DeliveryID("crm:contacts.person.updated@1", "person-gone"):  running(workflows.DeliveryWorkflowType, workflows.TaskQueue),
		workflows.DeliveryID("crm:contacts.person.updated@1", "person-runs"):  running(workflows.DeliveryWorkflowType, workflows.TaskQueue),
		workflows.DeliveryID("crm:contacts.person.updated@1", "person-other"): running(workflows.DeliveryWorkflowType, workflows.TaskQueue),
	}}
	// A server that refuses BuildIds in a start: the re-drive's is sent
	// again without them.
	dt.fakeTemporal.refuseBuildIDs = true
	rr := &relay.Relay{Store: st, Temporal: dt, Params: workflows.Params{MaxRearms: 7}, BuildID: "b1d"}
	// The rows were just written: nothing is quiet yet.
	if n, err := rr.Redrive(ctx); err != nil || n != 0 {
		t.Fatalf("fresh rows: re-drove %d, %v", n, err)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE outcomes SET updated_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	n, err := rr.Redrive(ctx)
	if err != nil || n != 1 {
		t.Fatalf("re-drove %d, %v; want the one key whose workflow is gone", n, err)
	}
	sent := dt.fakeTemporal.signals
	if len(sent) != 1 || sent[0].WorkflowID != workflows.DeliveryID(sub, "person-gone") || len(sent[0].Seqs) != 0 ||
		sent[0].Params.SubjectKey != "person-gone" || sent[0].Params.SubscriberApp != "billing" || sent[0].Params.MaxRearms != 7 ||
		sent[0].Params.Version != workflows.NoMarkerVersion || sent[0].BuildIDs != nil {
		t.Fatalf("signals %+v", sent)
	}

	// A server that takes them: the re-drive's start carries them.
	if _, err := st.Pool.Exec(ctx, `UPDATE outcomes SET updated_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	dt2 := describingTemporal{fakeTemporal: &fakeTemporal{}, running: dt.running}
	r2 := &relay.Relay{Store: st, Temporal: dt2, BuildID: "b1d"}
	if n, err := r2.Redrive(ctx); err != nil || n != 1 {
		t.Fatalf("re-drove %d, %v; want the key whose workflow is gone", n, err)
	}
	if got := dt2.fakeTemporal.signals; len(got) != 1 || !slices.Equal(got[0].BuildIDs, []string{"unversioned", "unversioned:b1d"}) {
		t.Fatalf("re-drive signals %+v, want BuildIds of the relay's build id", got)
	}
}

// gatedTemporal is a fakeTemporal whose SignalWithStart calls say they
// began (began) and then wait until gate closes.
type gatedTemporal struct {
	*fakeTemporal
	began chan struct{}
	gate  chan struct{}
}

func (g gatedTemporal) SignalWithStartWorkflow(ctx context.Context, id, name string, arg any,
	opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	select {
	case g.began <- struct{}{}:
	default:
	}
	<-g.gate
	return g.fakeTemporal.SignalWithStartWorkflow(ctx, id, name, arg, opts, wf, args...)
}

// TestRedriveLeavesTheRoundsKeysToTheRelay: a relay round writes every row
// before its first signal, and a burst's round can take minutes to signal
// or start its keys. Its keys are not re-driven however old their rows are
// (the sweep would start each, and the round's own call then signal it
// again); once the round has handed them out, a key whose workflow is gone
// is.
func TestRedriveLeavesTheRoundsKeysToTheRelay(t *testing.T) {
	t.Parallel()
	st, pub := setup(t)
	ctx := context.Background()
	publishN(t, pub, "contacts.person.updated", "person-burst", 1)
	held := gatedTemporal{fakeTemporal: &fakeTemporal{}, began: make(chan struct{}, 1), gate: make(chan struct{})}
	r := &relay.Relay{Store: st, Temporal: held}
	round := make(chan error, 1)
	go func() {
		_, err := r.DispatchOnce(ctx)
		round <- err
	}()
	<-held.began // the rows are written; the round is signalling
	if _, err := st.Pool.Exec(ctx, `UPDATE outcomes SET updated_at = now() - interval '5 minutes'`); err != nil {
		t.Fatal(err)
	}
	gone := describingTemporal{fakeTemporal: &fakeTemporal{}} // no workflow runs
	rr := &relay.Relay{Store: st, Temporal: gone}
	if n, err := rr.Redrive(ctx); err != nil || n != 0 || len(gone.fakeTemporal.signals) != 0 {
		t.Fatalf("during the round: re-drove %d, %v; want none, the round's keys are the relay's", n, err)
	}
	close(held.gate)
	if err := <-round; err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE outcomes SET updated_at = now() - interval '5 minutes'`); err != nil {
		t.Fatal(err)
	}
	if n, err := rr.Redrive(ctx); err != nil || n != 2 {
		t.Fatalf("after the round: re-drove %d, %v; want both subscriptions' keys, whose workflows are gone", n, err)
	}
}

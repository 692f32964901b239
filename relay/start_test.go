package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"herald/relay"
	"herald/workflows"
)

// startingTemporal is fakeTemporal that also starts workflows: the ids in
// running answer "already started".
type startingTemporal struct {
	fakeTemporal
	smu     sync.Mutex
	started []string
	running map[string]bool
	opts    []client.StartWorkflowOptions
}

func (f *startingTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	if wf != workflows.DeliveryWorkflowType || len(args) != 1 {
		return nil, fmt.Errorf("unexpected start %v %v", wf, args)
	}
	if p := args[0].(workflows.Params); p.SubjectKey == "" || p.SubscriptionID == "" {
		return nil, fmt.Errorf("start params %+v", p)
	}
	f.opts = append(f.opts, opts)
	if f.running[opts.ID] {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("running", "", "")
	}
	f.started = append(f.started, opts.ID)
	if f.running == nil {
		f.running = map[string]bool{}
	}
	f.running[opts.ID] = true
	return nil, nil
}

// TestNewKeysAreStartedEagerly: a key the relay has not started or
// signalled lately gets an eager start without events (its run reads the
// queued rows the relay wrote first) instead of a signal; a key it started
// is signalled next time; a key whose workflow already runs is signalled;
// with StartNewKeys off every key is signalled.
func TestNewKeysAreStartedEagerly(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	billing := func(subject string) string { return workflows.DeliveryID("billing:contacts.person.updated@1", subject) }
	crm := func(subject string) string { return workflows.DeliveryID("crm:contacts.person.updated@1", subject) }
	tmp := &startingTemporal{running: map[string]bool{crm("p2"): true}}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true}

	publishN(t, p, "contacts.person.updated", "p1", 2)
	publishN(t, p, "contacts.person.updated", "p2", 1)
	round, err := r.DispatchOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if round.Dispatched != 3 || round.Signals != 4 || round.Failed != 0 {
		t.Fatalf("round %+v", round)
	}
	if got, want := fmt.Sprint(sorted(tmp.started)), fmt.Sprint(sorted([]string{billing("p1"), crm("p1"), billing("p2")})); got != want {
		t.Fatalf("started %s, want %s", got, want)
	}
	for _, o := range tmp.opts {
		if !o.EnableEagerStart || o.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL ||
			!o.WorkflowExecutionErrorWhenAlreadyStarted || o.TaskQueue != workflows.TaskQueue {
			t.Fatalf("start options %+v", o)
		}
	}
	// crm's p2 runs already: its start failed, and it got its signal.
	if got := fmt.Sprint(tmp.bySeq()); got != fmt.Sprint(map[string][]int64{crm("p2"): {3}}) {
		t.Fatalf("signals %s, want only crm's p2", got)
	}
	var queued int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM outcomes WHERE status = 'queued'`).Scan(&queued); err != nil || queued != 6 {
		t.Fatalf("%d queued outcome rows (%v), want 6: a started run reads them", queued, err)
	}

	// Started keys are signalled next time, without another start.
	publishN(t, p, "contacts.person.updated", "p1", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(tmp.started) != 3 || len(tmp.opts) != 4 {
		t.Fatalf("%d starts (%d tried) after a second event of started keys, want 3 (4)", len(tmp.started), len(tmp.opts))
	}
	if got := tmp.bySeq(); fmt.Sprint(got[billing("p1")]) != "[4]" || fmt.Sprint(got[crm("p1")]) != "[4]" {
		t.Fatalf("signals %v: want seq 4 signalled to both p1 keys", got)
	}

	// Off: a new key is signalled.
	off := &startingTemporal{}
	r2 := &relay.Relay{Store: st, Temporal: off}
	publishN(t, p, "contacts.person.updated", "p3", 1)
	if _, err := r2.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(off.opts) != 0 || len(off.bySeq()) != 2 {
		t.Fatalf("with StartNewKeys off: %d starts, signals %v", len(off.opts), off.bySeq())
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

package relay_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"herald/internal/tracing"
	"herald/publish"
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
	params  []workflows.Params
	// startErr, when set, is every start's answer.
	startErr error
}

func (f *startingTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	if wf != workflows.DeliveryWorkflowType || len(args) != 1 {
		return nil, fmt.Errorf("unexpected start %v %v", wf, args)
	}
	p := args[0].(workflows.Params)
	if p.SubjectKey == "" || p.SubscriptionID == "" || p.Version != workflows.NoMarkerVersion && p.Version != workflows.DeliverInStartVersion {
		return nil, fmt.Errorf("start params %+v", p)
	}
	// A bare start (a quiet run for one event) carries no search
	// attributes; any other carries them.
	if bare := p.Version == workflows.DeliverInStartVersion; bare != (opts.TypedSearchAttributes.Size() == 0) ||
		bare && (p.Busy || !p.Quiet && !p.EndQuietKeys) {
		return nil, fmt.Errorf("start params %+v with %d search attributes", p, opts.TypedSearchAttributes.Size())
	}
	f.opts = append(f.opts, opts)
	f.params = append(f.params, args[0].(workflows.Params))
	if f.startErr != nil {
		return nil, f.startErr
	}
	if _, ok := opts.TypedSearchAttributes.GetKeywordList(workflows.SABuildIDs); ok && f.refuseBuildIDs {
		return nil, buildIDsRefusal
	}
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

// billingID and crmID are the workflow ids of subject's keys at the two
// subscriptions setup applies.
func billingID(subject string) string {
	return workflows.DeliveryID("billing:contacts.person.updated@1", subject)
}

func crmID(subject string) string {
	return workflows.DeliveryID("crm:contacts.person.updated@1", subject)
}

// ended makes id's workflow no longer running: a start of it succeeds.
func (f *startingTemporal) ended(id string) {
	f.smu.Lock()
	defer f.smu.Unlock()
	delete(f.running, id)
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
	tmp := &startingTemporal{running: map[string]bool{crmID("p2"): true}}
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
	if got, want := fmt.Sprint(sorted(tmp.started)), fmt.Sprint(sorted([]string{billingID("p1"), crmID("p1"), billingID("p2")})); got != want {
		t.Fatalf("started %s, want %s", got, want)
	}
	for _, o := range tmp.opts {
		if !o.EnableEagerStart || o.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL ||
			!o.WorkflowExecutionErrorWhenAlreadyStarted || o.TaskQueue != workflows.TaskQueue {
			t.Fatalf("start options %+v", o)
		}
		// A key started for one event starts idle (its first attempt
		// writes no status); one with more starts delivering.
		want := workflows.StatusDelivering
		if strings.HasSuffix(o.ID, "p2") {
			want = workflows.StatusIdle
		}
		if status, _ := o.TypedSearchAttributes.GetKeyword(workflows.SAStatus); status != want {
			t.Fatalf("%s started %q, want %q", o.ID, status, want)
		}
	}
	// crm's p2 runs already: its start failed, and it got its signal.
	if got := fmt.Sprint(tmp.bySeq()); got != fmt.Sprint(map[string][]int64{crmID("p2"): {3}}) {
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
	if got := tmp.bySeq(); fmt.Sprint(got[billingID("p1")]) != "[4]" || fmt.Sprint(got[crmID("p1")]) != "[4]" {
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

// TestQuietKeysAreStartedAgain: with Params.EndQuietKeys a run the relay
// started eagerly ends once it has delivered, so the key's next event,
// once HotWindow has passed, gets a start again, not a signal to a workflow
// that is gone; a key whose run still runs answers "already started" and is
// signalled.
func TestQuietKeysAreStartedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const window = 200 * time.Millisecond
	r, tmp, p, billing, crm := quietKeysStarted(t, "q1", window)
	// billing's run ended (it owed nothing more); crm's still runs.
	tmp.ended(billing)
	time.Sleep(window + 50*time.Millisecond)
	publishN(t, p, "contacts.person.updated", "q1", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sorted(tmp.started)); got != fmt.Sprint(sorted([]string{billing, crm, billing})) {
		t.Fatalf("started %s: want billing's key started again", got)
	}
	for _, prm := range tmp.params[2:] {
		if prm.Busy || prm.Quiet {
			t.Fatalf("started again past the window with %+v: want no hint (EndQuietKeys ends it)", prm)
		}
	}
	if got := tmp.bySeq(); len(got) != 1 || len(got[crm]) != 1 {
		t.Fatalf("signals %v: want the second event signalled to crm's running key only", got)
	}
}

// TestBusyQuietKeysWaitIdle: with Params.EndQuietKeys a key back within
// HotWindow of its start is busy: when its quiet run has ended it is
// started again, eagerly, as busy (its run waits idle); when the run still
// runs it is signalled. Either way its run now waits idle, and the key is
// signalled for as long as the idle timeout. Without quiet runs the window
// plays no part.
func TestBusyQuietKeysWaitIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const window = 2 * time.Second
	r, tmp, p, billing, crm := quietKeysStarted(t, "b1", window)
	// billing's quiet run ended at once; crm's still runs. Both keys are
	// back within the window.
	tmp.ended(billing)
	publishN(t, p, "contacts.person.updated", "b1", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(tmp.opts) != 4 || fmt.Sprint(sorted(tmp.started)) != fmt.Sprint(sorted([]string{billing, crm, billing})) {
		t.Fatalf("%d starts tried, started %v: want both keys tried again, billing's started", len(tmp.opts), tmp.started)
	}
	for i, o := range tmp.opts[2:] {
		if !tmp.params[2+i].Busy || !o.EnableEagerStart {
			t.Fatalf("%s started again with %+v (eager %v): want an eager start as busy", o.ID, tmp.params[2+i], o.EnableEagerStart)
		}
	}
	if got := tmp.bySeq(); len(got) != 1 || fmt.Sprint(got[crm]) != "[2]" {
		t.Fatalf("signals %v: want the second event signalled to crm's running key only", got)
	}
	// Both runs wait idle: the keys are signalled past the window, within
	// the idle timeout.
	time.Sleep(window + 50*time.Millisecond)
	publishN(t, p, "contacts.person.updated", "b1", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tmp.bySeq(); len(tmp.opts) != 4 || fmt.Sprint(got[billing]) != "[3]" || fmt.Sprint(got[crm]) != "[2 3]" {
		t.Fatalf("%d starts tried, signals %v: want the third event signalled to both keys", len(tmp.opts), got)
	}

	// Without quiet runs a started key is signalled for the idle timeout,
	// however small the window.
	plain := &startingTemporal{}
	r2 := &relay.Relay{Store: r.Store, Temporal: plain, StartNewKeys: true, HotWindow: time.Nanosecond}
	publishN(t, p, "contacts.person.updated", "b2", 1)
	if _, err := r2.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	publishN(t, p, "contacts.person.updated", "b2", 1)
	if _, err := r2.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(plain.opts) != 2 || len(plain.bySeq()) != 2 {
		t.Fatalf("without quiet runs: %d starts tried, signals %v; want 2 starts, then 2 signals", len(plain.opts), plain.bySeq())
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// TestStartOutageSendsNoSignal: a start that Temporal does not answer
// (unavailable, a deadline, a rate limit) is the key's failed attempt, as a
// failed signal is, and the relay does not send the signal after it, which
// would wait as long again for the same answer. Like a failed signal's, the
// failure counts no attempt in a round in which Temporal accepted nothing.
func TestStartOutageSendsNoSignal(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		serviceerror.NewUnavailable("connection refused"),
		serviceerror.NewDeadlineExceeded("context deadline exceeded"),
		serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "namespace rate limit"),
	} {
		t.Run(err.Error(), func(t *testing.T) {
			t.Parallel()
			st, p := setup(t)
			tmp := &startingTemporal{startErr: err}
			var signalled atomic.Int32 // signals tried, all refused as the starts were
			tmp.refuse = func(string) bool { signalled.Add(1); return true }
			tmp.refuseWith = err
			r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, MaxAttempts: 5}
			publishN(t, p, "contacts.person.updated", "p1", 2)
			round, rerr := r.DispatchOnce(context.Background())
			if rerr != nil {
				t.Fatal(rerr)
			}
			if calls := signalled.Load(); len(tmp.opts) != 2 || calls != 0 || round.Signals != 0 || round.Failed != 2 || round.BackingOff != 2 {
				t.Fatalf("round %+v, %d starts, %d signals: want 2 failed starts (billing's and crm's p1) and no signal", round, len(tmp.opts), calls)
			}
			if ev := relayState(t, st, 1); ev.RelayAttempts != 0 || !strings.Contains(ev.RelayError, err.Error()) || ev.RelayNextTry == nil {
				t.Fatalf("event after an outage's round: %+v; want it backing off, no attempt counted", ev)
			}
		})
	}
}

// TestRefusedStartIsSignalled: a start Temporal refuses for a reason of its
// own (not "already started", not an outage) is logged as a warning and
// recorded on the start's span, and the key gets its signal, which may
// still go through. Serial: installs the process-wide tracer provider.
func TestRefusedStartIsSignalled(t *testing.T) {
	st, p := setup(t)
	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer tracing.Reset()
	core, logs := observer.New(zap.WarnLevel)
	tmp := &startingTemporal{startErr: serviceerror.NewInvalidArgument("eager start refused")}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, Logger: zap.New(core)}
	publishN(t, p, "contacts.person.deleted", "p1", 1) // crm's only
	round, err := r.DispatchOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if round.Signals != 1 || round.Failed != 0 || round.Dispatched != 1 || len(tmp.opts) != 1 {
		t.Fatalf("round %+v after %d starts: want the refused start's key signalled", round, len(tmp.opts))
	}
	if got := logs.FilterMessage("start a key's workflow").Len(); got != 1 {
		t.Fatalf("%d warnings about the refused start, want 1 (logs %v)", got, logs.All())
	}
	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == relay.SpanSignal {
			spans = append(spans, s)
		}
	}
	if len(spans) != 2 || spans[0].Status().Code != codes.Error || spans[1].Status().Code == codes.Error {
		var st []codes.Code
		for _, s := range spans {
			st = append(st, s.Status().Code)
		}
		t.Fatalf("%d relay signal spans, statuses %v: want the start's failed and the signal's not", len(spans), st)
	}
}

// TestUnansweredStartPausesEagerStarts: an eager start that Temporal does
// not answer may still have created the run, whose first workflow task the
// server then holds as started by a worker that never got it (10 s lost to
// its start-to-close timeout, more on a slow server: issue 26). After one,
// new keys get SignalWithStart, whose task waits on the queue for any
// poller, until eager starts resume; the pause is logged once.
func TestUnansweredStartPausesEagerStarts(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	core, logs := observer.New(zap.WarnLevel)
	tmp := &startingTemporal{startErr: serviceerror.NewDeadlineExceeded("context deadline exceeded")}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, MaxAttempts: 5, Logger: zap.New(core)}

	publishN(t, p, "contacts.person.updated", "p1", 1)
	if round, err := r.DispatchOnce(ctx); err != nil || round.Failed != 2 || len(tmp.opts) != 2 {
		t.Fatalf("round %+v (%v) after %d starts: want both p1 keys' starts tried and failed", round, err, len(tmp.opts))
	}

	// Temporal answers again; a new key comes.
	tmp.smu.Lock()
	tmp.startErr = nil
	tmp.smu.Unlock()
	publishN(t, p, "contacts.person.updated", "p2", 1)
	round, err := r.DispatchOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	billing := workflows.DeliveryID("billing:contacts.person.updated@1", "p2")
	crm := workflows.DeliveryID("crm:contacts.person.updated@1", "p2")
	if len(tmp.started) != 0 || len(tmp.opts) != 2 {
		t.Fatalf("%d started (%d tries) after an unanswered start: want the new key signalled, not started", len(tmp.started), len(tmp.opts))
	}
	if got := tmp.bySeq(); len(got[billing]) != 1 || len(got[crm]) != 1 || round.Signals != 2 {
		t.Fatalf("round %+v, signals %v: want p2 signalled to billing and crm", round, got)
	}
	if n := logs.FilterMessageSnippet("new keys are signalled").Len(); n != 1 {
		t.Fatalf("%d pause warnings, want 1 (logs %v)", n, logs.All())
	}
}

// TestRefusedStartKeepsEagerStarts: a start Temporal answers with a refusal
// of its own created no run, so nothing was lost and eager starts go on.
func TestRefusedStartKeepsEagerStarts(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	tmp := &startingTemporal{startErr: serviceerror.NewInvalidArgument("eager start refused")}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true}
	publishN(t, p, "contacts.person.deleted", "p1", 1) // crm's only
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	tmp.smu.Lock()
	tmp.startErr = nil
	tmp.smu.Unlock()
	publishN(t, p, "contacts.person.deleted", "p2", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if want := workflows.DeliveryID("crm:contacts.person.deleted@1", "p2"); fmt.Sprint(tmp.started) != fmt.Sprint([]string{want}) {
		t.Fatalf("started %v, want %s started eagerly", tmp.started, want)
	}
}

// slowStarter starts workflows slowly and counts how many starts overlap,
// and how many had ended when each signal went.
type slowStarter struct {
	startingTemporal
	inFlight, most, done atomic.Int64
	smu2                 sync.Mutex
	doneAtSignal         []int64
}

func (f *slowStarter) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	defer f.done.Add(1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	return f.startingTemporal.ExecuteWorkflow(ctx, opts, wf, args...)
}

func (f *slowStarter) SignalWithStartWorkflow(ctx context.Context, id, name string, arg any,
	opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.smu2.Lock()
	f.doneAtSignal = append(f.doneAtSignal, f.done.Load())
	f.smu2.Unlock()
	return f.startingTemporal.SignalWithStartWorkflow(ctx, id, name, arg, opts, wf, args...)
}

// TestEagerStartsInFlightAreCapped: at most ParallelStarts eager starts run
// at once, fewer than Parallel (start.go says why), and every new key is
// still started.
func TestEagerStartsInFlightAreCapped(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	tmp := &slowStarter{}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, Parallel: 16, ParallelStarts: 3}
	for i := range 12 {
		publishN(t, p, "contacts.person.updated", fmt.Sprintf("capped-%d", i), 1)
	}
	round, err := r.DispatchOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// billing and crm subscribe: 24 keys, each started.
	if round.Signals != 24 || round.Failed != 0 || len(tmp.started) != 24 {
		t.Fatalf("round %+v, %d started: want 24 keys started", round, len(tmp.started))
	}
	if most := tmp.most.Load(); most != 3 {
		t.Fatalf("%d eager starts in flight at once, want ParallelStarts (3)", most)
	}
}

// TestStartsWaitingHoldNoSignalSlot: keys waiting for a start slot hold no
// signal slot, so the signals of running keys go at once, not after the
// starts queued before them.
func TestStartsWaitingHoldNoSignalSlot(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	tmp := &slowStarter{}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, Parallel: 8, ParallelStarts: 1}
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "running", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// 12 new keys (24 starts of 50 ms, one at a time) before an event of
	// the running keys, which the relay signals.
	for i := range 12 {
		publishN(t, p, "contacts.person.updated", fmt.Sprintf("queued-start-%d", i), 1)
	}
	publishN(t, p, "contacts.person.updated", "running", 1)
	round, err := r.DispatchOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if round.Signals != 26 || round.Failed != 0 {
		t.Fatalf("round %+v, want 24 starts and 2 signals", round)
	}
	tmp.smu2.Lock()
	defer tmp.smu2.Unlock()
	if len(tmp.doneAtSignal) != 2 {
		t.Fatalf("%d signals, want the 2 running keys'", len(tmp.doneAtSignal))
	}
	for _, done := range tmp.doneAtSignal {
		// 2 starts ended before the round (the running keys'); holding a
		// signal slot each, the waiting starts would let a signal go only
		// once 8 of them had taken their turn.
		if done-2 >= 8 {
			t.Fatalf("a running key's signal went after %d of the round's starts had ended, want it at once", done-2)
		}
	}
}

// TestIdleRunsCap: once the runs that wait idle the relay started within
// the idle timeout reach IdleRuns, a key it starts gets a quiet run
// (Params.Quiet), which ends once it owes nothing: its key is not taken to
// be running, and when it comes back within HotWindow it is started again
// as busy, for a run that waits idle. Each start takes its place under
// the cap as it goes out, so a round's own starts do not pass it.
func TestIdleRunsCap(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	tmp := &startingTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, IdleRuns: 3}
	hints := func(from int) string {
		tmp.smu.Lock()
		defer tmp.smu.Unlock()
		var out []string
		for _, prm := range tmp.params[from:] {
			out = append(out, fmt.Sprintf("%s quiet=%v busy=%v", prm.SubjectKey, prm.Quiet, prm.Busy))
		}
		return fmt.Sprint(sorted(out))
	}
	// Two keys to each of two subscriptions in one round: three runs that
	// wait idle, the cap, and one quiet run (which, the starts running at
	// once, is any of them).
	publishN(t, p, "contacts.person.updated", "c1", 1)
	publishN(t, p, "contacts.person.updated", "c2", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hints(0); strings.Count(got, "quiet=false busy=false") != 3 || strings.Count(got, "quiet=true busy=false") != 1 {
		t.Fatalf("first round's starts %s, want 3 idle, 1 quiet", got)
	}
	publishN(t, p, "contacts.person.updated", "c3", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := hints(4), fmt.Sprint([]string{"c3 quiet=true busy=false", "c3 quiet=true busy=false"}); got != want {
		t.Fatalf("starts past the cap %s, want %s", got, want)
	}
	// c3's quiet runs ended; c3 comes back within the window: started as
	// busy. c1's and c2's keys come back too: the three whose runs wait idle
	// are signalled; the quiet one's run still runs here, so its busy start
	// answers "already started" and it is signalled too.
	tmp.smu.Lock()
	for id := range tmp.running {
		if strings.HasSuffix(id, ":c3") {
			delete(tmp.running, id)
		}
	}
	tmp.smu.Unlock()
	publishN(t, p, "contacts.person.updated", "c3", 1)
	publishN(t, p, "contacts.person.updated", "c1", 1)
	publishN(t, p, "contacts.person.updated", "c2", 1)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hints(6); strings.Count(got, "c3 quiet=false busy=true") != 2 || strings.Count(got, "quiet=false busy=true") != 3 || len(tmp.started) != 8 {
		t.Fatalf("starts of keys back %s (%d started), want c3's two and the quiet key's tried as busy, c3's started", got, len(tmp.started))
	}
	if got := tmp.bySeq(); len(got) != 4 {
		t.Fatalf("signals %v: want c1's and c2's four keys signalled", got)
	}
}

// quietKeysStarted makes a relay with quiet runs (Params.EndQuietKeys) and
// HotWindow window, and dispatches one event of subject: both
// subscriptions' keys are started, with no hint, and none is signalled. It
// returns the relay, its Temporal, the publisher and billing's and crm's
// workflow ids of the key.
func quietKeysStarted(t *testing.T, subject string, window time.Duration) (*relay.Relay, *startingTemporal, *publish.Publisher, string, string) {
	t.Helper()
	st, p := setup(t)
	tmp := &startingTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, HotWindow: window,
		Params: workflows.Params{EndQuietKeys: true}}
	publishN(t, p, "contacts.person.updated", subject, 1)
	if _, err := r.DispatchOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(tmp.started) != 2 || len(tmp.bySeq()) != 0 || tmp.params[0].Busy || tmp.params[1].Busy {
		t.Fatalf("started %v with %+v, signals %v: want both keys started, not as busy, none signalled", tmp.started, tmp.params, tmp.bySeq())
	}
	return r, tmp, p, workflows.DeliveryID("billing:contacts.person.updated@1", subject),
		workflows.DeliveryID("crm:contacts.person.updated@1", subject)
}

// TestStartsCarryTheWorkersBuildID: the runs the relay starts, eagerly or
// by signal-with-start, carry BuildIds as the server writes them when the
// relay's own worker completes their first task, so that first task
// changes nothing in Temporal's visibility store. A server that refuses
// the attribute gets each start again without it, and no later start
// carries it; every key is started or signalled all the same.
func TestStartsCarryTheWorkersBuildID(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	want := []string{"unversioned", "unversioned:b1d"}
	buildIDs := func(o client.StartWorkflowOptions) []string {
		v, _ := o.TypedSearchAttributes.GetKeywordList(workflows.SABuildIDs)
		return v
	}

	eager := &startingTemporal{}
	r := &relay.Relay{Store: st, Temporal: eager, StartNewKeys: true, BuildID: "b1d"}
	publishN(t, p, "contacts.person.updated", "b1", 1)
	publishN(t, p, "contacts.person.updated", "b2", 2)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(eager.started) != 4 {
		t.Fatalf("started %v, want both keys of both subscriptions", eager.started)
	}
	for _, o := range eager.opts {
		if got := buildIDs(o); !slices.Equal(got, want) {
			t.Fatalf("%s started with BuildIds %v, want %v", o.ID, got, want)
		}
		if app, _ := o.TypedSearchAttributes.GetKeyword(workflows.SAApp); app == "" {
			t.Fatalf("%s started without HeraldApp beside BuildIds", o.ID)
		}
	}

	signalled := &fakeTemporal{}
	r2 := &relay.Relay{Store: st, Temporal: signalled, BuildID: "b1d"}
	publishN(t, p, "contacts.person.updated", "b3", 1)
	if _, err := r2.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(signalled.signals) != 2 {
		t.Fatalf("signals %+v, want b3 to both subscriptions", signalled.signals)
	}
	for _, s := range signalled.signals {
		if !slices.Equal(s.BuildIDs, want) {
			t.Fatalf("%s signalled with start and BuildIds %v, want %v", s.WorkflowID, s.BuildIDs, want)
		}
	}

	// A server that refuses them: each start is sent again without.
	refusing := &startingTemporal{}
	refusing.refuseBuildIDs = true
	core, logs := observer.New(zap.WarnLevel)
	r3 := &relay.Relay{Store: st, Temporal: refusing, StartNewKeys: true, BuildID: "b1d", Logger: zap.New(core)}
	publishN(t, p, "contacts.person.updated", "b4", 1)
	if round, err := r3.DispatchOnce(ctx); err != nil || round.Failed != 0 || len(refusing.started) != 2 {
		t.Fatalf("round %+v (%v), started %v: want both keys started without BuildIds", round, err, refusing.started)
	}
	tried := len(refusing.opts)
	if tried < 3 || buildIDs(refusing.opts[0]) == nil {
		t.Fatalf("%d starts tried, the first with BuildIds %v: want a refused start before each accepted one",
			tried, buildIDs(refusing.opts[0]))
	}
	publishN(t, p, "contacts.person.updated", "b5", 1)
	if round, err := r3.DispatchOnce(ctx); err != nil || round.Failed != 0 || len(refusing.started) != 4 {
		t.Fatalf("round %+v (%v), started %v", round, err, refusing.started)
	}
	for _, o := range refusing.opts[tried:] {
		if got := buildIDs(o); got != nil {
			t.Fatalf("%s started with BuildIds %v after the server refused them", o.ID, got)
		}
	}
	if len(refusing.opts) != tried+2 {
		t.Fatalf("%d starts tried for b5's two keys, want 2", len(refusing.opts)-tried)
	}
	if n := logs.FilterMessageSnippet("refused the BuildIds").Len(); n != 1 {
		t.Fatalf("%d warnings of the refusal, want one", n)
	}
	r4 := &relay.Relay{Store: st, Temporal: &fakeTemporal{refuseBuildIDs: true}, BuildID: "b1d", Logger: zap.NewNop()}
	publishN(t, p, "contacts.person.updated", "b6", 1)
	if round, err := r4.DispatchOnce(ctx); err != nil || round.Failed != 0 || round.Signals != 2 {
		t.Fatalf("signal-with-start refused for BuildIds: round %+v (%v), want both signals sent again without", round, err)
	}
}

// cuttableStarter starts workflows after delay, unless the call's context
// ends first: then it counts the call as cut short and answers its error.
type cuttableStarter struct {
	startingTemporal
	delay          time.Duration
	inFlight, cut  atomic.Int64
	startedEagerly atomic.Int64
}

func (f *cuttableStarter) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	t := time.NewTimer(f.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		f.cut.Add(1)
		return nil, ctx.Err()
	case <-t.C:
	}
	run, err := f.startingTemporal.ExecuteWorkflow(ctx, opts, wf, args...)
	if err == nil {
		f.startedEagerly.Add(1)
	}
	return run, err
}

// TestCancelledStartKeepsEagerStarts: a start cut short because the relay
// stopped its round (shutdown, a partition lost) says nothing about
// Temporal: no warning, eager starts go on (TestUnansweredStartPausesEagerStarts
// is the start Temporal did not answer).
func TestCancelledStartKeepsEagerStarts(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	core, logs := observer.New(zap.WarnLevel)
	tmp := &cuttableStarter{delay: time.Minute}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, MaxAttempts: 5, Logger: zap.New(core)}
	publishN(t, p, "contacts.person.deleted", "p1", 1) // crm's only
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for tmp.inFlight.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	round, _ := r.DispatchOnce(ctx) // its error, if any, is the cancellation's
	if tmp.cut.Load() != 1 || round.Dispatched != 0 {
		t.Fatalf("round %+v, %d starts cut short: want p1's start cut short", round, tmp.cut.Load())
	}

	tmp.delay = 0
	publishN(t, p, "contacts.person.deleted", "p2", 1)
	if _, err := r.DispatchOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := tmp.startedEagerly.Load(); got != 2 {
		t.Fatalf("%d keys started eagerly after a round cut short, want p1 and p2: eager starts were paused", got)
	}
	if logs.Len() != 0 {
		t.Fatalf("warnings after a round the relay cut short: %v", logs.All())
	}
}

// TestQuietKeysStartBare: a quiet run for one event (Params.EndQuietKeys,
// or the hint Params.Quiet past IdleRuns) is started bare: no search
// attributes, workflows.DeliverInStartVersion in its input (the run writes them
// if it comes to wait). A start of more events, a busy start, or one of a
// run that waits idle carries them at workflows.NoMarkerVersion; so does
// the signal-with-start that follows a bare start answered "already
// started", which may start the key's next run.
func TestQuietKeysStartBare(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	tmp := &startingTemporal{running: map[string]bool{crmID("s1"): true}}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, BuildID: "b1d",
		Params: workflows.Params{EndQuietKeys: true}}
	publishN(t, p, "contacts.person.updated", "s1", 1)
	publishN(t, p, "contacts.person.updated", "s2", 2)
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	versions := map[string]int{}
	for i, o := range tmp.opts {
		versions[o.ID] = tmp.params[i].Version
	}
	want := map[string]int{
		billingID("s1"): workflows.DeliverInStartVersion, crmID("s1"): workflows.DeliverInStartVersion,
		billingID("s2"): workflows.NoMarkerVersion, crmID("s2"): workflows.NoMarkerVersion,
	}
	if !reflect.DeepEqual(versions, want) {
		t.Fatalf("start versions %v, want %v", versions, want)
	}
	for i, o := range tmp.opts {
		if n := o.TypedSearchAttributes.Size(); (tmp.params[i].Version == workflows.DeliverInStartVersion) != (n == 0) {
			t.Fatalf("%s started at version %d with %d search attributes", o.ID, tmp.params[i].Version, n)
		}
	}
	// crm's s1 runs: its bare start was refused, and its signal-with-start
	// carries the attributes and NoMarkerVersion.
	if len(tmp.signals) != 1 || tmp.signals[0].WorkflowID != crmID("s1") ||
		tmp.signals[0].Params.Version != workflows.NoMarkerVersion || tmp.signals[0].BuildIDs == nil {
		t.Fatalf("signals %+v, want crm's s1 signalled with its attributes at NoMarkerVersion", tmp.signals)
	}

	// The hint: past IdleRuns (here 1) one-event keys start bare; the run
	// that takes the cap's place waits idle and carries its attributes.
	capped := &startingTemporal{}
	r2 := &relay.Relay{Store: st, Temporal: capped, StartNewKeys: true, IdleRuns: 1}
	publishN(t, p, "contacts.person.updated", "s3", 1)
	if _, err := r2.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(capped.params) != 2 {
		t.Fatalf("%d starts, want s3's two keys", len(capped.params))
	}
	bare := 0
	for i, prm := range capped.params {
		if (prm.Version == workflows.DeliverInStartVersion) != prm.Quiet {
			t.Fatalf("%s started quiet=%v at version %d", capped.opts[i].ID, prm.Quiet, prm.Version)
		}
		if prm.Quiet {
			bare++
		}
	}
	if bare != 1 {
		t.Fatalf("%d bare starts past the cap of 1, want 1", bare)
	}
}

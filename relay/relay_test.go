package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/manifest"
	"herald/publish"
	"herald/relay"
	"herald/store"
	"herald/workflows"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fakeTemporal records SignalWithStart calls in the order Temporal accepted
// them, and can refuse some.
type fakeTemporal struct {
	mu      sync.Mutex
	signals []sent
	refuse  func(workflowID string) bool
	// refuseWith is the error of a refused call (default "refused").
	refuseWith error
	// args are the signal payloads as Temporal would store them (JSON).
	args [][]byte
	// told are the SignalWorkflow calls; notRunning workflows answer NotFound.
	told       []string
	notRunning func(workflowID string) bool
	// delay is how long each SignalWithStart takes, outside the lock.
	delay time.Duration
	// refuseBuildIDs refuses, as an invalid request, a call whose search
	// attributes hold BuildIds.
	refuseBuildIDs bool
}

// buildIDsRefusal is what a server that does not let clients set BuildIds
// would answer.
var buildIDsRefusal = serviceerror.NewInvalidArgument("search attribute BuildIds is reserved by system")

func (f *fakeTemporal) SignalWorkflow(_ context.Context, id, _, name string, arg any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notRunning != nil && f.notRunning(id) {
		return serviceerror.NewNotFound("workflow not found")
	}
	f.told = append(f.told, id+" "+name+" "+fmt.Sprint(arg))
	return nil
}

type sent struct {
	WorkflowID string
	Seqs       []int64
	Params     workflows.Params
	// Span is the span context the call's context carried.
	Span trace.SpanContext
	// BuildIDs are the BuildIds search attribute the call started with.
	BuildIDs []string
}

func (f *fakeTemporal) SignalWithStartWorkflow(ctx context.Context, id, name string, arg any,
	opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	time.Sleep(f.delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	if name != workflows.SignalEvent || wf != workflows.DeliveryWorkflowType || opts.TaskQueue != workflows.TaskQueue || opts.ID != id {
		return nil, fmt.Errorf("unexpected call %s %s %v %+v", id, name, wf, opts)
	}
	buildIDs, withBuildIDs := opts.TypedSearchAttributes.GetKeywordList(workflows.SABuildIDs)
	if f.refuseBuildIDs && withBuildIDs {
		return nil, buildIDsRefusal
	}
	if f.refuse != nil && f.refuse(id) {
		if f.refuseWith != nil {
			return nil, f.refuseWith
		}
		return nil, errors.New("refused")
	}
	raw, err := json.Marshal(arg)
	if err != nil {
		return nil, err
	}
	f.args = append(f.args, raw)
	s := sent{WorkflowID: id, Params: args[0].(workflows.Params), Span: trace.SpanContextFromContext(ctx), BuildIDs: buildIDs}
	for _, ev := range arg.(workflows.EventSignal).Events {
		s.Seqs = append(s.Seqs, ev.Seq)
	}
	f.signals = append(f.signals, s)
	return nil, nil
}

// bySeq returns, per workflow id, the sequence numbers in signal order.
func (f *fakeTemporal) bySeq() map[string][]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]int64{}
	for _, s := range f.signals {
		out[s.WorkflowID] = append(out[s.WorkflowID], s.Seqs...)
	}
	return out
}

func setup(t testing.TB) (*store.Store, *publish.Publisher) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	schema := json.RawMessage(`{"type":"object"}`)
	for _, m := range []*manifest.Manifest{
		{App: "contacts", Endpoint: "http://contacts.test", Events: []manifest.Event{
			{Name: "person.updated", Version: 1, Subject: "person", DataSchema: schema},
			{Name: "person.deleted", Version: 1, Subject: "person", DataSchema: schema},
		}},
		{App: "billing", Endpoint: "http://billing.test", Subscribes: []manifest.Subscription{
			{Type: "contacts.person.updated", Version: 1}}},
		{App: "crm", Endpoint: "http://crm.test", Subscribes: []manifest.Subscription{
			{Type: "contacts.person.updated", Version: 1}, {Type: "contacts.person.deleted", Version: 1}}},
	} {
		if _, err := st.ApplyManifest(ctx, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return st, publish.New(st, publish.Options{})
}

func publishN(t *testing.T, p *publish.Publisher, typ, subject string, n int) {
	t.Helper()
	if err := tryPublishN(p, typ, subject, n); err != nil {
		t.Fatal(err)
	}
}

// tryPublishN publishes n events and returns the first error: for
// goroutines, which must not call t.Fatal.
func tryPublishN(p *publish.Publisher, typ, subject string, n int) error {
	for i := 0; i < n; i++ {
		if _, err := p.Publish(context.Background(), publish.Request{
			App: "contacts", Type: typ, Version: 1, Subject: subject, Data: json.RawMessage(`{}`),
		}); err != nil {
			return fmt.Errorf("publish %s #%d: %w", subject, i+1, err)
		}
	}
	return nil
}

func TestDispatchFansOutInOrderAndMarksDispatched(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	publishN(t, p, "contacts.person.updated", "p1", 5)
	publishN(t, p, "contacts.person.deleted", "p1", 2)
	publishN(t, p, "contacts.person.updated", "p2", 3)
	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp, Params: workflows.Params{MaxRearms: 7}, MaxEventsPerSignal: 2}
	round, err := r.DispatchOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if round.Events != 10 || round.Dispatched != 10 || round.Failed != 0 {
		t.Fatalf("round %+v", round)
	}
	got := tmp.bySeq()
	want := map[string][]int64{
		workflows.DeliveryID("billing:contacts.person.updated@1", "p1"): {1, 2, 3, 4, 5},
		workflows.DeliveryID("crm:contacts.person.updated@1", "p1"):     {1, 2, 3, 4, 5},
		workflows.DeliveryID("crm:contacts.person.deleted@1", "p1"):     {6, 7},
		workflows.DeliveryID("billing:contacts.person.updated@1", "p2"): {8, 9, 10},
		workflows.DeliveryID("crm:contacts.person.updated@1", "p2"):     {8, 9, 10},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("signals per key:\n got %v\nwant %v", got, want)
	}
	for _, s := range tmp.signals {
		if len(s.Seqs) > 2 {
			t.Fatalf("signal with %d events, cap is 2", len(s.Seqs))
		}
		// The run says its version in its input: it records no marker.
		if s.Params.MaxRearms != 7 || s.Params.SubjectKey == "" || s.Params.SubscriberApp == "" ||
			s.Params.Version != workflows.NoMarkerVersion {
			t.Fatalf("start params %+v", s.Params)
		}
	}
	lag, err := st.RelayLag(context.Background())
	if err != nil || lag.Undispatched != 0 {
		t.Fatalf("lag %+v %v", lag, err)
	}
}

// TestFailedSignalHoldsOnlyThatKey: a key whose signal fails keeps its
// events undispatched; the next round re-sends them, in order, before later
// ones; other keys are not held.
func TestFailedSignalHoldsOnlyThatKey(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	publishN(t, p, "contacts.person.updated", "p1", 3) // seq 1-3
	publishN(t, p, "contacts.person.updated", "p2", 3) // seq 4-6
	bad := workflows.DeliveryID("crm:contacts.person.updated@1", "p1")
	down := true
	tmp := &fakeTemporal{refuse: func(id string) bool { return down && id == bad }}
	r := &relay.Relay{Store: st, Temporal: tmp}
	round, err := r.DispatchOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if round.Failed != 1 || round.Dispatched != 3 || round.BackingOff != 3 {
		t.Fatalf("round %+v: p1's events must wait, p2's go", round)
	}
	publishN(t, p, "contacts.person.updated", "p1", 2) // seq 7-8
	down = false
	// p1 backs off, and its new events wait behind it.
	round, err = r.DispatchOnce(context.Background())
	if err != nil || round.Events != 0 {
		t.Fatalf("round during p1's back-off %+v %v", round, err)
	}
	dueNow(t, st)
	round, err = r.DispatchOnce(context.Background())
	if err != nil || round.Failed != 0 || round.Dispatched != 5 {
		t.Fatalf("second round %+v %v", round, err)
	}
	got := tmp.bySeq()
	if fmt.Sprint(got[bad]) != "[1 2 3 7 8]" {
		t.Fatalf("held key got %v", got[bad])
	}
	// billing's p1 key was accepted the first time and gets seq 1-3 again:
	// the workflow drops them by sequence number.
	if g := got[workflows.DeliveryID("billing:contacts.person.updated@1", "p1")]; fmt.Sprint(g) != "[1 2 3 1 2 3 7 8]" {
		t.Fatalf("re-sent key got %v", g)
	}
}

// TestLeaderStepsDownWhenItsLockIsLost: a standby may take the relay's
// partitions the moment its lease connection ends. The old leader must
// stop within a round, not when its backlog runs out.
func TestLeaderStepsDownWhenItsLockIsLost(t *testing.T) {
	// Serial: a bound on how soon the leader notices.
	st, p := setup(t)
	ctx := context.Background()
	// 400 rounds of one event, each signal taking 10 ms: a backlog of
	// several seconds that keeps the leader dispatching without a pause.
	publishN(t, p, "contacts.person.updated", "k", 400)
	tmp := &fakeTemporal{delay: 10 * time.Millisecond}
	core, logs := observer.New(zap.WarnLevel)
	r1 := &relay.Relay{Store: st, Temporal: tmp, PollInterval: 50 * time.Millisecond, BatchSize: 1,
		Logger: zap.New(core)}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r1.Run(rctx) }()
	defer func() { stop(); <-done }()
	testkit.Eventually(t, 20*time.Second, "r1 to lead and dispatch", func() bool {
		return r1.IsLeader() && len(tmp.bySeq()) > 0
	})

	// End the lease connection's backend from outside, as an operator's
	// pg_terminate_backend or a dropped connection would.
	var pid int32
	if err := st.Pool.QueryRow(ctx, `SELECT holder_pid FROM relay_workers`).Scan(&pid); err != nil {
		t.Fatalf("find the relay's lease backend: %v", err)
	}
	killed := time.Now()
	var ok bool
	if err := st.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
	}
	testkit.Eventually(t, 20*time.Second, "r1 to step down", func() bool {
		return logs.FilterMessage("relay interrupted").Len() > 0
	})
	noticed := time.Since(killed)
	lag, err := st.RelayLag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if noticed > 3*time.Second || lag.Undispatched == 0 {
		t.Fatalf("r1 stepped down %v after losing its lock, with %d events undispatched; want within 3 s, backlog left",
			noticed, lag.Undispatched)
	}
	msg := fmt.Sprint(logs.FilterMessage("relay interrupted").All()[0].ContextMap()["error"])
	if !strings.Contains(msg, "relay partitions") {
		t.Fatalf("step-down reason %q does not name the relay partitions", msg)
	}
	// It takes the lock again on a fresh connection and finishes the backlog
	// in order.
	testkit.Eventually(t, 60*time.Second, "everything dispatched", func() bool {
		lag, err := st.RelayLag(ctx)
		return err == nil && lag.Undispatched == 0 && r1.IsLeader()
	})
	for id, seqs := range tmp.bySeq() {
		var last int64
		for _, s := range seqs {
			if s < last {
				t.Fatalf("%s: seq %d signalled after %d", id, s, last)
			}
			last = s
		}
	}
}

// TestSignalsCarryNoEventData: signals carry ids and sequence numbers only,
// however large the events; a key's events still go in order.
func TestSignalsCarryNoEventData(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	big := json.RawMessage(`{"blob":"MARKER-` + strings.Repeat("x", 200<<10) + `"}`)
	for i := 0; i < 12; i++ {
		if _, err := p.Publish(context.Background(), publish.Request{
			App: "contacts", Type: "contacts.person.deleted", Version: 1, Subject: "big", Data: big,
		}); err != nil {
			t.Fatal(err)
		}
	}
	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp}
	if _, err := r.DispatchOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, raw := range tmp.args {
		if strings.Contains(string(raw), "MARKER") || len(raw) > 2000 {
			t.Fatalf("a signal of %d bytes carries event data: %.200s", len(raw), raw)
		}
	}
	if got := fmt.Sprint(tmp.bySeq()[workflows.DeliveryID("crm:contacts.person.deleted@1", "big")]); got != "[1 2 3 4 5 6 7 8 9 10 11 12]" {
		t.Fatalf("order %s", got)
	}
}

// TestSettledEventsAreNotSentAgain: after a crash between signalling and
// marking dispatched, the relay sends the events again, but not to a key
// that has already settled them (the key's workflow may have completed, so
// it could not tell).
func TestSettledEventsAreNotSentAgain(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "p1", 2)
	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp}
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	billing := "billing:contacts.person.updated@1"
	ev, err := st.GetEvent(ctx, eventIDOfSeq(t, st, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RecordOutcomes(ctx, billing, "p1", []store.OutcomeUpdate{
		{EventID: ev.ID, Seq: ev.Seq, Status: store.EventDelivered, Attempts: 1}}); err != nil {
		t.Fatal(err)
	}
	// The crash: both events look undispatched again.
	if _, err := st.Pool.Exec(ctx, `UPDATE events SET state = 'accepted', dispatched_at = NULL`); err != nil {
		t.Fatal(err)
	}
	tmp2 := &fakeTemporal{}
	r.Temporal = tmp2
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got := tmp2.bySeq()
	if fmt.Sprint(got[workflows.DeliveryID(billing, "p1")]) != "[2]" ||
		fmt.Sprint(got[workflows.DeliveryID("crm:contacts.person.updated@1", "p1")]) != "[1 2]" {
		t.Fatalf("re-sent %v: billing must not get event 1 again, crm (not settled) must", got)
	}
}

// TestSweepCancelsKeysOfRemovedSubscriptions: once a subscription is
// removed, a running key is told, and a key whose workflow no longer runs
// has its held events cancelled and audited by the sweep itself.
func TestSweepCancelsKeysOfRemovedSubscriptions(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	publishN(t, p, "contacts.person.updated", "p1", 2)
	publishN(t, p, "contacts.person.updated", "p2", 1)
	tmp := &fakeTemporal{notRunning: func(id string) bool { return strings.HasSuffix(id, ":p2") }}
	r := &relay.Relay{Store: st, Temporal: tmp}
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.SweepRemoved(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before removal: %d %v", n, err)
	}
	// billing stops subscribing.
	if _, err := st.ApplyManifest(ctx, &manifest.Manifest{App: "billing", Endpoint: "http://billing.test"}, "test"); err != nil {
		t.Fatal(err)
	}
	n, err := r.SweepRemoved(ctx)
	if err != nil || n != 2 {
		t.Fatalf("sweep handled %d keys, %v; want 2", n, err)
	}
	billing := "billing:contacts.person.updated@1"
	if len(tmp.told) != 1 || !strings.HasPrefix(tmp.told[0], workflows.DeliveryID(billing, "p1")+" "+workflows.SignalSubscription) {
		t.Fatalf("told %v", tmp.told)
	}
	rows, err := st.ListAudit(ctx, store.AuditFilter{TargetID: workflows.DeliveryID(billing, "p2")})
	if err != nil || len(rows) != 1 || rows[0].Action != workflows.AuditDeliveryCancelled ||
		rows[0].ErrorCode != "subscription_removed" || !strings.Contains(string(rows[0].Metadata), `"count": 1`) {
		t.Fatalf("audit of the stopped key: %+v %v", rows, err)
	}
	// p2 is settled; p1 waits for its workflow, which the sweep tells again.
	keys, err := st.RemovedKeys(ctx, 10)
	if err != nil || len(keys) != 1 || keys[0].Subject != "p1" || keys[0].Held != 2 {
		t.Fatalf("keys still holding %+v %v", keys, err)
	}
}

// eventIDOfSeq reads the id of the event with sequence number seq.
func eventIDOfSeq(t *testing.T, st *store.Store, seq int64) string {
	t.Helper()
	var id string
	if err := st.Pool.QueryRow(context.Background(), `SELECT id::text FROM events WHERE seq = $1`, seq).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestContentFilters: an event a subscription's filter does not match is
// not handed to its key and is settled as filtered; the filter in force when
// the event was published decides, even if it changed before dispatch. An
// event on which the filter fails (a missing field) is delivered.
func TestContentFilters(t *testing.T) {
	t.Parallel()
	st, p := setup(t)
	ctx := context.Background()
	billing := func(filter string) {
		t.Helper()
		m := &manifest.Manifest{App: "billing", Endpoint: "http://billing.test", Subscribes: []manifest.Subscription{
			{Type: "contacts.person.updated", Version: 1, Filter: filter}}}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ApplyManifest(ctx, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	pub := func(n int) string {
		t.Helper()
		res, err := p.Publish(ctx, publish.Request{App: "contacts", Type: "contacts.person.updated", Version: 1,
			Subject: "p1", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	billing(`data.n > 1`)
	e1, e2 := pub(1), pub(2)
	billing(`data.n < 2 || data.missing == 1`) // changed before the relay ran: e1, e2 keep the old one
	e3, e4 := pub(1), pub(5)
	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp}
	round, err := r.DispatchOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := tmp.bySeq()
	if fmt.Sprint(got[workflows.DeliveryID("billing:contacts.person.updated@1", "p1")]) != "[2 3 4]" ||
		fmt.Sprint(got[workflows.DeliveryID("crm:contacts.person.updated@1", "p1")]) != "[1 2 3 4]" {
		t.Fatalf("signals %v: billing wants e2 (old filter), e3 (new filter) and e4 (filter error); crm has no filter", got)
	}
	if round.Filtered != 1 || round.FilterErrors != 1 {
		t.Fatalf("round %+v, want 1 filtered and 1 filter error", round)
	}
	out, err := st.EventOutcomes(ctx, e1)
	if err != nil || len(out) != 2 || out[0].SubscriptionID != "billing:contacts.person.updated@1" ||
		out[0].Status != store.EventFiltered || out[0].Code != relay.CodeFilterNoMatch {
		t.Fatalf("outcomes of e1: %+v %v; want billing filtered with filter_no_match", out, err)
	}
	for _, id := range []string{e2, e3, e4} {
		if out, _ := st.EventOutcomes(ctx, id); len(out) != 2 || out[0].Status != store.EventQueued {
			t.Fatalf("outcomes of %s: %+v", id, out)
		}
	}
	rows, err := st.ListAudit(ctx, store.AuditFilter{Action: store.ActionSubscriptionFilterChanged})
	if err != nil || len(rows) != 2 {
		t.Fatalf("filter_changed audit rows %+v %v", rows, err)
	}
}

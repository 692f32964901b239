package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/store"
	"herald/workflows"
)

// regularFirstAttempt runs every test as a run recorded before
// workflows.FirstAttemptChange: first attempts as regular activities.
// scripts/test.sh runs the package both ways.
var regularFirstAttempt = flag.Bool("regular-first-attempt", false,
	"run as before FirstAttemptChange (workflow.DefaultVersion)")

// harness runs the Delivery workflow in Temporal's test environment (time
// skipping) with the real activities, an in-memory subscriber and store.
type harness struct {
	t      *testing.T
	suite  testsuite.WorkflowTestSuite
	env    *testsuite.TestWorkflowEnvironment
	sub    *fakeSubscriber
	store  *fakeStore
	params workflows.Params
	start  time.Time
	// settings are what the worker's settings activity answers.
	settings      workflows.Params
	settingsAsked int
	// workflowID is the id the workflow runs under (the key's own by default).
	workflowID string
	// versionSet: the test chose the FirstAttemptChange version.
	versionSet bool
	// settled counts the outcomes the activities report to their Observer.
	settled *settledCounter
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t}
	h.suite.SetLogger(quietLogger{t})
	h.env = h.suite.NewTestWorkflowEnvironment()
	h.env.SetTestTimeout(30 * time.Second)
	// The SDK fails a workflow task whose code runs 1 s without yielding,
	// which a starved test process under -race does now and then (2026-12-06:
	// TestForgedRemovalIsChecked, three copies of the package at once beside
	// two make test runs); no test here is of that detector. Workflow code
	// that kept a task busy for seconds would pass here: the end-to-end
	// tests run it in Herald's worker, with the SDK's 1 s as in production.
	h.env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: 20 * time.Second})
	h.start = h.env.Now()
	h.sub = &fakeSubscriber{env: h.env}
	h.store = newFakeStore()
	// A head refused by the app's limits waits 200 ms of real time, not
	// 10 s: the wait is real even in the test environment.
	h.settled = &settledCounter{n: map[string]int{}}
	acts := &activities.Activities{Poster: h.sub, Store: h.store, Signaler: envSignaler{h.env},
		HeadWait: 200 * time.Millisecond, Observer: h.settled, Clock: h.env.Now}
	// The worker's settings, for a workflow started without them.
	workflows.Register(h.env, acts, func() (workflows.Params, error) {
		h.settingsAsked++
		if reflect.DeepEqual(h.settings, workflows.Params{}) {
			// The tests give the worker's settings in params, as the relay
			// passes them too, unless they set settings apart.
			p := h.params
			p.Carry = nil
			return p.WithDefaults(), nil
		}
		return h.settings.WithDefaults(), nil
	})
	h.params = workflows.Params{
		SubscriptionID: "billing:contacts.person.updated@1",
		SubscriberApp:  "billing",
		EventType:      "contacts.person.updated",
		SubjectKey:     "person-1",
		// As the relay starts it; a test of a start without settings clears it.
		RetrySchedule: workflows.DefaultRetrySchedule,
	}
	h.workflowID = workflows.DeliveryID(h.params.SubscriptionID, h.params.SubjectKey)
	return h
}

// firstAttemptVersion makes the run take version v of FirstAttemptChange
// (by default the current one, or DefaultVersion with -regular-first-attempt).
func (h *harness) firstAttemptVersion(v workflow.Version) {
	h.env.OnGetVersion(workflows.FirstAttemptChange, workflow.DefaultVersion, workflows.OneMarkerVersion).Return(v)
	h.versionSet = true
}

// execute starts the workflow under h.workflowID with h.params.
func (h *harness) execute() {
	if *regularFirstAttempt && !h.versionSet {
		h.firstAttemptVersion(workflow.DefaultVersion)
	}
	h.env.SetStartWorkflowOptions(h.startOptions())
	h.env.ExecuteWorkflow(workflows.DeliveryWorkflowType, h.params)
}

// startOptions are the run's start options: its id and the server's
// default workflow task timeout. The test environment's own default is
// 1 s, which gives a local attempt 600 ms (localDeadline's 60 %), 100 ms
// over what Deliver needs left to POST (minLocalPost): on a loaded machine
// the local attempt now and then handed over to a regular activity, and a
// test of the statuses a run shows failed (TestBareStart, in CI).
func (h *harness) startOptions() client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: h.workflowID, WorkflowTaskTimeout: 10 * time.Second}
}

// at runs fn at a point of workflow time after the start.
func (h *harness) at(d time.Duration, fn func()) { h.env.RegisterDelayedCallback(fn, d) }

// signalAt sends a signal at a point of workflow time.
func (h *harness) signalAt(d time.Duration, name string, payload any) {
	h.at(d, func() { h.env.SignalWorkflow(name, payload) })
}

// eventsAt sends events with the given sequence numbers in one signal.
func (h *harness) eventsAt(d time.Duration, seqs ...int64) {
	s := workflows.EventSignal{}
	for _, q := range seqs {
		s.Events = append(s.Events, event(q))
	}
	h.signalAt(d, workflows.SignalEvent, s)
}

// queryAt captures the state query's answer at a point of workflow time.
func (h *harness) queryAt(d time.Duration) *workflows.State {
	st := &workflows.State{}
	h.at(d, func() {
		v, err := h.env.QueryWorkflow(workflows.QueryState)
		if err != nil {
			h.t.Errorf("query at %v: %v", d, err)
			return
		}
		if err := v.Get(st); err != nil {
			h.t.Errorf("decode state: %v", err)
		}
	})
	return st
}

// run executes the workflow until it completes and fails the test on error.
func (h *harness) run() {
	h.t.Helper()
	h.execute()
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatalf("workflow did not complete")
	}
	if err := h.env.GetWorkflowError(); err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
}

func eventID(seq int64) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", seq) }

func event(seq int64) activities.Event { return activities.Event{ID: eventID(seq), Seq: seq} }

// seqOf is the sequence number an eventID encodes (0 when it is not one).
func seqOf(id string) int64 {
	var seq int64
	if len(id) != 36 || id[:24] != "00000000-0000-4000-8000-" {
		return 0
	}
	if _, err := fmt.Sscanf(id[24:], "%d", &seq); err != nil {
		return 0
	}
	return seq
}

func envelope(seq int64, subject string) []byte {
	env, _ := json.Marshal(map[string]any{
		"specversion": "1.0", "id": eventID(seq), "type": "contacts.person.updated",
		"source": "app:contacts", "subject": subject, "data": map[string]any{"n": seq},
	})
	return env
}

// call is one POST the fake subscriber received.
type call struct {
	EventID string
	Attempt int
	At      time.Duration // workflow time since the first POST
	OK      bool
	// Audience is the subscriber app the token was signed for; Body the bytes sent.
	Audience string
	Body     string
}

// fakeSubscriber answers POSTs with respond (nil: always 2xx) and records them.
type fakeSubscriber struct {
	mu      sync.Mutex
	env     *testsuite.TestWorkflowEnvironment
	start   time.Time
	respond func(eventID string, attempt, nth int) activities.PostResult
	// took, when set, is how long the subscriber takes to answer (not
	// slept): longer than the request's timeout, the POST times out.
	took  func(eventID string, nth int) time.Duration
	calls []call
	posts map[string]int // POSTs so far per event id
}

func (f *fakeSubscriber) Post(_ context.Context, r activities.PostRequest) activities.PostResult {
	f.mu.Lock()
	if f.posts == nil {
		f.posts = map[string]int{}
	}
	nth := f.posts[r.EventID]
	f.posts[r.EventID]++
	if f.start.IsZero() {
		f.start = f.env.Now()
	}
	respond, took := f.respond, f.took
	f.mu.Unlock()
	// respond runs unlocked: it may wait, or panic as a crashed worker would.
	res := activities.PostResult{Status: 204}
	switch {
	case took != nil && r.Timeout > 0 && took(r.EventID, nth) > r.Timeout:
		res = activities.PostResult{Code: activities.CodeHandlerTimeout, Message: "no response within " + r.Timeout.String()}
	case respond != nil:
		res = respond(r.EventID, r.Attempt, nth)
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{EventID: r.EventID, Attempt: r.Attempt, At: f.env.Now().Sub(f.start), OK: res.Code == "",
		Audience: r.SubscriberApp, Body: string(r.Body)})
	f.mu.Unlock()
	return res
}

func (f *fakeSubscriber) setRespond(fn func(eventID string, attempt, nth int) activities.PostResult) {
	f.mu.Lock()
	f.respond = fn
	f.mu.Unlock()
}

// delivered lists the ids of successful POSTs in order.
func (f *fakeSubscriber) delivered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c.OK {
			out = append(out, c.EventID)
		}
	}
	return out
}

func (f *fakeSubscriber) callsFor(id string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.EventID == id {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeSubscriber) all() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// fakeStore is the activities' database. Every eventID(seq) names an
// accepted event of the subscription, subject person-1, already handed to it
// (outcome queued), unless the maps below say otherwise.
type fakeStore struct {
	mu     sync.Mutex
	state  string
	reason string
	// subjects overrides an event's subject key.
	subjects map[string]string
	// missing events are not in the log; undispatched ones have no outcome row.
	missing, undispatched map[string]bool
	// outcomes holds each event's outcome status as last written.
	outcomes map[string]string
	updates  []store.OutcomeUpdate
	audits   []store.AuditEntry
	// limits are the app's limits the batch reports; refuse, when set,
	// refuses the nth acquire (from 1) as too late; acquires counts them.
	limits   store.Limits
	refuse   func(n int) bool
	acquires int
	// leaseRefusals: the next takes of the key's lease that find it held by
	// another run.
	leaseRefusals int
	// reads counts the batches read: one per Deliver execution;
	// queueReads the reads of a key's rows.
	reads, queueReads int
	// failQueueRead, when set, fails the nth read of a key's rows (from 1);
	// releaseErr fails every release of the key's lease.
	failQueueRead func(n int) bool
	releaseErr    error
	// dispatched are the seqs the relay handed to the key (the backlog's source).
	dispatched []int64
	// deliveredBy is the outcome rows' delivered_by.
	deliveredBy map[string]string
	// policy is the subscription's error policy; policyReads counts its reads.
	// policyGone: the subscription's row is gone (ErrNotFound).
	policy      store.Policy
	policyReads int
	policyGone  bool
	// paused is the key's row in paused_keys, kept from the pause and
	// resume audit rows as the store keeps it.
	paused bool
	// queuedAt is every row's queued_at (zero: none, as the run takes now);
	// rowAttempts a row's attempts, as an earlier run left them.
	queuedAt    time.Time
	rowAttempts map[string]int
	// onBatch, when set, runs after each read of a Deliver batch with
	// events (unlocked), with whether the key's row says paused.
	onBatch func(paused bool)
}

func (s *fakeStore) batches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func newFakeStore() *fakeStore {
	return &fakeStore{state: "active", subjects: map[string]string{}, missing: map[string]bool{},
		undispatched: map[string]bool{}, outcomes: map[string]string{}, deliveredBy: map[string]string{}}
}

func (s *fakeStore) exists(id string) bool { return seqOf(id) > 0 && !s.missing[id] }

func (s *fakeStore) subject(id string) string {
	if k, ok := s.subjects[id]; ok {
		return k
	}
	return "person-1"
}

func (s *fakeStore) DeliveryBatch(ctx context.Context, subID, key string, ids []string) (store.Batch, error) {
	b, err := s.deliveryBatch(ctx, subID, key, ids)
	s.mu.Lock()
	hook := s.onBatch
	s.mu.Unlock()
	if hook != nil && len(ids) > 0 && err == nil {
		hook(b.KeyPaused)
	}
	return b, err
}

func (s *fakeStore) deliveryBatch(_ context.Context, subID, _ string, ids []string) (store.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ids) > 0 {
		s.reads++
	}
	if s.state == activities.SubscriptionUnknown {
		return store.Batch{}, errors.New(s.reason)
	}
	b := store.Batch{
		Target: store.Target{SubscriptionID: subID, Type: "contacts.person.updated", Version: 1,
			State: s.state, Reason: s.reason, App: "billing", Endpoint: "http://subscriber.test", DeliveryPath: "/deliver"},
		Limits:    s.limits,
		KeyPaused: s.paused,
		Events:    map[string]store.BatchEvent{},
	}
	for _, id := range ids {
		if !s.exists(id) {
			continue
		}
		outcome := s.outcomes[id]
		if outcome == "" && !s.undispatched[id] {
			outcome = store.EventQueued
		}
		seq := seqOf(id)
		b.Events[id] = store.BatchEvent{ID: id, Seq: seq, Type: "contacts.person.updated", Version: 1,
			Subject: s.subject(id), Envelope: envelope(seq, s.subject(id)), Outcome: outcome, DeliveredBy: s.deliveredBy[id]}
	}
	return b, nil
}

func (s *fakeStore) AcquireDelivery(context.Context, string, time.Duration, time.Duration) (store.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires++
	if s.refuse != nil && s.refuse(s.acquires) {
		return store.Grant{Wait: time.Hour}, nil // the turn comes too late
	}
	return store.Grant{Granted: true}, nil
}

func (s *fakeStore) ReleaseDelivery(context.Context, string, string) error { return nil }

func (s *fakeStore) ReturnDelivery(context.Context, string, string) error { return nil }

// AppLimits answers no app: the limits of the harness's waits never change.
func (s *fakeStore) AppLimits(context.Context, []string) (map[string]store.Limits, error) {
	return nil, nil
}

func (s *fakeStore) RecordOutcomes(_ context.Context, _, _ string, us []store.OutcomeUpdate) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range us {
		s.outcomes[u.EventID] = u.Status
		if u.Status == store.EventDelivered {
			s.deliveredBy[u.EventID] = u.DeliveredBy
		}
	}
	s.updates = append(s.updates, us...)
	return nil
}

func (s *fakeStore) Requeue(_ context.Context, _, subject string, ids []string) ([]store.RequeuedEvent, map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.RequeuedEvent
	refused := map[string]string{}
	for _, id := range ids {
		switch {
		case !s.exists(id):
			refused[id] = "event_not_found"
		case s.subject(id) != subject:
			refused[id] = "event_not_for_key"
		default:
			s.outcomes[id] = store.EventQueued
			out = append(out, store.RequeuedEvent{ID: id, Seq: seqOf(id)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, refused, nil
}

func (s *fakeStore) RecordWithAudit(ctx context.Context, sub, subject string, us []store.OutcomeUpdate, audit []store.AuditEntry) error {
	if len(us) > 0 {
		if err := s.RecordOutcomes(ctx, sub, subject, us); err != nil {
			return err
		}
	}
	for _, e := range audit {
		if err := s.Audit(ctx, e); err != nil {
			return err
		}
		if e.TargetID == store.DeliveryWorkflowID(sub, subject) &&
			(e.Action == store.ActionDeliveryPaused || e.Action == store.ActionDeliveryResumed) {
			s.mu.Lock()
			s.paused = e.Action == store.ActionDeliveryPaused
			s.mu.Unlock()
		}
	}
	return nil
}

func (s *fakeStore) ForgetKeyPause(_ context.Context, _, _ string, audit store.AuditEntry) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		return false, nil
	}
	s.paused = false
	s.audits = append(s.audits, audit)
	return true, nil
}

func (s *fakeStore) Audit(_ context.Context, e store.AuditEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audits = append(s.audits, e)
	return nil
}

func (s *fakeStore) PurgeEvents(context.Context, time.Time, int) (store.PurgeCounts, error) {
	return store.PurgeCounts{}, nil
}

func (s *fakeStore) AuditByOnceKey(context.Context, string) (store.AuditRow, error) {
	return store.AuditRow{}, store.ErrNotFound
}

func (s *fakeStore) MarkUnreachable(context.Context, string) error { return nil }

// QueuedAfter serves the backlog from dispatched: the seqs the relay handed
// to the key, in order.
func (s *fakeStore) QueuedAfter(_ context.Context, _, _ string, after int64, limit int) ([]store.QueuedEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.QueuedEvent
	for _, seq := range s.dispatched {
		id := eventID(seq)
		if seq > after && (s.outcomes[id] == "" || s.outcomes[id] == store.EventQueued) && len(out) < limit {
			out = append(out, store.QueuedEvent{ID: id, Seq: seq})
		}
	}
	return out, nil
}

// KeyQueue serves a key's rows from dispatched. A claim that names an
// event of the key (every eventID(seq) of the log by default, see the maps
// above) has a row, as the relay writes one before it signals: it joins
// dispatched. The rest are unknown.
func (s *fakeStore) KeyQueue(_ context.Context, _, subject string, after int64, limit int, claims []store.ClaimedEvent, run string, withPause bool) (store.KeyQueue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queueReads++
	if s.state == activities.SubscriptionUnknown {
		return store.KeyQueue{}, errors.New(s.reason)
	}
	if s.failQueueRead != nil && s.failQueueRead(s.queueReads) {
		return store.KeyQueue{}, errors.New("the database did not answer")
	}
	var out store.KeyQueue
	out.Paused = withPause && s.paused
	held := func(id string) bool {
		o := s.outcomes[id]
		return o == "" || o == store.EventQueued || o == store.EventFailed
	}
	row := func(seq int64) store.HeldRow {
		id := eventID(seq)
		st := s.outcomes[id]
		if st == "" {
			st = store.EventQueued
		}
		return store.HeldRow{ID: id, Seq: seq, Status: st, QueuedAt: s.queuedAt, Attempts: s.rowAttempts[id]}
	}
	rows := map[int64]bool{}
	for _, seq := range s.dispatched {
		rows[seq] = true
	}
	var late []int64
	for _, c := range claims {
		if !s.exists(c.ID) || seqOf(c.ID) != c.Seq || s.subject(c.ID) != subject || s.undispatched[c.ID] {
			out.Unknown = append(out.Unknown, c)
			continue
		}
		if !rows[c.Seq] {
			rows[c.Seq] = true
			s.dispatched = append(s.dispatched, c.Seq)
		}
		if c.Seq <= after && held(c.ID) {
			late = append(late, c.Seq)
		}
		if by := s.deliveredBy[c.ID]; s.outcomes[c.ID] == store.EventDelivered && by != "" {
			if out.DeliveredBy == nil {
				out.DeliveredBy = map[string]string{}
			}
			out.DeliveredBy[c.ID] = by
		}
	}
	seqs := make([]int64, 0, len(rows))
	for seq := range rows {
		seqs = append(seqs, seq)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, seq := range seqs {
		id := eventID(seq)
		if seq <= after || !s.exists(id) || s.subject(id) != subject || !held(id) {
			continue
		}
		if len(out.Rows) == limit {
			out.More = true
			break
		}
		out.Rows = append(out.Rows, row(seq))
	}
	for _, seq := range late {
		out.Rows = append(out.Rows, row(seq))
	}
	sort.Slice(out.Rows, func(i, j int) bool { return out.Rows[i].Seq < out.Rows[j].Seq })
	for _, seq := range seqs {
		id := eventID(seq)
		if by := s.deliveredBy[id]; run != "" && seq > after && s.outcomes[id] == store.EventDelivered &&
			strings.HasPrefix(by, run+"/") {
			out.LocalAbove = append(out.LocalAbove, store.ClaimedEvent{ID: id, Seq: seq})
		}
	}
	return out, nil
}

// TakeKeyLease grants every lease but the first leaseRefusals takes.
func (s *fakeStore) TakeKeyLease(_ context.Context, _, _, holder string, ttl time.Duration) (bool, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaseRefusals > 0 {
		s.leaseRefusals--
		return false, time.Now().Add(time.Second), nil
	}
	return true, time.Now().Add(ttl), nil
}

func (s *fakeStore) ReleaseKeyLease(context.Context, string, string, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releaseErr
}

func (s *fakeStore) CancelQueuedAfter(_ context.Context, _, _ string, after int64, status, _ string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, seq := range s.dispatched {
		id := eventID(seq)
		if seq > after && (s.outcomes[id] == "" || s.outcomes[id] == store.EventQueued) {
			s.outcomes[id] = status
			n++
		}
	}
	return n, nil
}

// KeyStart is KeyQueue's read of a run's start and SubscriptionPolicy, as
// the store sends them in one round trip.
func (s *fakeStore) KeyStart(ctx context.Context, sub, subject string, limit int, run string) (store.KeyQueue, store.Policy, error) {
	q, err := s.KeyQueue(ctx, sub, subject, 0, limit, nil, run, true)
	if err != nil {
		return store.KeyQueue{}, store.Policy{}, err
	}
	p, err := s.SubscriptionPolicy(ctx, sub)
	return q, p, err
}

func (s *fakeStore) SubscriptionPolicy(context.Context, string) (store.Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policyReads++
	if s.policyGone {
		return store.Policy{}, store.ErrNotFound
	}
	if s.policy.OnFailure == "" {
		return store.Policy{OnFailure: activities.OnFailureHold, MaxAttempts: s.policy.MaxAttempts}, nil
	}
	return s.policy, nil
}

func (s *fakeStore) setPolicy(p store.Policy) {
	s.mu.Lock()
	s.policy = p
	s.mu.Unlock()
}

func (s *fakeStore) ClearUnreachable(context.Context, string) (bool, error) { return false, nil }

func (s *fakeStore) setState(state, reason string) {
	s.mu.Lock()
	s.state, s.reason = state, reason
	s.mu.Unlock()
}

func (s *fakeStore) outcome(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outcomes[id]
}

func (s *fakeStore) auditsOf(action string) []store.AuditEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.AuditEntry
	for _, a := range s.audits {
		if a.Action == action {
			out = append(out, a)
		}
	}
	return out
}

// settledCounter is the activities' Observer: it counts settled events by
// outcome.
type settledCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (*settledCounter) Attempted(string, string, []byte, int, activities.PostResult) {}

func (c *settledCounter) Settled(_, outcome string, n int) {
	c.mu.Lock()
	c.n[outcome] += n
	c.mu.Unlock()
}

func (c *settledCounter) count(outcome string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[outcome]
}

// envSignaler lets the real deliver activity report attempts to the workflow
// under test.
type envSignaler struct {
	env *testsuite.TestWorkflowEnvironment
}

func (e envSignaler) SignalWorkflow(_ context.Context, _, _, name string, arg any) error {
	e.env.SignalWorkflow(name, arg)
	return nil
}

func fail(code string, status int) activities.PostResult {
	return activities.PostResult{Code: code, Status: status, Message: fmt.Sprintf("status %d", status)}
}

func ids(seqs ...int64) []string {
	out := make([]string, len(seqs))
	for i, s := range seqs {
		out[i] = eventID(s)
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// quietLogger keeps the test environment's debug chatter out of test output.
type quietLogger struct{ t *testing.T }

func (quietLogger) Debug(string, ...any)          {}
func (quietLogger) Info(string, ...any)           {}
func (l quietLogger) Warn(msg string, kv ...any)  { l.t.Log(append([]any{"WARN", msg}, kv...)...) }
func (l quietLogger) Error(msg string, kv ...any) { l.t.Log(append([]any{"ERROR", msg}, kv...)...) }

package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/workflows"
)

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
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t}
	h.suite.SetLogger(quietLogger{t})
	h.env = h.suite.NewTestWorkflowEnvironment()
	h.env.SetTestTimeout(30 * time.Second)
	h.start = h.env.Now()
	h.sub = &fakeSubscriber{env: h.env}
	h.store = &fakeStore{state: "active", events: map[string]activities.LoadedEvent{}}
	acts := &activities.Activities{
		Poster: h.sub, Store: h.store, Signaler: envSignaler{h.env}, TargetTTL: time.Nanosecond,
	}
	h.env.RegisterWorkflowWithOptions(workflows.Delivery, workflow.RegisterOptions{Name: workflows.DeliveryWorkflowType})
	h.env.RegisterActivity(acts)
	h.params = workflows.Params{
		SubscriptionID: "billing:contacts.person.updated@1",
		SubscriberApp:  "billing",
		EventType:      "contacts.person.updated",
		SubjectKey:     "person-1",
	}
	return h
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
	h.env.ExecuteWorkflow(workflows.DeliveryWorkflowType, h.params)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatalf("workflow did not complete")
	}
	if err := h.env.GetWorkflowError(); err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
}

func eventID(seq int64) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", seq) }

func event(seq int64) activities.Event {
	env, _ := json.Marshal(map[string]any{
		"specversion": "1.0", "id": eventID(seq), "type": "contacts.person.updated",
		"source": "app:contacts", "subject": "person-1", "data": map[string]any{"n": seq},
	})
	return activities.Event{ID: eventID(seq), Seq: seq, Envelope: env}
}

// call is one POST the fake subscriber received.
type call struct {
	EventID string
	Attempt int
	At      time.Duration // workflow time since the first POST
	OK      bool
}

// fakeSubscriber answers POSTs with respond (nil: always 2xx) and records them.
type fakeSubscriber struct {
	mu      sync.Mutex
	env     *testsuite.TestWorkflowEnvironment
	start   time.Time
	respond func(eventID string, attempt, nth int) activities.PostResult
	calls   []call
}

func (f *fakeSubscriber) Post(_ context.Context, r activities.PostRequest) activities.PostResult {
	f.mu.Lock()
	nth := 0
	for _, c := range f.calls {
		if c.EventID == r.EventID {
			nth++
		}
	}
	if f.start.IsZero() {
		f.start = f.env.Now()
	}
	res := activities.PostResult{Status: 204}
	if f.respond != nil {
		res = f.respond(r.EventID, r.Attempt, nth)
	}
	f.calls = append(f.calls, call{EventID: r.EventID, Attempt: r.Attempt, At: f.env.Now().Sub(f.start), OK: res.Code == ""})
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

// fakeStore is the activities' database: a subscription state, events to
// load back and the audit rows written.
type fakeStore struct {
	mu     sync.Mutex
	state  string
	reason string
	events map[string]activities.LoadedEvent
	audits []activities.AuditEntry
}

func (s *fakeStore) Target(_ context.Context, _ string) (activities.Target, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return activities.Target{State: s.state, Reason: s.reason, URL: "http://subscriber.test/deliver"}, nil
}

func (s *fakeStore) LoadEvent(_ context.Context, id string) (activities.LoadedEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev, ok := s.events[id]
	if !ok {
		return activities.LoadedEvent{}, activities.ErrEventNotFound
	}
	return ev, nil
}

func (s *fakeStore) Audit(_ context.Context, e activities.AuditEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audits = append(s.audits, e)
	return nil
}

func (s *fakeStore) Envelopes(_ context.Context, ids []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, id := range ids {
		var seq int64
		if _, err := fmt.Sscanf(id[len(id)-12:], "%d", &seq); err == nil {
			out[id] = event(seq).Envelope
		}
	}
	return out, nil
}

func (s *fakeStore) PurgeEvents(context.Context, time.Time, int) (int64, error) { return 0, nil }

func (s *fakeStore) setState(state, reason string) {
	s.mu.Lock()
	s.state, s.reason = state, reason
	s.mu.Unlock()
}

func (s *fakeStore) auditsOf(action string) []activities.AuditEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []activities.AuditEntry
	for _, a := range s.audits {
		if a.Action == action {
			out = append(out, a)
		}
	}
	return out
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

package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"herald/store"
)

// Tests of Deliver's steps and of the order the doc comment of Deliver
// states, run through a workflow started under the key's own id (ownKey),
// against a scripted store and sender.

const (
	tSub     = "billing:contacts.person.updated@1"
	tSubject = "person-1"
)

// tEvents are the events of the batch, in order.
var tEvents = []Event{
	{ID: "0190a1b2-c3d4-7e5f-8a9b-000000000001", Seq: 1},
	{ID: "0190a1b2-c3d4-7e5f-8a9b-000000000002", Seq: 2},
	{ID: "0190a1b2-c3d4-7e5f-8a9b-000000000003", Seq: 3},
}

// deliverStore answers as the database would for an active subscription
// whose events are all queued, and keeps the calls made to it.
type deliverStore struct {
	Store
	mu       sync.Mutex
	batch    store.Batch
	batchErr error
	calls    []string
	outcomes []store.OutcomeUpdate
	// owed are the key's rows KeyQueue answers (owedErr fails it);
	// writtenAtRead is how many outcome rows were written when it was read.
	owed          []store.HeldRow
	owedErr       error
	writtenAtRead int
	// writtenAtRelease is how many outcome rows were written when the
	// key's lease was given back.
	writtenAtRelease int
	// recordErr fails every write of outcome rows; releaseErr every
	// release of the key's lease.
	recordErr, releaseErr error
	// leaseBusy is how many asks for the key's lease find another run
	// holding it; leaseFreed runs when the lease is granted after them.
	leaseBusy  int
	leaseFreed func(*deliverStore)
}

func newDeliverStore() *deliverStore {
	b := store.Batch{Target: store.Target{SubscriptionID: tSub, Type: "contacts.person.updated", Version: 1,
		State: store.StateActive, App: "billing", Endpoint: "http://billing.example", DeliveryPath: "/d"},
		SecretID: 7, Events: map[string]store.BatchEvent{}}
	for _, ev := range tEvents {
		b.Events[ev.ID] = store.BatchEvent{ID: ev.ID, Seq: ev.Seq, SourceApp: "contacts",
			Type: "contacts.person.updated", Version: 1, Subject: tSubject, Envelope: []byte(`{}`),
			Outcome: store.EventQueued}
	}
	return &deliverStore{batch: b}
}

func (s *deliverStore) call(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, what)
}

func (s *deliverStore) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *deliverStore) DeliveryBatch(context.Context, string, string, []string) (store.Batch, error) {
	s.call("batch")
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batch // a read: later changes to the store's rows are not in it
	b.Events = maps.Clone(s.batch.Events)
	return b, s.batchErr
}

func (s *deliverStore) RecordOutcomes(_ context.Context, _, _ string, us []store.OutcomeUpdate) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recordErr != nil {
		return s.recordErr
	}
	s.outcomes = append(s.outcomes, us...)
	return nil
}

func (s *deliverStore) KeyQueue(_ context.Context, _, _ string, _ int64, limit int, _ []store.ClaimedEvent, _ string, _ bool) (store.KeyQueue, error) {
	s.call(fmt.Sprintf("owed %d", limit))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writtenAtRead = len(s.outcomes)
	return store.KeyQueue{Rows: s.owed}, s.owedErr
}

func (s *deliverStore) TakeKeyLease(context.Context, string, string, string, time.Duration) (bool, time.Time, error) {
	s.call("lease")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaseBusy > 0 {
		s.leaseBusy--
		if s.leaseBusy == 0 && s.leaseFreed != nil {
			defer s.leaseFreed(s)
		}
		return false, time.Now().Add(time.Second), nil
	}
	return true, time.Now().Add(time.Hour), nil
}

func (s *deliverStore) ReleaseKeyLease(context.Context, string, string, string) error {
	s.call("release")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writtenAtRelease = len(s.outcomes)
	return s.releaseErr
}

func (s *deliverStore) MarkUnreachable(context.Context, string) error {
	s.call("mark unreachable")
	return nil
}

// scriptedSender answers each event's POST from a script (delivered when it
// has none) and keeps the POSTs made.
type scriptedSender struct {
	mu     sync.Mutex
	script map[string]PostResult
	posts  []PostRequest
	// before, when set, runs as each POST starts, with its event's id.
	before func(eventID string)
}

func (s *scriptedSender) Post(_ context.Context, r PostRequest) PostResult {
	if s.before != nil {
		s.before(r.EventID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts = append(s.posts, r)
	return s.script[r.EventID]
}

func (s *scriptedSender) posted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, p := range s.posts {
		out = append(out, fmt.Sprintf("%s#%d", p.EventID[len(p.EventID)-1:], p.Attempt))
	}
	return out
}

// runDeliver runs one Deliver execution (no retries) from a workflow named
// workflowID and returns its result or error.
func runDeliver(t *testing.T, st *deliverStore, sender *scriptedSender, workflowID string, in DeliverInput) (DeliverResult, error) {
	t.Helper()
	return runDeliverOn(t, &Activities{Store: st, Poster: sender}, workflowID, in)
}

// runDeliverOn is runDeliver on activities a.
func runDeliverOn(t *testing.T, a *Activities, workflowID string, in DeliverInput) (DeliverResult, error) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(a)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in DeliverInput) (DeliverResult, error) {
		var r DeliverResult
		var err error
		if in.Local {
			ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
				StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
			err = workflow.ExecuteLocalActivity(ctx, a.Deliver, in).Get(ctx, &r)
		} else {
			ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
			err = workflow.ExecuteActivity(ctx, a.Deliver, in).Get(ctx, &r)
		}
		return r, err
	}, workflow.RegisterOptions{Name: "deliverOnce"})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflowID})
	env.ExecuteWorkflow("deliverOnce", in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		return DeliverResult{}, err
	}
	var r DeliverResult
	if err := env.GetWorkflowResult(&r); err != nil {
		t.Fatal(err)
	}
	return r, nil
}

func deliverInput(events ...Event) DeliverInput {
	return DeliverInput{SubscriptionID: tSub, SubscriberApp: "billing", SubjectKey: tSubject, Events: events,
		RetrySchedule: []time.Duration{time.Second, time.Minute}, Timeout: 5 * time.Second}
}

var ownID = DeliveryWorkflowID(tSub, tSubject)

func results(done []Settled) []string {
	var out []string
	for _, s := range done {
		out = append(out, s.ID[len(s.ID)-1:]+" "+s.Result+" "+s.Reason)
	}
	return out
}

// TestDeliverStopsAtTheFirstFailure: events go in order, each its own POST;
// a later event's failure ends the execution with a partial result, records
// that attempt, and the events after it are not sent. The key's lease is
// taken after the batch is read and given back at the end.
func TestDeliverStopsAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	st := newDeliverStore()
	sender := &scriptedSender{script: map[string]PostResult{
		tEvents[1].ID: {Code: CodeHandlerFailed, Status: 500, Message: "boom"}}}
	r, err := runDeliver(t, st, sender, ownID, deliverInput(tEvents...))
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != OutcomePartial || r.Attempt != 1 || r.Code != CodeHandlerFailed || r.FailedAt.IsZero() {
		t.Fatalf("result %+v", r)
	}
	if got, want := results(r.Done), []string{"1 delivered "}; !slices.Equal(got, want) {
		t.Fatalf("done %q, want %q", got, want)
	}
	if got, want := sender.posted(), []string{"1#1", "2#1"}; !slices.Equal(got, want) {
		t.Fatalf("posts %q, want %q", got, want)
	}
	for _, p := range sender.posts {
		// The signer may reuse secrets only while the batch's are current.
		if p.SecretID != st.batch.SecretID {
			t.Fatalf("post of %s names secret %d, want the batch's %d", p.EventID, p.SecretID, st.batch.SecretID)
		}
	}
	if got, want := st.Calls(), []string{"batch", "lease", "release"}; !slices.Equal(got, want) {
		t.Fatalf("store calls %q, want %q", got, want)
	}
	want := []store.OutcomeUpdate{
		{EventID: tEvents[0].ID, Seq: 1, Status: store.EventDelivered, Attempts: 1},
		{EventID: tEvents[1].ID, Seq: 2, Status: store.EventQueued, Attempts: 1, LastCode: CodeHandlerFailed, LastError: "boom"},
	}
	if !slices.Equal(st.outcomes, want) {
		t.Fatalf("outcome rows %+v, want %+v", st.outcomes, want)
	}
}

// TestDeliverHeadFailureIsTemporalsRetry: the head's failure in a regular
// execution is an error that carries the schedule's delay, its outcome row
// written; the attempt continues the count of earlier executions.
func TestDeliverHeadFailureIsTemporalsRetry(t *testing.T) {
	t.Parallel()
	st := newDeliverStore()
	sender := &scriptedSender{script: map[string]PostResult{
		tEvents[0].ID: {Code: CodeHandlerFailed, Status: 500, Message: "boom"}}}
	in := deliverInput(tEvents...)
	in.PriorAttempts = 1
	_, err := runDeliver(t, st, sender, ownID, in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != CodeHandlerFailed || appErr.NextRetryDelay() != time.Minute {
		t.Fatalf("error %v, want %s retried after a minute", err, CodeHandlerFailed)
	}
	if got, want := sender.posted(), []string{"1#2"}; !slices.Equal(got, want) {
		t.Fatalf("posts %q, want %q", got, want)
	}
	if len(st.outcomes) != 1 || st.outcomes[0].Attempts != 2 || st.outcomes[0].Status != store.EventQueued {
		t.Fatalf("outcome rows %+v", st.outcomes)
	}
}

// TestDeliverBeginCostsNoQuery: step 1 comes before any query. A local
// execution too close to its deadline hands over, and the first attempt of
// an execution with NotBefore only waits out the retry delay.
func TestDeliverBeginCostsNoQuery(t *testing.T) {
	t.Parallel()
	t.Run("local deadline", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{}
		in := deliverInput(tEvents...)
		in.Local, in.Deadline = true, time.Now().Add(minLocalPost/5)
		r, err := runDeliver(t, st, sender, ownID, in)
		if err != nil || r.Outcome != OutcomeHandOver {
			t.Fatalf("result %+v, %v; want a hand-over", r, err)
		}
		if len(st.Calls()) != 0 || len(sender.posted()) != 0 {
			t.Fatalf("store calls %q, posts %q", st.Calls(), sender.posted())
		}
	})
	t.Run("not before", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{}
		in := deliverInput(tEvents...)
		in.NotBefore = time.Now().Add(time.Hour)
		_, err := runDeliver(t, st, sender, ownID, in)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != CodeNotBefore || appErr.NextRetryDelay() < 59*time.Minute {
			t.Fatalf("error %v, want %s for about an hour", err, CodeNotBefore)
		}
		if len(st.Calls()) != 0 || len(sender.posted()) != 0 {
			t.Fatalf("store calls %q, posts %q", st.Calls(), sender.posted())
		}
	})
}

// TestDeliverLoadEndsBeforeTheLease: step 2 ends an execution whose
// subscription is not active, is gone or cannot be read, whose key an
// operator paused (its paused_keys row, whatever the run knows), and a
// local one whose app has limits, before the key's lease is taken or
// anything sent.
func TestDeliverLoadEndsBeforeTheLease(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		setup func(*deliverStore, *DeliverInput)
		want  DeliverResult
	}{
		{"paused", func(s *deliverStore, _ *DeliverInput) {
			s.batch.Target.State, s.batch.Target.Reason = store.StatePaused, store.ReasonPausedByOperator
		}, DeliverResult{Outcome: OutcomeInactive, SubscriptionState: store.StatePaused,
			SubscriptionReason: store.ReasonPausedByOperator}},
		{"key paused", func(s *deliverStore, _ *DeliverInput) { s.batch.KeyPaused = true },
			DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
				SubscriptionReason: ReasonKeyPaused, KeyPaused: true}},
		{"key paused, a local execution", func(s *deliverStore, in *DeliverInput) {
			s.batch.KeyPaused = true
			in.Local, in.Deadline = true, time.Now().Add(time.Minute)
		}, DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
			SubscriptionReason: ReasonKeyPaused, KeyPaused: true}},
		{"gone", func(s *deliverStore, _ *DeliverInput) { s.batchErr = store.ErrNotFound },
			DeliverResult{Outcome: OutcomeInactive, SubscriptionState: store.StateCancelled,
				SubscriptionReason: "subscription_not_found"}},
		{"outage", func(s *deliverStore, _ *DeliverInput) { s.batchErr = errors.New("connection refused") },
			DeliverResult{Outcome: OutcomeInactive, SubscriptionState: SubscriptionUnknown,
				SubscriptionReason: "connection refused"}},
		{"local with limits", func(s *deliverStore, in *DeliverInput) {
			s.batch.Limits = store.Limits{MaxInFlight: 1}
			in.Local, in.Deadline, in.PriorAttempts = true, time.Now().Add(time.Minute), 2
		}, DeliverResult{Outcome: OutcomeLimited, Attempt: 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, sender := newDeliverStore(), &scriptedSender{}
			in := deliverInput(tEvents...)
			tt.setup(st, &in)
			r, err := runDeliver(t, st, sender, ownID, in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tt.want.Outcome || r.SubscriptionState != tt.want.SubscriptionState ||
				r.SubscriptionReason != tt.want.SubscriptionReason || r.Attempt != tt.want.Attempt || len(r.Done) != 0 ||
				r.KeyPaused != tt.want.KeyPaused {
				t.Fatalf("result %+v, want %+v", r, tt.want)
			}
			if got := st.Calls(); !slices.Equal(got, []string{"batch"}) || len(sender.posted()) != 0 {
				t.Fatalf("store calls %q, posts %q; want the batch only", got, sender.posted())
			}
		})
	}
}

// TestDeliverReadsTheBatchAgainAfterALeaseWait: step 3. While this
// execution waited for the key's lease, the run that held it (left posting
// by a terminate) delivered the head; the batch read before the wait said
// queued. The execution reads the batch again once it holds the lease and
// skips the head rather than POST it twice.
func TestDeliverReadsTheBatchAgainAfterALeaseWait(t *testing.T) {
	t.Parallel()
	st, sender := newDeliverStore(), &scriptedSender{}
	st.leaseBusy = 1
	st.leaseFreed = func(s *deliverStore) {
		ev := s.batch.Events[tEvents[0].ID]
		ev.Outcome = store.EventDelivered
		s.batch.Events[tEvents[0].ID] = ev
	}
	r, err := runDeliver(t, st, sender, ownID, deliverInput(tEvents...))
	if err != nil {
		t.Fatal(err)
	}
	if got := sender.posted(); !slices.Equal(got, []string{"2#1", "3#1"}) {
		t.Fatalf("posts %q, want events 2 and 3 only: the head was delivered during the wait", got)
	}
	if len(r.Done) != 3 || r.Done[0].Result != ResultSkipped || r.Done[0].Reason != store.EventDelivered {
		t.Fatalf("done %+v, want the head skipped as delivered, then two deliveries", r.Done)
	}
	if got := st.Calls(); len(got) < 4 || !slices.Equal(got[:4], []string{"batch", "lease", "lease", "batch"}) {
		t.Fatalf("store calls %q, want the batch read again after the lease wait", got)
	}
}

// TestDeliverReportsALeaseKeptAfterItsWait: the batch read again after a
// lease wait fails (a database outage), and so does the lease's release:
// the result says the lease is kept, so that the run does not end quiet
// while only it may deliver the key.
func TestDeliverReportsALeaseKeptAfterItsWait(t *testing.T) {
	t.Parallel()
	st, sender := newDeliverStore(), &scriptedSender{}
	st.leaseBusy = 1
	st.leaseFreed = func(s *deliverStore) {
		s.batchErr = errors.New("connection refused")
		s.releaseErr = errors.New("connection refused")
	}
	r, err := runDeliver(t, st, sender, ownID, deliverInput(tEvents...))
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != OutcomeInactive || r.SubscriptionState != SubscriptionUnknown || !r.LeaseKept || len(sender.posted()) != 0 {
		t.Fatalf("result %+v, posts %q; want inactive, unknown, the lease kept, nothing sent", r, sender.posted())
	}
}

// TestDeliverAdmitsOnlyTheKeysQueuedEvents: step 4b. A workflow that is not
// the key's delivers nothing and takes no lease; settled events are skipped
// unsent, and a later event is sent with its own first attempt.
func TestDeliverAdmitsOnlyTheKeysQueuedEvents(t *testing.T) {
	t.Parallel()
	t.Run("another workflow", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{}
		r, err := runDeliver(t, st, sender, "deliver:forged", deliverInput(tEvents[:2]...))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"1 rejected not_the_key_workflow", "2 rejected not_the_key_workflow"}
		if got := results(r.Done); r.Outcome != OutcomeDelivered || !slices.Equal(got, want) {
			t.Fatalf("result %s %q, want %q", r.Outcome, got, want)
		}
		if got := st.Calls(); !slices.Equal(got, []string{"batch"}) || len(sender.posted()) != 0 {
			t.Fatalf("store calls %q, posts %q", got, sender.posted())
		}
	})
	t.Run("settled and unknown", func(t *testing.T) {
		st, sender := newDeliverStore(), &scriptedSender{}
		e := st.batch.Events[tEvents[0].ID]
		e.Outcome = store.EventDelivered
		st.batch.Events[tEvents[0].ID] = e
		delete(st.batch.Events, tEvents[2].ID)
		in := deliverInput(tEvents...)
		in.PriorAttempts = 4 // the head's count; event 2 makes its first attempt
		r, err := runDeliver(t, st, sender, ownID, in)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"1 skipped delivered", "2 delivered ", "3 rejected event_not_found"}
		if got := results(r.Done); r.Outcome != OutcomeDelivered || !slices.Equal(got, want) {
			t.Fatalf("result %s %q, want %q", r.Outcome, got, want)
		}
		if got := sender.posted(); !slices.Equal(got, []string{"2#1"}) {
			t.Fatalf("posts %q", got)
		}
	})
}

// TestDeliverLeavesTheRestPastTheBatchTime: step 4c. Once the batch has run
// its time, the events after the first settled one go in the next
// execution, unsent.
func TestDeliverLeavesTheRestPastTheBatchTime(t *testing.T) {
	t.Parallel()
	st, sender := newDeliverStore(), &scriptedSender{}
	in := deliverInput(tEvents...)
	in.BatchTime = time.Nanosecond
	r, err := runDeliver(t, st, sender, ownID, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := results(r.Done); r.Outcome != OutcomeDelivered || !slices.Equal(got, []string{"1 delivered "}) {
		t.Fatalf("result %s %q", r.Outcome, got)
	}
	if got := sender.posted(); !slices.Equal(got, []string{"1#1"}) {
		t.Fatalf("posts %q", got)
	}
}

// TestDeliverFinishMarksTheAppUnreachable: steps 4g and 5. Nothing
// answering ends the execution as unreachable with the head's attempt, and
// finish marks the app before it returns; no failure row is written.
func TestDeliverFinishMarksTheAppUnreachable(t *testing.T) {
	t.Parallel()
	st := newDeliverStore()
	sender := &scriptedSender{script: map[string]PostResult{
		tEvents[0].ID: {Code: CodeSubscriberUnreachable, Message: "connection refused"}}}
	in := deliverInput(tEvents...)
	in.PriorAttempts = 2
	r, err := runDeliver(t, st, sender, ownID, in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != OutcomeUnreachable || r.Attempt != 3 || r.Code != CodeSubscriberUnreachable || len(r.Done) != 0 {
		t.Fatalf("result %+v", r)
	}
	if got, want := st.Calls(), []string{"batch", "lease", "mark unreachable", "release"}; !slices.Equal(got, want) {
		t.Fatalf("store calls %q, want %q", got, want)
	}
	if len(st.outcomes) != 0 {
		t.Fatalf("outcome rows %+v", st.outcomes)
	}
}

// TestDeliverLocalCapsThePostByItsDeadline: step 4e. A local execution's
// POST is bounded by the time left before its deadline, and a POST cut
// short by it hands over, unrecorded, instead of counting an attempt.
func TestDeliverLocalCapsThePostByItsDeadline(t *testing.T) {
	t.Parallel()
	st := newDeliverStore()
	sender := &scriptedSender{script: map[string]PostResult{
		tEvents[0].ID: {Code: CodeHandlerTimeout, Message: "timed out"}}}
	in := deliverInput(tEvents...)
	in.Local, in.Deadline = true, time.Now().Add(3*time.Second)
	r, err := runDeliver(t, st, sender, ownID, in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != OutcomeHandOver || r.Code != CodeHandlerTimeout || r.FailedAt.IsZero() {
		t.Fatalf("result %+v", r)
	}
	if len(sender.posts) != 1 || sender.posts[0].Timeout >= in.Timeout || sender.posts[0].Timeout < time.Second {
		t.Fatalf("posts %+v: want one bounded by the deadline, under %s", sender.posts, in.Timeout)
	}
	if len(st.outcomes) != 0 {
		t.Fatalf("outcome rows %+v", st.outcomes)
	}
}

// TestDeliverThenReadsWhatTheKeyOwes: a local execution asked to
// (ThenRead) that delivers its whole batch reads the key's rows last, after
// its outcome rows are written and before the key's lease goes back, and
// returns them as Owed. Not asked, not local, not all delivered, or a failed
// read: no Owed, and no read unless one was asked for.
func TestDeliverThenReadsWhatTheKeyOwes(t *testing.T) {
	t.Parallel()
	later := store.HeldRow{ID: tEvents[2].ID, Seq: tEvents[2].Seq, Status: store.EventQueued}
	for _, tc := range []struct {
		name      string
		local     bool
		thenRead  int
		fail      bool // the second event's POST fails
		readErr   error
		recordErr error // the outcome rows cannot be written
		// paced: the batch time runs out after the first event.
		paced bool
		// releaseErr fails the release of the key's lease: the result
		// says the lease is kept.
		releaseErr error
		wantOwed   []Event
		wantCalls  []string
	}{
		{name: "asked", local: true, thenRead: 7, wantOwed: []Event{tEvents[2]},
			wantCalls: []string{"batch", "lease", "owed 7", "release"}},
		{name: "not asked", local: true, wantCalls: []string{"batch", "lease", "release"}},
		{name: "regular execution", thenRead: 7, wantCalls: []string{"batch", "lease", "release"}},
		{name: "not all delivered", local: true, thenRead: 7, fail: true,
			wantCalls: []string{"batch", "lease", "release"}},
		{name: "the read fails", local: true, thenRead: 7, readErr: errors.New("the database did not answer"),
			wantCalls: []string{"batch", "lease", "owed 7", "release"}},
		{name: "rows not written", local: true, thenRead: 7, recordErr: errors.New("the database did not answer"),
			wantCalls: []string{"batch", "lease", "release"}},
		{name: "batch time runs out", local: true, thenRead: 7, paced: true,
			wantCalls: []string{"batch", "lease", "release"}},
		{name: "the lease is kept", local: true, thenRead: 7, releaseErr: errors.New("the database did not answer"),
			wantOwed: []Event{tEvents[2]}, wantCalls: []string{"batch", "lease", "owed 7", "release"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newDeliverStore()
			st.owed, st.owedErr, st.recordErr = []store.HeldRow{later}, tc.readErr, tc.recordErr
			st.releaseErr = tc.releaseErr
			sender := &scriptedSender{script: map[string]PostResult{}}
			if tc.fail {
				sender.script[tEvents[1].ID] = PostResult{Code: CodeHandlerFailed, Status: 500, Message: "boom"}
			}
			in := deliverInput(tEvents[:2]...)
			in.Local, in.ThenRead = tc.local, tc.thenRead
			if tc.paced {
				in.BatchTime = time.Nanosecond
			}
			if tc.local {
				in.Deadline = time.Now().Add(time.Minute)
			}
			r, err := runDeliver(t, st, sender, ownID, in)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Calls(); !slices.Equal(got, tc.wantCalls) {
				t.Fatalf("store calls %v, want %v", got, tc.wantCalls)
			}
			if r.LeaseKept != (tc.releaseErr != nil) {
				t.Fatalf("lease kept %v, want %v", r.LeaseKept, tc.releaseErr != nil)
			}
			switch {
			case tc.wantOwed == nil && r.Owed != nil:
				t.Fatalf("owed %+v, want none", r.Owed)
			case tc.wantOwed != nil && r.Owed == nil:
				t.Fatalf("result %+v: no owed rows", r)
			case tc.wantOwed != nil:
				var got []Event
				for _, h := range r.Owed.Events {
					got = append(got, h.Event)
				}
				if !slices.Equal(got, tc.wantOwed) {
					t.Fatalf("owed %v, want %v", got, tc.wantOwed)
				}
				if st.writtenAtRead != 2 {
					t.Fatalf("read with %d outcome rows written, want both", st.writtenAtRead)
				}
			}
		})
	}
}

// TestDeliverySteps calls the steps that need no activity context on their
// own: admit settles what must not be sent, paced leaves the rest once the
// batch has run its time, and boundPost caps a local POST by the deadline
// or hands over when too little is left.
func TestDeliverySteps(t *testing.T) {
	t.Parallel()
	st := newDeliverStore()
	a := &Activities{Store: st, Poster: &scriptedSender{}}
	d := &delivery{a: a, ctx: context.Background(), in: deliverInput(tEvents...), batch: st.batch}

	if _, ok := d.admit(tEvents[0]); ok || len(d.done) != 1 || d.done[0].Reason != "not_the_key_workflow" {
		t.Fatalf("another workflow's event admitted: %+v", d.done)
	}
	d.own, d.done = true, nil
	if _, ok := d.admit(tEvents[0]); !ok || len(d.done) != 0 {
		t.Fatalf("a queued event of the key refused: %+v", d.done)
	}
	settled := st.batch.Events[tEvents[1].ID]
	settled.Outcome = store.EventCancelled
	d.batch.Events = map[string]store.BatchEvent{tEvents[1].ID: settled}
	if _, ok := d.admit(tEvents[1]); ok || len(d.done) != 1 || d.done[0].Result != ResultSkipped ||
		d.done[0].Reason != store.EventCancelled {
		t.Fatalf("a settled event admitted: %+v", d.done)
	}

	d.started, d.batchTime = time.Now().Add(-time.Minute), time.Second
	if d.paced(0) {
		t.Fatal("the first event left to the next execution")
	}
	if !d.paced(1) {
		t.Fatal("an event past the batch time sent in this execution")
	}

	d.postTimeout = 30 * time.Second
	if timeout, capped, e := d.boundPost(""); e != nil || capped || timeout != d.postTimeout {
		t.Fatalf("regular execution: timeout %s capped %v end %+v", timeout, capped, e)
	}
	d.in.Local, d.in.Deadline = true, time.Now().Add(5*time.Second)
	if timeout, capped, e := d.boundPost(""); e != nil || !capped || timeout > 5*time.Second || timeout < 4*time.Second {
		t.Fatalf("local execution: timeout %s capped %v end %+v", timeout, capped, e)
	}
	d.in.Deadline = time.Now().Add(minLocalPost / 2)
	d.w = a.startOutcomeWriter(d.ctx, tSub, tSubject)
	if _, _, e := d.boundPost(""); e == nil || e.res.Outcome != OutcomeHandOver || e.err != nil || len(e.res.Done) != 1 {
		t.Fatalf("local execution past its deadline: %+v, want a hand-over with what it settled", e)
	}
}

// TestDeliverGivesTheLeaseBackWhenItFails: a regular execution whose head
// fails ends with an error (Temporal retries it), not through finish; the
// key's lease still goes back, once, and only after the failure's outcome
// row is written, also when that row or the release itself fails.
func TestDeliverGivesTheLeaseBackWhenItFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		recordErr, releaseErr error
		wantRows              int
	}{
		{name: "the head fails", wantRows: 1},
		{name: "its outcome row cannot be written", recordErr: errors.New("the database did not answer")},
		{name: "the lease cannot be given back", releaseErr: errors.New("the database did not answer"), wantRows: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newDeliverStore()
			st.recordErr, st.releaseErr = tc.recordErr, tc.releaseErr
			sender := &scriptedSender{script: map[string]PostResult{
				tEvents[0].ID: {Code: CodeHandlerFailed, Status: 500, Message: "boom"}}}
			_, err := runDeliver(t, st, sender, ownID, deliverInput(tEvents[:2]...))
			if err == nil || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("error %v, want the head's failure", err)
			}
			if got, want := st.Calls(), []string{"batch", "lease", "release"}; !slices.Equal(got, want) {
				t.Fatalf("store calls %v, want %v", got, want)
			}
			if st.writtenAtRelease != tc.wantRows {
				t.Fatalf("lease given back with %d outcome rows written, want %d", st.writtenAtRelease, tc.wantRows)
			}
			if got := sender.posted(); !slices.Equal(got, []string{"1#1"}) {
				t.Fatalf("posts %v, want the head's one attempt only", got)
			}
		})
	}
}

package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// Issue 25: a key's workflow is not the state of record, PostgreSQL is.
// Whatever happens to the workflow (an operator terminates it, someone who
// can reach Temporal signals or starts it by hand), no genuine event is
// delivered out of order, lost or expired early, and the audit trail tells
// what happened. Each test below reproduces one such action.

// TestTerminatedHeldKeyKeepsOrder: terminating a key's workflow does not
// release what it held. Its next run takes the key's events back from
// their outcome rows: a held head stays held ahead of later events, a
// retrying head is delivered again, even when nothing new is published.
func TestTerminatedHeldKeyKeepsOrder(t *testing.T) {
	t.Parallel()
	const subject = "person-term"
	id := workflows.DeliveryID(system.BillingSub, subject)

	t.Run("held", func(t *testing.T) {
		t.Parallel()
		s := system.Start(t)
		s.Apply()
		c := s.Dial()
		// Only e1 is refused: e2 would go through if it were sent.
		s.Sub.SetReject(func(app, subj string, n int) error {
			if app == "billing" && subj == subject && n == 1 {
				return subscriber.Reject(fmt.Errorf("event %d does not fit yet", n))
			}
			return nil
		})
		e1 := s.Publish(subject, 1)
		testkit.Eventually(t, 60*time.Second, "e1 to be held failed", func() bool {
			return status(c, id) == workflows.StatusFailed && outcomeStatus(t, s, system.BillingSub, e1.ID) == store.EventFailed
		})
		old := terminate(t, c, id)

		e2 := s.Publish(subject, 2)
		// e2 is not signalled (the key holds on a failed head): the relay's
		// re-drive starts the new run, once e1's row has been quiet for
		// 30 s, at its next sweep (every 20 s).
		testkit.EventuallyValue(t, 90*time.Second, "a new run to hold e1 failed with e2 queued behind it", func() (string, bool) {
			noArrivalYet(t, s, subject, "e1 is held after the terminate")
			st, ok := newRunState(c, id, old)
			o1, o2 := outcomeStatus(t, s, system.BillingSub, e1.ID), outcomeStatus(t, s, system.BillingSub, e2.ID)
			return fmt.Sprintf("%s; outcome rows e1 %q, e2 %q", runSummary(st, ok), o1, o2),
				ok && st.Status == workflows.StatusFailed && st.Head != nil && st.Head.EventID == e1.ID &&
					len(st.Queued) == 1 && st.Queued[0].EventID == e2.ID && o1 == store.EventFailed && o2 == store.EventQueued
		})

		// The operator fixes the subscriber and redelivers the head the usual way.
		s.Sub.SetReject(nil)
		if res := redeliverHead(t, c, id, "e2e-operator", "handler fixed"); !res.Changed {
			t.Fatalf("redeliver of the held head changed nothing: %+v", res)
		}
		waitInOrder(t, s, subject, 60*time.Second, 1, 2)
		wantOutcomes(t, s, store.EventDelivered, e1.ID, e2.ID)
		if rows := auditOf(t, s, id, workflows.AuditDeliveryFailed); len(rows) == 0 || !metaHas(t, rows[len(rows)-1], "eventId", e1.ID) {
			t.Fatalf("delivery.failed audit rows of %s: %+v; want the oldest about e1 %s", id, rows, e1.ID)
		}
		rows := auditOf(t, s, id, workflows.AuditDeliveryRedelivered)
		if len(rows) != 1 || rows[0].Outcome != store.OutcomeAllowed || rows[0].Actor != "e2e-operator" || !metaHas(t, rows[0], "eventId", e1.ID) {
			t.Fatalf("delivery.redelivered audit rows of %s: %+v; want one, allowed, by e2e-operator, about e1 %s", id, rows, e1.ID)
		}
	})

	// A key that still has attempts left: many retries, 3 s apart.
	busy := func(t *testing.T) (*system.System, client.Client) {
		s := system.Start(t, system.Schedule(slices.Repeat([]time.Duration{3 * time.Second}, 20)...))
		s.Apply()
		s.Sub.SetReject(func(app, subj string, n int) error {
			if app == "billing" && subj == subject && n == 1 {
				return errors.New("not yet")
			}
			return nil
		})
		return s, s.Dial()
	}
	retrying := func(t *testing.T, s *system.System, c client.Client, head string) func() bool {
		return func() bool {
			st, ok := keyState(c, id)
			return ok && st.Status == workflows.StatusRetrying && st.Head != nil && st.Head.EventID == head &&
				st.Head.Attempt >= 1 && outcomeStatus(t, s, system.BillingSub, head) == store.EventQueued
		}
	}

	t.Run("busy", func(t *testing.T) {
		t.Parallel()
		s, c := busy(t)
		e1 := s.Publish(subject, 1)
		testkit.Eventually(t, 60*time.Second, "e1 to be retrying with attempts left", retrying(t, s, c, e1.ID))
		old := terminate(t, c, id)

		e2 := s.Publish(subject, 2)
		testkit.EventuallyValue(t, 60*time.Second, "a new run with e1 at its head and e2 behind it", func() (string, bool) {
			noArrivalYet(t, s, subject, "the subscriber still refuses e1")
			st, ok := newRunState(c, id, old)
			return runSummary(st, ok), ok && st.Head != nil && st.Head.EventID == e1.ID && len(st.Queued) == 1 && st.Queued[0].EventID == e2.ID
		})
		s.Sub.SetReject(nil)
		waitInOrder(t, s, subject, 60*time.Second, 1, 2)
		wantOutcomes(t, s, store.EventDelivered, e1.ID, e2.ID)
	})

	t.Run("busy-no-publish", func(t *testing.T) {
		t.Parallel()
		s, c := busy(t)
		e1 := s.Publish(subject, 1)
		e2 := s.Publish(subject, 2)
		testkit.Eventually(t, 60*time.Second, "e1 to be retrying with attempts left", retrying(t, s, c, e1.ID))
		terminate(t, c, id)
		// Past the attempt that may have been under way at the terminate.
		time.Sleep(2 * time.Second)
		noArrivalYet(t, s, subject, "e1 was refused until now")
		s.Sub.SetReject(nil)
		// Nothing new is published: what re-drives the key is that its
		// events are queued in PostgreSQL and no workflow runs for it.
		waitInOrder(t, s, subject, 90*time.Second, 1, 2)
		wantOutcomes(t, s, store.EventDelivered, e1.ID, e2.ID)
	})
}

// TestTerminatedPausedKeyStaysPaused: an operator's pause is the key's,
// kept in PostgreSQL, not the run's. After a terminate the key's next run
// (started by the relay's signal of a new event) holds the key paused and
// delivers nothing until the operator resumes it; the resume delivers the
// event and forgets the pause. A pause only the rows hold is forgotten by
// a resume too.
//
// HERALD_RECORD_PAUSED_HISTORY names a file to write the new run's history
// to, for the replay test:
//
//	HERALD_RECORD_PAUSED_HISTORY=$PWD/workflows/testdata/delivery-history-paused-row.json go test ./e2e -run TerminatedPausedKey
func TestTerminatedPausedKeyStaysPaused(t *testing.T) {
	t.Parallel()
	const subject = "person-paused"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	s.Publish(subject, 1)
	waitInOrder(t, s, subject, 60*time.Second, 1)
	pause := workflows.ControlSignal{Actor: "e2e-operator", Reason: "investigating"}
	if res := keyUpdate(t, c, id, workflows.UpdatePause, pause); !res.Changed {
		t.Fatalf("pause changed nothing: %+v", res)
	}
	if !keyPausedRow(t, s, subject) {
		t.Fatal("the pause wrote no paused_keys row")
	}
	old := terminate(t, c, id)

	holdsE2PausedUntilResumed(t, s, c, subject, old, "a new run")
	for action, want := range map[string]int{workflows.AuditDeliveryPaused: 1, workflows.AuditDeliveryResumed: 1} {
		if rows := auditOf(t, s, id, action); len(rows) != want || rows[0].Actor != "e2e-operator" {
			t.Fatalf("%s audit rows of %s: %+v; want %d by e2e-operator", action, id, rows, want)
		}
	}

	// A pause the running run never learnt of (as a terminated run's late
	// write leaves one): a resume deletes it all the same.
	if _, err := s.Svc.Store.Pool.Exec(context.Background(),
		`INSERT INTO paused_keys (subscription_id, subject) VALUES ($1, $2)`, system.BillingSub, subject); err != nil {
		t.Fatal(err)
	}
	if res := keyUpdate(t, c, id, workflows.UpdateResume, workflows.ControlSignal{Actor: "e2e-operator", Reason: "stale"}); !res.Changed {
		t.Fatalf("resume of a pause only the rows hold changed nothing: %+v", res)
	}
	if keyPausedRow(t, s, subject) {
		t.Fatal("the resume left the pause only the rows held")
	}
	if res := keyUpdate(t, c, id, workflows.UpdateResume, workflows.ControlSignal{Actor: "e2e-operator"}); res.Changed || res.Reason != "not_paused" {
		t.Fatalf("resume of a key paused nowhere answered %+v, want not_paused", res)
	}
	if path := os.Getenv("HERALD_RECORD_PAUSED_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResetToBeforeAPauseStaysPaused: a reset to before an operator's
// pause, with the pause not reapplied, leaves a run that does not know of
// it; the key's paused_keys row still does. The next event's delivery
// reads the row, POSTs nothing and holds the key paused until the
// operator resumes it.
//
// HERALD_RECORD_ROWS_PAUSE_HISTORY names a file to write the reset run's
// history to, for the replay test:
//
//	HERALD_RECORD_ROWS_PAUSE_HISTORY=$PWD/workflows/testdata/delivery-history-rows-pause.json go test ./e2e -run ResetToBeforeAPause
func TestResetToBeforeAPauseStaysPaused(t *testing.T) {
	t.Parallel()
	const subject = "person-reset-paused"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	s.Publish(subject, 1)
	waitInOrder(t, s, subject, 60*time.Second, 1)
	if res := keyUpdate(t, c, id, workflows.UpdatePause, workflows.ControlSignal{Actor: "e2e-operator"}); !res.Changed {
		t.Fatalf("pause changed nothing: %+v", res)
	}
	if !keyPausedRow(t, s, subject) {
		t.Fatal("the pause wrote no paused_keys row")
	}
	d, err := c.DescribeWorkflow(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	old := d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	events, err := historyEvents(c, id, old)
	if err != nil {
		t.Fatal(err)
	}
	// The last workflow task completed before the pause was accepted.
	var point int64
	for _, e := range events {
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
			break
		}
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			point = e.GetEventId()
		}
	}
	if point == 0 {
		t.Fatalf("no workflow task completed before the pause in %d events", len(events))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.WorkflowService().ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 s.Cfg.TemporalNamespace,
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: id, RunId: old},
		Reason:                    "e2e: reset to before the pause",
		WorkflowTaskFinishEventId: point,
		RequestId:                 uuid.NewString(),
		ResetReapplyExcludeTypes: []enumspb.ResetReapplyExcludeType{
			enumspb.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL, enumspb.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE},
	}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyValue(t, 30*time.Second, "the reset run to know of no pause", func() (string, bool) {
		st, ok := newRunState(c, id, old)
		return runSummary(st, ok), ok && !st.KeyPaused
	})
	if !keyPausedRow(t, s, subject) {
		t.Fatal("the reset deleted the paused_keys row")
	}

	holdsE2PausedUntilResumed(t, s, c, subject, old, "the reset run")
	if path := os.Getenv("HERALD_RECORD_ROWS_PAUSE_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPauseThenResumeDuringARetry: a pause and a resume signalled while
// the key's head is being retried apply in the order they came (the pause
// waits for the attempt under way, and the resume behind it), so the key
// ends resumed, in its run and in paused_keys, and the head is delivered.
//
// HERALD_RECORD_ORDER_HISTORY names a file to write the key's history to,
// for the replay test (its ops-in-order marker):
//
//	HERALD_RECORD_ORDER_HISTORY=$PWD/workflows/testdata/delivery-history-ops-in-order.json go test ./e2e -run PauseThenResumeDuringARetry
func TestPauseThenResumeDuringARetry(t *testing.T) {
	t.Parallel()
	const subject = "person-order"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s := system.Start(t, system.Schedule(2*time.Second, 2*time.Second, 2*time.Second))
	s.Apply()
	c := s.Dial()
	var mu sync.Mutex
	posts := 0
	s.Sub.SetReject(func(app, subj string, n int) error {
		if app != "billing" || subj != subject {
			return nil
		}
		mu.Lock()
		posts++
		nth := posts
		mu.Unlock()
		switch nth {
		case 1:
			return errors.New("not yet")
		case 2:
			// During the retry's POST.
			ctx := context.Background()
			for _, name := range []string{workflows.SignalPause, workflows.SignalResume} {
				if err := c.SignalWorkflow(ctx, id, "", name, workflows.ControlSignal{Actor: "e2e-operator"}); err != nil {
					t.Errorf("signal %s: %v", name, err)
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		return nil
	})
	e1 := s.Publish(subject, 1)
	testkit.EventuallyValue(t, 60*time.Second, "the key resumed, with e1 delivered", func() (string, bool) {
		st, ok := keyState(c, id)
		o := outcomeStatus(t, s, system.BillingSub, e1.ID)
		return fmt.Sprintf("%s; e1's row %q", runSummary(st, ok), o),
			ok && !st.KeyPaused && st.Status == workflows.StatusIdle && o == store.EventDelivered &&
				len(auditOf(t, s, id, workflows.AuditDeliveryResumed)) == 1
	})
	if keyPausedRow(t, s, subject) {
		t.Fatal("a pause then a resume left the key's paused_keys row")
	}
	if n := len(auditOf(t, s, id, workflows.AuditDeliveryPaused)); n != 1 {
		t.Fatalf("%d delivery.paused rows, want 1", n)
	}
	if path := os.Getenv("HERALD_RECORD_ORDER_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// keyUpdate runs an operator Update on a key's workflow and returns its answer.
func keyUpdate(t *testing.T, c client.Client, id, name string, payload any) workflows.OpResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: []any{payload},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		t.Fatalf("%s %s: %v", name, id, err)
	}
	var res workflows.OpResult
	if err := h.Get(ctx, &res); err != nil {
		t.Fatalf("%s %s: %v", name, id, err)
	}
	return res
}

// holdsE2PausedUntilResumed publishes the key's event 2 and checks that
// the key's run other than old (which names it in messages) holds it
// paused, delivers nothing and leaves its row queued, and that the
// operator's resume then delivers it after event 1 and deletes the key's
// paused_keys row.
func holdsE2PausedUntilResumed(t *testing.T, s *system.System, c client.Client, subject, old, which string) {
	t.Helper()
	id := workflows.DeliveryID(system.BillingSub, subject)
	e2 := s.Publish(subject, 2)
	testkit.EventuallyValue(t, 60*time.Second, which+" to hold e2 paused", func() (string, bool) {
		st, ok := newRunState(c, id, old)
		return runSummary(st, ok), ok && st.Status == workflows.StatusPaused && st.KeyPaused &&
			st.Head != nil && st.Head.EventID == e2.ID
	})
	// Longer than the first attempt of an unpaused key takes here.
	time.Sleep(3 * time.Second)
	if got := s.Sub.Ns("billing", subject); !slices.Equal(got, []int{1}) {
		t.Fatalf("billing received %v of %s while the key was paused, want [1]", got, subject)
	}
	if o := outcomeStatus(t, s, system.BillingSub, e2.ID); o != store.EventQueued {
		t.Fatalf("e2's outcome row is %q while paused, want queued", o)
	}
	if res := keyUpdate(t, c, id, workflows.UpdateResume, workflows.ControlSignal{Actor: "e2e-operator", Reason: "done"}); !res.Changed {
		t.Fatalf("resume changed nothing: %+v", res)
	}
	waitInOrder(t, s, subject, 60*time.Second, 1, 2)
	wantOutcomes(t, s, store.EventDelivered, e2.ID)
	if keyPausedRow(t, s, subject) {
		t.Fatal("the resume left the paused_keys row")
	}
}

// keyPausedRow reports whether billing's key subject has a paused_keys row.
func keyPausedRow(t *testing.T, s *system.System, subject string) bool {
	t.Helper()
	var paused bool
	if err := s.Svc.Store.Pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM paused_keys WHERE subscription_id = $1 AND subject = $2)`,
		system.BillingSub, subject).Scan(&paused); err != nil {
		t.Fatal(err)
	}
	return paused
}

// TestForgedEventSignalLosesNothing: one forged event signal naming 5,000
// events that do not exist does not crowd the key's genuine events out of
// its queue, and is audited as one rejected signal, not 5,000 rows.
func TestForgedEventSignalLosesNothing(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	ctx := context.Background()
	const subject = "person-forged"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s.Publish(subject, 1)
	// The kit's idle timeout is the default 10 minutes: the key's workflow
	// keeps running, idle, after its first event.
	testkit.Eventually(t, 60*time.Second, "the key to deliver its first event and go idle", func() bool {
		return s.Sub.Count("billing", subject) == 1 && status(c, id) == workflows.StatusIdle
	})

	const forged = 5000
	sig := workflows.EventSignal{Events: make([]workflows.Event, forged)}
	for i := range sig.Events {
		sig.Events[i] = workflows.Event{ID: uuid.NewString(), Seq: 1<<50 + int64(i)}
	}
	if err := c.SignalWorkflow(ctx, id, "", workflows.SignalEvent, sig); err != nil {
		t.Fatal(err)
	}
	var genuine []string
	want := []int{1}
	for n := 2; n <= 21; n++ {
		genuine = append(genuine, s.Publish(subject, n).ID)
		want = append(want, n)
	}
	waitInOrder(t, s, subject, 60*time.Second, want...)
	wantOutcomes(t, s, store.EventDelivered, genuine...)

	// Whatever the key made of the forged events, it is done with them once
	// it is idle with nothing queued.
	testkit.EventuallyValue(t, 60*time.Second, "the key to be idle with nothing queued", func() (string, bool) {
		st, ok := keyState(c, id)
		return runSummary(st, ok), ok && st.Status == workflows.StatusIdle && st.Head == nil
	})
	// The contract: one delivery.signal_rejected row for the one signal,
	// with the number of events it named as metadata "count".
	rows := testkit.EventuallyValue(t, 30*time.Second, "the forged signal's delivery.signal_rejected row", func() ([]store.AuditRow, bool) {
		rows := auditOf(t, s, "", workflows.AuditSignalRejected)
		return rows, len(rows) > 0
	})
	var total int
	if err := s.Svc.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM audit WHERE action = $1`, workflows.AuditSignalRejected).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 1 || rows[0].TargetID != id || !metaHas(t, rows[0], "count", float64(forged)) {
		t.Fatalf("%d delivery.signal_rejected rows (first: target %s, metadata %.300s); want one about %s with count %d",
			total, rows[0].TargetID, rows[0].Metadata, id, forged)
	}
	if f := s.Sub.VerificationFailures(); len(f) != 0 {
		t.Fatalf("deliveries failed verification: %+v", f)
	}
}

// TestHandStartedWorkflowUsesWorkerSettings: a key's workflow started by
// hand, before the relay starts it, with settings that would expire every
// event at once and time every POST out, delivers with the worker's
// settings instead.
func TestHandStartedWorkflowUsesWorkerSettings(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	ctx := context.Background()
	const subject = "person-hand"
	id := workflows.DeliveryID(system.BillingSub, subject)
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
		workflows.DeliveryWorkflowType, workflows.Params{
			SubscriptionID: system.BillingSub, SubscriberApp: "billing", EventType: system.PersonUpdated, SubjectKey: subject,
			DeliveryTimeout: 1, HoldExpiry: 1, IdleTimeout: time.Hour, RetrySchedule: []time.Duration{time.Nanosecond},
		}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for n := 1; n <= 5; n++ {
		ids = append(ids, s.Publish(subject, n).ID)
	}
	testkit.Eventually(t, 60*time.Second, "the 5 events to be delivered", func() bool {
		for n, eid := range ids {
			if st := outcomeStatus(t, s, system.BillingSub, eid); st == store.EventExpired || st == store.EventFailed {
				t.Fatalf("event %d is %s under the hand-started workflow's settings (arrivals %v)", n+1, st, s.Sub.Ns("billing", subject))
			}
		}
		return s.Sub.Count("billing", subject) >= 5
	})
	waitInOrder(t, s, subject, time.Second, 1, 2, 3, 4, 5)
	wantOutcomes(t, s, store.EventDelivered, ids...)
	for _, r := range auditOf(t, s, "", "") {
		if r.ErrorCode == "retention_expired" {
			t.Fatalf("audit row %s of %s: retention_expired", r.Action, r.TargetID)
		}
	}
}

// TestInvalidSignalWritesNothing: operator signals are checked like the
// Updates of the same names. One with a 1 MiB reason (or a forged actor)
// writes nothing and changes nothing, and the workflow keeps running.
func TestInvalidSignalWritesNothing(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	ctx := context.Background()
	const subject = "person-sig"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s.Publish(subject, 1)
	testkit.Eventually(t, 60*time.Second, "the key to deliver its first event and go idle", func() bool {
		return s.Sub.Count("billing", subject) == 1 && status(c, id) == workflows.StatusIdle
	})

	huge := strings.Repeat("r", 1<<20)
	if err := c.SignalWorkflow(ctx, id, "", workflows.SignalPause,
		workflows.ControlSignal{Actor: "x\nforged actor", Reason: huge}); err != nil {
		t.Fatal(err)
	}
	if err := c.SignalWorkflow(ctx, id, "", workflows.SignalRedeliver,
		workflows.RedeliverSignal{Actor: "e2e", Reason: huge}); err != nil {
		t.Fatal(err)
	}
	s.Publish(subject, 2)
	// An audit row the signals wrote fails the test at once. A bounded
	// delivery.signal_rejected row about them would be allowed: the
	// contract only forbids the actions' own rows and their text.
	written := func() {
		for _, r := range auditOf(t, s, id, "") {
			if r.Action == workflows.AuditDeliveryPaused || r.Action == workflows.AuditDeliveryRedelivered ||
				strings.Contains(r.Actor, "forged") || len(r.Metadata) > 10_000 {
				t.Fatalf("an invalid signal wrote an audit row: %s %s by %q, %d bytes of metadata", r.Action, r.Outcome, r.Actor, len(r.Metadata))
			}
		}
	}
	testkit.Eventually(t, 60*time.Second, "the key's second event", func() bool {
		written()
		if st, ok := keyState(c, id); ok && st.KeyPaused {
			t.Fatalf("an invalid pause signal paused the key")
		}
		return s.Sub.Count("billing", subject) >= 2
	})
	waitInOrder(t, s, subject, time.Second, 1, 2)
	written()
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.RawResponse.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the key's workflow is %v after the invalid signals, want running", st)
	}
}

// TestHeadRedeliverRestartsHoldClock: an operator's redeliver of a held
// head gives it a new hold expiry from the redeliver on, so a head that
// fails again is not dropped at the expiry of its first queueing.
func TestHeadRedeliverRestartsHoldClock(t *testing.T) {
	t.Parallel()
	const hold = 20 * time.Second
	s := system.Start(t, system.Config(func(c *config.Worker) { c.HoldExpiry = hold }))
	s.Apply()
	c := s.Dial()
	const subject = "person-hold"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s.Sub.SetReject(func(app, subj string, n int) error {
		if app == "billing" && subj == subject {
			return subscriber.Reject(fmt.Errorf("event %d does not fit", n))
		}
		return nil
	})
	queued := time.Now()
	e1 := s.Publish(subject, 1)
	at := func(f float64) time.Time { return queued.Add(time.Duration(f * float64(hold))) }
	testkit.Eventually(t, time.Until(at(0.5)), "e1 to be held failed", func() bool {
		return status(c, id) == workflows.StatusFailed && outcomeStatus(t, s, system.BillingSub, e1.ID) == store.EventFailed
	})
	time.Sleep(time.Until(at(0.6)))
	if res := redeliverHead(t, c, id, "e2e-operator", "try again"); !res.Changed {
		t.Fatalf("redeliver of the held head changed nothing: %+v", res)
	}
	redelivered := time.Now()

	// Still refused: the head fails again and is held past its first expiry.
	expired := func() bool {
		if outcomeStatus(t, s, system.BillingSub, e1.ID) == store.EventExpired {
			return true
		}
		for _, r := range auditOf(t, s, id, workflows.AuditDeliveryCancelled) {
			if r.ErrorCode == "retention_expired" {
				return true
			}
		}
		return false
	}
	for time.Now().Before(at(1.3)) {
		if expired() {
			t.Fatalf("e1 expired %v after it was first queued, %v after the redeliver: the redeliver did not restart its hold clock (hold expiry %v)",
				time.Since(queued).Round(100*time.Millisecond), time.Since(redelivered).Round(100*time.Millisecond), hold)
		}
		time.Sleep(testkit.Interval)
	}
	if st := outcomeStatus(t, s, system.BillingSub, e1.ID); st != store.EventFailed {
		t.Fatalf("e1 is %s at 1.3 × the hold expiry, want failed (held)", st)
	}
	// It expires a hold expiry after the redeliver.
	testkit.Eventually(t, time.Until(redelivered.Add(hold+20*time.Second)), "e1 to expire a hold expiry after the redeliver", expired)
	if since := time.Since(redelivered); since < hold-time.Second {
		t.Fatalf("e1 expired %v after the redeliver, before the hold expiry %v", since, hold)
	}
	if n := s.Sub.Count("billing", subject); n != 0 {
		t.Fatalf("the refused event arrived %d times", n)
	}
}

// terminate terminates the current run of a key's workflow and returns its
// run id once the server reports it terminated.
func terminate(t *testing.T, c client.Client, id string) string {
	t.Helper()
	return system.Terminate(t, c, id)
}

// keyState is the state query's answer of a key's current run.
func keyState(c client.Client, id string) (workflows.State, bool) {
	var st workflows.State
	v, err := c.QueryWorkflow(context.Background(), id, "", workflows.QueryState)
	return st, err == nil && v.Get(&st) == nil
}

// newRunState is the state of a key's running run other than old.
func newRunState(c client.Client, id, old string) (workflows.State, bool) {
	d, err := c.DescribeWorkflow(context.Background(), id, "")
	if err != nil {
		return workflows.State{}, false
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	if info.GetExecution().GetRunId() == old || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return workflows.State{}, false
	}
	return keyState(c, id)
}

// runSummary describes a run's state for a failure message.
func runSummary(st workflows.State, ok bool) string {
	if !ok {
		return "no new run answers the state query"
	}
	head := "none"
	if st.Head != nil {
		head = fmt.Sprintf("%s (attempt %d, code %q)", st.Head.EventID, st.Head.Attempt, st.Head.Code)
	}
	return fmt.Sprintf("run status %s, head %s, %d queued behind it", st.Status, head, len(st.Queued))
}

// redeliverHead redelivers a key's head the way starter redeliver
// --subscription --subject does: the Update with no event id.
func redeliverHead(t *testing.T, c client.Client, id, actor, reason string) workflows.OpResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: workflows.UpdateRedeliver,
		Args:         []any{workflows.RedeliverSignal{Actor: actor, Reason: reason}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		t.Fatalf("redeliver %s: %v", id, err)
	}
	var res workflows.OpResult
	if err := h.Get(ctx, &res); err != nil {
		t.Fatalf("redeliver %s: %v", id, err)
	}
	return res
}

// noArrivalYet fails the test if billing received any event of subject.
func noArrivalYet(t *testing.T, s *system.System, subject, why string) {
	t.Helper()
	if got := s.Sub.Ns("billing", subject); len(got) > 0 {
		t.Fatalf("billing received %v of %s although %s: a later event overtook e1", got, subject, why)
	}
}

// waitInOrder waits until billing received as many events of subject as
// want and checks they are exactly want, in that order, each once.
func waitInOrder(t *testing.T, s *system.System, subject string, timeout time.Duration, want ...int) {
	t.Helper()
	got := testkit.EventuallyValue(t, timeout, fmt.Sprintf("billing to receive %v of %s", want, subject), func() ([]int, bool) {
		got := s.Sub.Ns("billing", subject)
		if !slices.Equal(got, want[:min(len(got), len(want))]) {
			t.Fatalf("billing received %v of %s, want %v in that order", got, subject, want)
		}
		return got, len(got) >= len(want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("billing received %v of %s, want %v in that order, each once", got, subject, want)
	}
}

// outcomeStatus is the status of an event's outcome row for a subscription
// ("" when there is none).
func outcomeStatus(t *testing.T, s *system.System, sub, eventID string) string {
	t.Helper()
	rows, err := s.Svc.Store.EventOutcomes(context.Background(), eventID)
	if err != nil {
		t.Fatalf("outcomes of %s: %v", eventID, err)
	}
	for _, r := range rows {
		if r.SubscriptionID == sub {
			return r.Status
		}
	}
	return ""
}

// wantOutcomes checks that billing's outcome rows of ids all have status.
//
// The outcome row is written after the POST's answer, so a test that saw the
// arrival waits a little for it (up to 10 s) rather than racing the write.
func wantOutcomes(t *testing.T, s *system.System, status string, ids ...string) {
	t.Helper()
	for i, id := range ids {
		var got string
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got = outcomeStatus(t, s, system.BillingSub, id); got == status || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got != status {
			t.Fatalf("outcome of event %s (#%d given): %q, want %q", id, i+1, got, status)
		}
	}
}

// auditOf lists up to 1000 audit rows about target with action, newest
// first; an empty target or action matches any.
func auditOf(t *testing.T, s *system.System, target, action string) []store.AuditRow {
	t.Helper()
	rows, err := s.Svc.Store.ListAudit(context.Background(), store.AuditFilter{TargetID: target, Action: action, Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// metaHas reports whether an audit row's metadata holds key with value (a
// JSON number decodes as float64).
func metaHas(t *testing.T, r store.AuditRow, key string, value any) bool {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Metadata, &m); err != nil {
		t.Fatalf("audit row %d metadata: %v", r.ID, err)
	}
	return m[key] == value
}

// TestForgedQuietStartTakesItsUpdateFirst: a key's run started by hand as
// the relay starts a quiet key (DeliverInStartVersion, whose start's read
// may deliver the head), with an operator's pause in the same request
// (Update-With-Start), applies the pause before anything goes, as a run
// that reads first does: its read does not deliver once an Update came.
// The key's event waits for the resume and is delivered once.
// HERALD_RECORD_UPDATE_FIRST_HISTORY names a file to write the forged
// run's history to, once it waits idle: the replay history
// workflows/testdata/delivery-history-update-first.json.
func TestForgedQuietStartTakesItsUpdateFirst(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	t.Cleanup(c.Close)
	ctx := context.Background()
	const subject = "person-forged-quiet"
	id := workflows.DeliveryID(system.BillingSub, subject)
	// A run of a type no worker knows holds the key's id, so the relay
	// signals it instead of starting the key's own; once the event's
	// signal reached it, it is terminated: the key owes its event, and no
	// run of its own has tried it.
	holder, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, "NotADelivery")
	if err != nil {
		t.Fatal(err)
	}
	e1 := s.Publish(subject, 1)
	testkit.Eventually(t, 30*time.Second, "the relay's signal to reach the holder", func() bool {
		events, err := historyEvents(c, id, holder.GetRunID())
		return err == nil && slices.ContainsFunc(events, func(e *historypb.HistoryEvent) bool {
			return e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
		})
	})
	if err := c.TerminateWorkflow(ctx, id, holder.GetRunID(), "make way for a forged start"); err != nil {
		t.Fatal(err)
	}
	if st := outcomeStatus(t, s, system.BillingSub, e1.ID); st != store.EventQueued {
		t.Fatalf("the event's outcome row is %q, want queued", st)
	}

	params := workflows.Params{SubscriptionID: system.BillingSub, SubscriberApp: "billing", EventType: system.PersonUpdated,
		SubjectKey: subject, Version: workflows.DeliverInStartVersion, Quiet: true}
	opts := client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL}
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: c.NewWithStartWorkflowOperation(opts, workflows.DeliveryWorkflowType, params),
		UpdateOptions: client.UpdateWorkflowOptions{UpdateName: workflows.UpdatePause,
			Args: []any{workflows.ControlSignal{Actor: "ann"}}, WaitForStage: client.WorkflowUpdateStageCompleted},
	})
	if err != nil {
		t.Fatal(err)
	}
	var paused workflows.OpResult
	if err := h.Get(ctx, &paused); err != nil || !paused.Changed {
		t.Fatalf("the pause answered %+v, %v; want it applied", paused, err)
	}
	// Long enough for a POST the run's first task made to arrive.
	time.Sleep(2 * time.Second)
	if n := s.Sub.Count("billing", subject); n != 0 {
		t.Fatalf("%d POSTs of a key paused by the Update that came with its start, want none before the resume", n)
	}
	rh, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateResume,
		Args: []any{workflows.ControlSignal{Actor: "ann"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		t.Fatal(err)
	}
	var resumed workflows.OpResult
	if err := rh.Get(ctx, &resumed); err != nil || !resumed.Changed {
		t.Fatalf("the resume answered %+v, %v; want it applied", resumed, err)
	}
	waitInOrder(t, s, subject, 30*time.Second, 1)
	wantOutcomes(t, s, store.EventDelivered, e1.ID)
	if path := os.Getenv("HERALD_RECORD_UPDATE_FIRST_HISTORY"); path != "" {
		// Once the run waits idle: an Update reached it, so it does not
		// end quiet, and its last workflow task has completed.
		testkit.Eventually(t, 30*time.Second, "the forged run to wait idle", func() bool {
			events, err := historyEvents(c, id, "")
			return err == nil && len(events) > 0 && events[len(events)-1].GetEventType() == enumspb.EVENT_TYPE_TIMER_STARTED
		})
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSignalThatDoesNotDecodeIsDropped: an operator's signal whose payload
// does not decode (`temporal workflow signal --name cancel --input
// '{"all":"true"}'`) made the SDK's Receive drop it and wait, inside the
// run's handling of it, for the next cancel that decodes: the run moved no
// more, and an operator's Update of the key waited for it until it timed
// out. The signal is dropped now (CorruptSignalChange, whose marker the
// run records then), and the pause that follows applies.
func TestSignalThatDoesNotDecodeIsDropped(t *testing.T) {
	t.Parallel()
	const subject = "person-undecodable"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s := system.Start(t, system.Schedule(time.Minute))
	s.Apply()
	c := s.Dial()
	s.Sub.SetReject(func(app, subj string, n int) error {
		if app == "billing" && subj == subject {
			return errors.New("not yet")
		}
		return nil
	})
	s.Publish(subject, 1)
	testkit.EventuallyValue(t, 60*time.Second, "the key retrying its head", func() (string, bool) {
		st, ok := keyState(c, id)
		return runSummary(st, ok), ok && st.Status == workflows.StatusRetrying
	})
	ctx := context.Background()
	if err := c.SignalWorkflow(ctx, id, "", workflows.SignalCancel, map[string]any{"all": "true"}); err != nil {
		t.Fatal(err)
	}
	if err := c.SignalWorkflow(ctx, id, "", workflows.SignalResume, map[string]any{"reason": 5}); err != nil {
		t.Fatal(err)
	}
	res := keyUpdate(t, c, id, workflows.UpdatePause, workflows.ControlSignal{Actor: "e2e-operator", Reason: "after a bad signal"})
	if !res.Changed || res.Status != workflows.StatusPaused {
		t.Fatalf("the pause after signals that do not decode: %+v", res)
	}
	events, err := historyEvents(c, id, "")
	if err != nil {
		t.Fatal(err)
	}
	markers := 0
	for _, e := range events {
		if m := e.GetMarkerRecordedEventAttributes(); m.GetMarkerName() == "Version" &&
			strings.Contains(m.GetDetails()["change-id"].String(), workflows.CorruptSignalChange) {
			markers++
		}
	}
	if markers != 1 {
		t.Fatalf("%d %s markers in the key's history, want 1", markers, workflows.CorruptSignalChange)
	}
	if path := os.Getenv("HERALD_RECORD_CORRUPT_SIGNAL_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

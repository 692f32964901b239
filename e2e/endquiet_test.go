package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/workflows"
)

// TestQuietKeyEndsAtOnce: with HERALD_END_QUIET_KEYS a new key's run, which
// the relay starts eagerly and never signals, completes in the workflow task
// that delivered its event: no idle timer, one workflow task, and 6 history
// events, the floor's, with one local activity marker: the start's read of
// the rows, which delivers the event and reads the rows after it
// (workflows.DeliverInStartVersion, DeliverInput.ThenRead). Started bare
// (workflows.BareStartVersion's way), it carries and writes no search
// attributes. The key's next event gets a run of its own, delivered in
// order after the first: back within the relay's hot window, it is started
// as busy and waits idle.
//
// HERALD_RECORD_QUIET_HISTORY names a file to write the first run's history
// to, for the replay test in workflows/:
//
//	HERALD_RECORD_QUIET_HISTORY=$PWD/workflows/testdata/delivery-history-deliver-in-start.json go test ./e2e -run QuietKeyEndsAtOnce
func TestQuietKeyEndsAtOnce(t *testing.T) {
	t.Parallel()
	s := system.Start(t, system.Config(func(c *config.Worker) { c.EndQuietKeys = true }))
	const subject = "quiet-key"
	c, id := oneEventKey(t, s, subject)
	first := testkit.EventuallyValue(t, 30*time.Second, "the key's run to complete", func() (string, bool) {
		d, err := c.DescribeWorkflow(context.Background(), id, "")
		if err != nil || d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			return "", false
		}
		return d.WorkflowExecution.RunID, true
	})
	events, err := historyEvents(c, id, first)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	timers, tasks, markers := 0, 0, 0
	for _, e := range events {
		names = append(names, strings.TrimPrefix(e.GetEventType().String(), "EVENT_TYPE_"))
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			timers++
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			tasks++
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markers++
		}
	}
	if timers != 0 || tasks != 1 || markers != 1 || len(events) != 6 {
		t.Fatalf("the quiet key's run recorded %d events (want 6), %d timers (want 0), %d workflow tasks (want 1), %d markers (want 1):\n%s",
			len(events), timers, tasks, markers, strings.Join(names, "\n"))
	}
	start := events[0].GetWorkflowExecutionStartedEventAttributes()
	if sa := start.GetSearchAttributes().GetIndexedFields(); len(sa) != 0 {
		t.Fatalf("the quiet key's run started with search attributes %v, want none (a bare start)", sa)
	}
	if p, err := decodeParams(start); err != nil || p.Version != workflows.DeliverInStartVersion {
		t.Fatalf("the quiet key's run started with version %d (%v), want DeliverInStartVersion", p.Version, err)
	}
	if path := os.Getenv("HERALD_RECORD_QUIET_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The key comes back within the relay's hot window: its run is started
	// again as busy (Params.Busy), delivers after the first in order, and
	// waits idle for the key's next events.
	s.Publish(subject, 2)
	testkit.Eventually(t, 60*time.Second, "the second event delivered to billing", func() bool {
		return s.Sub.Count("billing", subject) >= 2
	})
	second := testkit.EventuallyValue(t, 30*time.Second, "the key's second run", func() (string, bool) {
		d, err := c.DescribeWorkflow(context.Background(), id, "")
		if err != nil || d.WorkflowExecution.RunID == first {
			return "", false
		}
		return d.WorkflowExecution.RunID, true
	})
	testkit.Eventually(t, 30*time.Second, "the busy run to wait on its idle timer", func() bool {
		return countEvents(t, c, id, second, enumspb.EVENT_TYPE_TIMER_STARTED) == 1
	})
	if d, err := c.DescribeWorkflow(context.Background(), id, second); err != nil || d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the busy run: %v (%v), want it running, idle", d, err)
	}
	if got := s.Sub.Ns("billing", subject); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("billing got events %v of the key, want 1 then 2", got)
	}
	if path := os.Getenv("HERALD_RECORD_BUSY_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIdleRunsCap: past the runs waiting idle a worker's cache holds
// (HERALD_WORKFLOW_CACHE_SIZE, here 2: the first event's keys at billing
// and crm), the relay starts a key with Params.Quiet and its run ends once
// it has delivered, without setting HERALD_END_QUIET_KEYS; the keys
// started before the cap was reached wait idle.
//
// HERALD_RECORD_QUIET_HINT_HISTORY names a file to write the quiet run's
// history to, for the replay test in workflows/:
//
//	HERALD_RECORD_QUIET_HINT_HISTORY=$PWD/workflows/testdata/delivery-history-quiet-hint.json HERALD_RECORD_BUSY_HISTORY=$PWD/workflows/testdata/delivery-history-busy.json go test ./e2e -run 'IdleRunsCap|QuietKeyEndsAtOnce'
func TestIdleRunsCap(t *testing.T) {
	t.Parallel()
	s := system.Start(t, system.Config(func(c *config.Worker) { c.WorkflowCacheSize = 2 }))
	c, idle := oneEventKey(t, s, "before-cap")
	testkit.Eventually(t, 30*time.Second, "the first key's run to wait on its idle timer", func() bool {
		return countEvents(t, c, idle, "", enumspb.EVENT_TYPE_TIMER_STARTED) == 1
	})
	s.Publish("past-cap", 1)
	testkit.Eventually(t, 60*time.Second, "the second key's event delivered to billing", func() bool {
		return s.Sub.Count("billing", "past-cap") >= 1
	})
	quiet := workflows.DeliveryID("billing:contacts.person.updated@1", "past-cap")
	testkit.Eventually(t, 30*time.Second, "the second key's run to complete", func() bool {
		d, err := c.DescribeWorkflow(context.Background(), quiet, "")
		return err == nil && d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	if n := countEvents(t, c, quiet, "", enumspb.EVENT_TYPE_TIMER_STARTED); n != 0 {
		t.Fatalf("the quiet run started %d timers, want none", n)
	}
	if d, err := c.DescribeWorkflow(context.Background(), idle, ""); err != nil || d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the first key's run: %v (%v), want it running, idle", d, err)
	}
	if path := os.Getenv("HERALD_RECORD_QUIET_HINT_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, quiet)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// historyEvents reads a run's history ("" the latest run).
func historyEvents(c client.Client, id, run string) ([]*historypb.HistoryEvent, error) {
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(context.Background(), id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, nil
}

// countEvents counts the events of a type in a run's history ("" the
// latest run).
func countEvents(t *testing.T, c client.Client, id, run string, typ enumspb.EventType) int {
	t.Helper()
	events, err := historyEvents(c, id, run)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.GetEventType() == typ {
			n++
		}
	}
	return n
}

// TestBareStartShowsWhenItWaits: a quiet key's run, started bare, whose
// first attempt fails, shows itself before it waits for its retry: an
// operator's Temporal list finds it retrying by subscription, app and event
// type. Fixed, the subscriber gets the event, and the run ends.
//
// HERALD_RECORD_BARE_RETRY_HISTORY names a file to write the run's history
// to, for the replay test in workflows/:
//
//	HERALD_RECORD_BARE_RETRY_HISTORY=$PWD/workflows/testdata/delivery-history-deliver-in-start-retry.json go test ./e2e -run BareStartShowsWhenItWaits
func TestBareStartShowsWhenItWaits(t *testing.T) {
	t.Parallel()
	// Attempts 2 s apart: the key stays retrying while the test looks.
	s := system.Start(t, system.Config(func(c *config.Worker) { c.EndQuietKeys = true }),
		system.Schedule(slices.Repeat([]time.Duration{2 * time.Second}, 30)...))
	const subject = "bare-retry"
	var fixed atomic.Bool
	s.Sub.SetReject(func(app, subj string, n int) error {
		if app == "billing" && subj == subject && !fixed.Load() {
			return errors.New("not yet")
		}
		return nil
	})
	s.Apply()
	s.Publish(subject, 1)
	c := s.Dial()
	t.Cleanup(c.Close)
	id := workflows.DeliveryID("billing:contacts.person.updated@1", subject)
	query := fmt.Sprintf(`WorkflowId = %q AND HeraldSubscription = "billing:contacts.person.updated@1" AND HeraldApp = "billing" AND HeraldEventType = "contacts.person.updated" AND HeraldStatus = "retrying"`, id)
	testkit.Eventually(t, 60*time.Second, "the bare run listed as retrying by its identity", func() bool {
		resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.Cfg.TemporalNamespace, Query: query})
		return err == nil && len(resp.GetExecutions()) == 1
	})
	events, err := historyEvents(c, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if sa := events[0].GetWorkflowExecutionStartedEventAttributes().GetSearchAttributes().GetIndexedFields(); len(sa) != 0 {
		t.Fatalf("the run started with search attributes %v, want a bare start", sa)
	}
	fixed.Store(true)
	testkit.Eventually(t, 90*time.Second, "the event delivered once fixed", func() bool {
		return s.Sub.Count("billing", subject) >= 1
	})
	testkit.Eventually(t, 30*time.Second, "the run to complete", func() bool {
		d, err := c.DescribeWorkflow(context.Background(), id, "")
		return err == nil && d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	if path := os.Getenv("HERALD_RECORD_BARE_RETRY_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// decodeParams reads a run's input from its start event.
func decodeParams(start *historypb.WorkflowExecutionStartedEventAttributes) (workflows.Params, error) {
	var p workflows.Params
	err := converter.GetDefaultDataConverter().FromPayloads(start.GetInput(), &p)
	return p, err
}

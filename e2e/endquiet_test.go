package e2e_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
)

// TestQuietKeyEndsAtOnce: with HERALD_END_QUIET_KEYS a new key's run, which
// the relay starts eagerly and never signals, completes in the workflow task
// that delivered its event: no idle timer, one workflow task, and 7 history
// events, the floor's 6 and one more local activity marker: the start's read
// of the rows, then the delivery, which reads the rows after it
// (DeliverInput.ThenRead). The key's next event gets a run of its own,
// delivered in order after the first.
//
// HERALD_RECORD_QUIET_HISTORY names a file to write the first run's history
// to, for the replay test in workflows/:
//
//	HERALD_RECORD_QUIET_HISTORY=$PWD/workflows/testdata/delivery-history-end-quiet-read-in-delivery.json go test ./e2e -run QuietKeyEndsAtOnce
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
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(context.Background(), id, first, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
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
	if timers != 0 || tasks != 1 || markers != 2 || len(events) != 7 {
		t.Fatalf("the quiet key's run recorded %d events (want 7), %d timers (want 0), %d workflow tasks (want 1), %d markers (want 2):\n%s",
			len(events), timers, tasks, markers, strings.Join(names, "\n"))
	}
	if path := os.Getenv("HERALD_RECORD_QUIET_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The next event starts a run of its own, after the first in order.
	s.Publish(subject, 2)
	testkit.Eventually(t, 60*time.Second, "the second event delivered to billing", func() bool {
		return s.Sub.Count("billing", subject) >= 2
	})
	testkit.Eventually(t, 30*time.Second, "the second run to complete", func() bool {
		d, err := c.DescribeWorkflow(context.Background(), id, "")
		return err == nil && d.WorkflowExecution.RunID != first &&
			d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	if got := s.Sub.Ns("billing", subject); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("billing got events %v of the key, want 1 then 2", got)
	}
}

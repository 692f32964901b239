package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/workflows"
)

// TestOneEventNewKeyHistory: the commonest key, new with one event, records
// no version marker (the relay starts it at workflows.NoMarkerVersion) and
// writes nothing to Temporal's visibility store: the relay starts it idle
// and its first attempt delivers at once. Its first workflow task records
// at most 7 history events (start, one task, two local activities, the idle
// timer), against the 6 of the least a workflow per key can record (start,
// one task, one local activity, complete).
func TestOneEventNewKeyHistory(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	c, id := oneEventKey(t, s, "new-key-one-event")
	// The task that delivered it completes with an idle timer.
	events := testkit.EventuallyValue(t, 30*time.Second, "the key's first task to complete", func() ([]*historypb.HistoryEvent, bool) {
		evs, err := historyEvents(c, id, "")
		return evs, err == nil && len(evs) > 0 && evs[len(evs)-1].GetEventType() == enumspb.EVENT_TYPE_TIMER_STARTED
	})
	var names []string
	versions, upserts, tasks := 0, 0, 0
	for _, e := range events {
		names = append(names, strings.TrimPrefix(e.GetEventType().String(), "EVENT_TYPE_"))
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if e.GetMarkerRecordedEventAttributes().GetMarkerName() == "Version" {
				versions++
			}
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			upserts++
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			tasks++
		}
	}
	if versions != 0 || upserts != 0 || tasks != 1 || len(events) > 7 {
		t.Fatalf("a one-event new key recorded %d events (want at most 7): %d version markers (want 0), "+
			"%d search attribute upserts (want 0), %d workflow tasks (want 1):\n%s", len(events), versions, upserts, tasks,
			strings.Join(names, "\n"))
	}
	desc, err := c.DescribeWorkflow(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := desc.TypedSearchAttributes.GetKeyword(workflows.SAStatus); status != workflows.StatusIdle {
		t.Fatalf("HeraldStatus %q after the one event went, want idle", status)
	}
}

// oneEventKey applies the fixture manifests, publishes one event of a new
// subject key, waits for billing to get it, and returns a Temporal client
// (closed at the test's end) and the id of billing's workflow of the key.
func oneEventKey(t *testing.T, s *system.System, subject string) (client.Client, string) {
	t.Helper()
	s.Apply()
	s.Publish(subject, 1)
	testkit.Eventually(t, 60*time.Second, "the event delivered to billing", func() bool {
		return s.Sub.Count("billing", subject) >= 1
	})
	c := s.Dial()
	t.Cleanup(c.Close)
	return c, workflows.DeliveryID("billing:contacts.person.updated@1", subject)
}

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// closedRun returns the run id of a workflow once its latest run has
// completed ("" while it runs).
func closedRun(c client.Client, id string) string {
	d, err := c.DescribeWorkflow(context.Background(), id, "")
	if err != nil || d.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		return ""
	}
	return d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// TestReSendAfterCompletionIsNotDelivered: the relay sends events again
// after a crash between signalling and marking them dispatched. Once a key
// has delivered them and its workflow has completed, the relay does not hand
// them to the key again: no new run starts, nothing arrives twice.
func TestReSendAfterCompletionIsNotDelivered(t *testing.T) {
	t.Parallel()
	s := system.Start(t, system.Config(func(c *config.Worker) { c.IdleTimeout = time.Second }))
	s.Apply()
	c := s.Dial()
	for n := 1; n <= 3; n++ {
		s.Publish("person-9", n)
	}
	ids := map[string]string{}
	for _, app := range []string{"billing", "audit-log"} {
		id := workflows.DeliveryID(app+":contacts.person.updated@1", "person-9")
		testkit.Eventually(t, 60*time.Second, app+"'s key to deliver and complete", func() bool {
			ids[id] = closedRun(c, id)
			return s.Sub.Count(app, "person-9") == 3 && ids[id] != ""
		})
	}
	ctx := context.Background()
	// The crash: the events look undispatched again.
	if _, err := s.Svc.Store.Pool.Exec(ctx, `UPDATE events SET state = 'accepted', dispatched_at = NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Svc.Store.Pool.Exec(ctx, `SELECT pg_notify($1, '')`, store.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the relay to dispatch the events again", func() bool {
		lag, err := s.Svc.Store.RelayLag(ctx)
		return err == nil && lag.Undispatched == 0
	})
	for id, run := range ids {
		if got := closedRun(c, id); got != run {
			t.Fatalf("%s: a new run started (%q after %q): a settled event was handed to the key again", id, got, run)
		}
	}
	for _, app := range []string{"billing", "audit-log"} {
		if n := s.Sub.Count(app, "person-9"); n != 3 {
			t.Fatalf("%s received %d deliveries, want 3", app, n)
		}
	}
}

// TestRemovalCancelsHeldKeys: removing a subscription cancels the queue of
// every key of it, a failed one and a paused one alike, with the count and
// subscription_removed, and the keys' workflows end.
func TestRemovalCancelsHeldKeys(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	ctx := context.Background()
	const billing = "billing:contacts.person.updated@1"
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && subject == "person-failed" {
			return subscriber.Reject(fmt.Errorf("event %d does not fit", n))
		}
		return nil
	})
	failedID := workflows.DeliveryID(billing, "person-failed")
	pausedID := workflows.DeliveryID(billing, "person-paused")
	s.Publish("person-paused", 1)
	testkit.Eventually(t, 30*time.Second, "the first event of the paused key", func() bool { return s.Sub.Count("billing", "person-paused") == 1 })
	if err := c.SignalWorkflow(ctx, pausedID, "", workflows.SignalPause, workflows.ControlSignal{Actor: "e2e"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the key to pause", func() bool { return status(c, pausedID) == workflows.StatusPaused })
	for n := 2; n <= 3; n++ {
		s.Publish("person-paused", n)
	}
	for n := 1; n <= 3; n++ {
		s.Publish("person-failed", n)
	}
	testkit.Eventually(t, 30*time.Second, "the failing key to hold", func() bool { return status(c, failedID) == workflows.StatusFailed })

	removed := time.Now()
	billingWithout := &manifest.Manifest{App: "billing", Endpoint: s.SubURL}
	if _, err := s.Svc.Store.ApplyManifest(ctx, billingWithout, "e2e"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{failedID: 3, pausedID: 2} {
		testkit.Eventually(t, 60*time.Second, "the removal to reach "+id, func() bool { return closedRun(c, id) != "" })
		rows, err := s.Svc.Store.ListAudit(ctx, store.AuditFilter{TargetID: id, Action: workflows.AuditDeliveryCancelled})
		if err != nil || len(rows) != 1 || rows[0].ErrorCode != "subscription_removed" ||
			!strings.Contains(string(rows[0].Metadata), fmt.Sprintf(`"count": %d`, want)) {
			t.Fatalf("delivery.cancelled rows of %s: %+v %v", id, rows, err)
		}
	}
	t.Logf("both keys dropped their queues %v after the removal", time.Since(removed).Round(time.Second))
	var held int
	if err := s.Svc.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM outcomes WHERE subscription_id = $1 AND status IN ('queued', 'failed')`,
		billing).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d events of the removed subscription still held (%v)", held, err)
	}
}

func status(c client.Client, id string) string {
	v, err := c.QueryWorkflow(context.Background(), id, "", workflows.QueryState)
	var st workflows.State
	if err != nil || v.Get(&st) != nil {
		return ""
	}
	return st.Status
}

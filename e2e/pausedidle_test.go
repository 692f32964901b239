package e2e_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/workflows"
)

// TestPausedKeyOfRemovedSubscriptionEnds: a paused key that owes nothing
// keeps its run, which holds it paused and shows as paused, through its
// idle periods (workflows.PausedIdleChange); once its subscription is
// removed (which deletes the key's pause, and whose sweep tells only keys
// holding events) the run finds it at its next look and ends, audited as
// a removed subscription's key with no event. Before, it waited for ever.
//
// HERALD_RECORD_PAUSED_IDLE_HISTORY names a file to write the run's
// history to, for the replay test:
//
//	HERALD_RECORD_PAUSED_IDLE_HISTORY=$PWD/workflows/testdata/delivery-history-paused-idle.json go test ./e2e -run PausedKeyOfRemovedSubscriptionEnds
func TestPausedKeyOfRemovedSubscriptionEnds(t *testing.T) {
	t.Parallel()
	const idle = 20 * time.Second
	s := system.Start(t, system.Config(func(c *config.Worker) { c.IdleTimeout = idle }))
	s.Apply()
	c := s.Dial()
	ctx := context.Background()

	const subject = "person-paused-removed"
	id := workflows.DeliveryID(system.BillingSub, subject)
	s.Publish(subject, 1)
	waitInOrder(t, s, subject, 60*time.Second, 1)
	pause := workflows.ControlSignal{Actor: "e2e-operator", Reason: "investigating"}
	if res := keyUpdate(t, c, id, workflows.UpdatePause, pause); !res.Changed {
		t.Fatalf("pause changed nothing: %+v", res)
	}
	time.Sleep(idle + idle/2) // past its first look
	if st, ok := keyState(c, id); !ok || st.Status != workflows.StatusPaused || !st.KeyPaused {
		t.Fatalf("after an idle period the paused key's run answers %s, want it running, paused", runSummary(st, ok))
	}
	if closedRun(c, id) != "" {
		t.Fatal("the paused key's run ended while its subscription was active")
	}

	if _, err := s.Svc.Store.ApplyManifest(ctx, &manifest.Manifest{App: "billing", Endpoint: s.SubURL}, "e2e"); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyValue(t, 2*idle+30*time.Second, "the removed subscription's paused run to end", func() (string, bool) {
		d, err := c.DescribeWorkflow(ctx, id, "")
		if err != nil {
			return err.Error(), false
		}
		return d.Status.String(), d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	rows := auditOf(t, s, id, workflows.AuditDeliveryCancelled)
	if len(rows) != 1 || rows[0].ErrorCode != "subscription_removed" || !strings.Contains(string(rows[0].Metadata), `"count": 0`) {
		t.Fatalf("delivery.cancelled rows of %s: %+v; want one for the removal, of no event", id, rows)
	}
	if path := os.Getenv("HERALD_RECORD_PAUSED_IDLE_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(history(t, s, id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

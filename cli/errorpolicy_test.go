package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"herald/config"
	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/store"
	"herald/workflows"
)

// TestErrorPolicyEndToEnd, with a real worker and Temporal: billing's
// subscription says onFailure skip and maxAttempts 2, so an event it
// rejects is skipped (audited, its row cancelled/skipped_after_failure) and
// the next event of the key is delivered; redeliver brings the skipped one
// back. audit-log's holds, and with re-arming off its failed key shows
// exhausted, which deliveries --status exhausted lists and
// redeliver --all-failed takes.
func TestErrorPolicyEndToEnd(t *testing.T) {
	t.Parallel()
	h := startHerald(t, func(c *config.Worker) { c.MaxRearms = workflows.NoRearms })
	billing := system.Manifest("billing", h.SubURL)
	billing.Subscribes[0].OnFailure, billing.Subscribes[0].MaxAttempts = manifest.OnFailureSkip, 2
	mustRun(t, h.env, "apps", "apply", system.WriteManifestDir(t, billing))

	var fixed atomic.Bool
	h.rejectIf(func(app, subject string, n int) bool { return !fixed.Load() && subject == "s-1" && n == 1 })
	h.publish([]string{"s-1"}, 1, 2)
	h.waitArrivals("billing", "s-1", 2)
	rows := testkit.EventuallyValue(t, 10*time.Second, "delivery.skipped", func() ([]store.AuditRow, bool) {
		rows := h.audit(workflows.AuditDeliverySkipped, billingSub, "s-1")
		return rows, len(rows) > 0
	})
	var meta struct {
		EventID    string `json:"eventId"`
		FailedCode string `json:"failedCode"`
	}
	if err := json.Unmarshal(rows[0].Metadata, &meta); err != nil || len(rows) != 1 || meta.FailedCode != "schema_mismatch" {
		t.Fatalf("delivery.skipped rows %+v (%v)", rows, err)
	}
	r := mustRun(t, h.env, "deliveries", "--log", "--status", "cancelled", "--subject", "s-1", "--json")
	var log struct {
		Deliveries []struct {
			EventID string `json:"eventId"`
			Code    string `json:"code"`
		} `json:"deliveries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &log); err != nil || len(log.Deliveries) != 1 ||
		log.Deliveries[0].EventID != meta.EventID || log.Deliveries[0].Code != store.CodeSkippedAfterFailure {
		t.Fatalf("the log's cancelled deliveries of s-1: %s (%v)", r.stdout, err)
	}

	// The audit-log key holds on the same event, with no re-arm left.
	h.waitListed([]string{"s-1"}, "--status", "exhausted", "--subscription", auditLogSub)
	if st := h.state(auditLogSub, "s-1"); st.Status != workflows.StatusExhausted || st.Head == nil || st.Head.NextAttemptAt != nil {
		t.Fatalf("audit-log's held key: %q head %+v", st.Status, st.Head)
	}
	fixed.Store(true)
	mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--subject", "s-1", "--event", meta.EventID, "--reason", "fixed")
	h.waitArrivals("billing", "s-1", 2, 1)
	mustRun(t, h.env, "redeliver", "--subscription", auditLogSub, "--all-failed", "--reason", "fixed")
	h.waitArrivals("audit-log", "s-1", 1, 2)
	recordHistories(t, h, map[string]string{
		"delivery-history-skip.json":      workflows.DeliveryID(billingSub, "s-1"),
		"delivery-history-exhausted.json": workflows.DeliveryID(auditLogSub, "s-1"),
	})
}

// recordHistories writes the histories of the keys that skipped an event
// and that were exhausted, for the replay test in workflows/, into the
// directory HERALD_RECORD_HISTORY_DIR names:
//
//	HERALD_RECORD_HISTORY_DIR=$PWD/workflows/testdata go test ./cli -run ErrorPolicyEndToEnd
func recordHistories(t *testing.T, h *herald, files map[string]string) {
	dir := os.Getenv("HERALD_RECORD_HISTORY_DIR")
	if dir == "" {
		return
	}
	for name, workflowID := range files {
		recordHistory(t, h, filepath.Join(dir, name), workflowID)
	}
}

func recordHistory(t *testing.T, h *herald, path, workflowID string) {
	out, err := exec.Command(testenv.TemporalCLI(t), "workflow", "show", "--address", h.Cfg.TemporalAddress,
		"--namespace", h.Cfg.TemporalNamespace, "--workflow-id", workflowID, "--output", "json").Output()
	if err != nil {
		t.Fatalf("read history of %s: %v", workflowID, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

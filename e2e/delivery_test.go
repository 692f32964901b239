package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// TestDeliveryEndToEnd publishes events for several keys to two subscribing
// apps, one of which rejects one event of one key: every event arrives
// exactly in per-key order with a verified signature, the failing key holds
// while the others flow, and a real redeliver signal resumes it.
func TestDeliveryEndToEnd(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	const keys, perKey = 5, 20
	fixed := false
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && subject == "person-bad" && n == 3 && !fixed {
			return subscriber.Reject(fmt.Errorf("event %d does not fit", n))
		}
		return nil
	})
	subjects := []string{"person-bad"}
	for k := 1; k < keys; k++ {
		subjects = append(subjects, fmt.Sprintf("person-%d", k))
	}
	for n := 1; n <= perKey; n++ {
		for _, subj := range subjects {
			s.Publish(subj, n)
		}
	}

	testkit.Eventually(t, 90*time.Second, "every healthy key delivered to both apps", func() bool {
		for _, subj := range subjects {
			if s.Sub.Count("audit-log", subj) < perKey {
				return false
			}
			if subj != "person-bad" && s.Sub.Count("billing", subj) < perKey {
				return false
			}
		}
		return s.Sub.Count("billing", "person-bad") >= 2
	})

	c, err := client.Dial(client.Options{HostPort: s.Cfg.TemporalAddress, Namespace: s.Cfg.TemporalNamespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	badID := workflows.DeliveryID("billing:contacts.person.updated@1", "person-bad")
	var st workflows.State
	testkit.Eventually(t, 30*time.Second, "the failing key to hold as failed", func() bool {
		v, err := c.QueryWorkflow(context.Background(), badID, "", workflows.QueryState)
		if err != nil || v.Get(&st) != nil {
			return false
		}
		return st.Status == workflows.StatusFailed
	})
	// Behind the failed head the key owes the rest: in the run's queue, or
	// in its queued rows only when the relay no longer signalled them (a
	// key held on a failed head is not signalled; its run reads the rows
	// when the head resolves).
	var owed int
	if err := s.Svc.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outcomes
		WHERE subscription_id = 'billing:contacts.person.updated@1' AND subject = 'person-bad' AND status IN ('queued', 'failed')`).Scan(&owed); err != nil {
		t.Fatal(err)
	}
	if st.Head == nil || st.Head.Code != "schema_mismatch" || len(st.Queued) > perKey-3 || owed != perKey-2 {
		t.Fatalf("failed key state: head %+v, %d queued, %d rows owed (want %d)", st.Head, len(st.Queued), owed, perKey-2)
	}
	if got := s.Sub.Count("billing", "person-bad"); got != 2 {
		t.Fatalf("billing got %d events of the failed key; only those before the failure may arrive", got)
	}

	// The operator fixes the subscriber and sends a real redeliver signal.
	s.Sub.SetReject(nil)
	if err := c.SignalWorkflow(context.Background(), badID, "", workflows.SignalRedeliver,
		workflows.RedeliverSignal{Actor: "e2e-operator", Reason: "fixed the handler"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the held key to drain after redeliver", func() bool {
		return s.Sub.Count("billing", "person-bad") >= perKey
	})

	for _, app := range []string{"billing", "audit-log"} {
		for _, subj := range subjects {
			got := s.Sub.Arrivals(app, subj)
			if len(got) != perKey {
				t.Errorf("%s/%s: %d deliveries, want %d (no duplicates)", app, subj, len(got), perKey)
				continue
			}
			for i, a := range got {
				if a.N != i+1 {
					t.Errorf("%s/%s: delivery %d carried event #%d: out of order", app, subj, i+1, a.N)
					break
				}
			}
		}
	}
	if f := s.Sub.VerificationFailures(); len(f) != 0 {
		t.Fatalf("deliveries failed verification: %+v", f)
	}

	ctx := context.Background()
	failed, err := s.Svc.Store.ListAudit(ctx, store.AuditFilter{Action: workflows.AuditDeliveryFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].TargetID != badID || failed[0].ErrorCode != "schema_mismatch" {
		t.Fatalf("delivery.failed audit rows: %+v", failed)
	}
	red, err := s.Svc.Store.ListAudit(ctx, store.AuditFilter{Action: workflows.AuditDeliveryRedelivered})
	if err != nil {
		t.Fatal(err)
	}
	if len(red) != 1 || red[0].Actor != "e2e-operator" || red[0].Outcome != "allowed" {
		t.Fatalf("delivery.redelivered audit rows: %+v", red)
	}
	// A later event to the key once it is idle: its first attempt writes no
	// status (workflows.FirstAttemptChange), so the recorded history has
	// that path too.
	testkit.Eventually(t, 30*time.Second, "the drained key to go idle", func() bool {
		v, err := c.QueryWorkflow(context.Background(), badID, "", workflows.QueryState)
		return err == nil && v.Get(&st) == nil && st.Status == workflows.StatusIdle
	})
	s.Publish("person-bad", perKey+1)
	testkit.Eventually(t, 30*time.Second, "the later event of the idle key", func() bool {
		return s.Sub.Count("billing", "person-bad") == perKey+1
	})
	recordHistory(t, s, badID)
	// The event log is the only copy of an event: no history holds its data.
	for _, id := range []string{badID, workflows.DeliveryID("audit-log:contacts.person.updated@1", "person-1")} {
		h := history(t, s, id)
		// A new key's run is started without a signal (relay/start.go);
		// the failed key's later event came by signal.
		if !strings.Contains(h, "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED") ||
			(id == badID && !strings.Contains(h, "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED")) {
			t.Fatalf("history of %s is not one: %.300s", id, h)
		}
		if holdsText(t, h, system.DataMarker) {
			t.Fatalf("history of %s holds event data", id)
		}
	}
	// The check decodes payloads: it would find a body carried in a signal.
	if !holdsText(t, `{"data":"`+base64.StdEncoding.EncodeToString([]byte(`{"n":`+strconv.Quote(system.DataMarker)+`}`))+`"}`, system.DataMarker) {
		t.Fatal("holdsText misses a marker inside a base64 payload")
	}

	lag, err := s.Svc.Store.RelayLag(ctx)
	if err != nil || lag.Undispatched != 0 {
		t.Fatalf("relay lag after the run: %+v, %v", lag, err)
	}
}

// recordHistory writes the workflow's history for the replay test in
// workflows/ when HERALD_RECORD_HISTORY names a file:
//
//	HERALD_RECORD_HISTORY=$PWD/workflows/testdata/delivery-history.json go test ./e2e -run EndToEnd
func recordHistory(t *testing.T, s *system.System, workflowID string) {
	path := os.Getenv("HERALD_RECORD_HISTORY")
	if path == "" {
		return
	}
	if err := os.WriteFile(path, []byte(history(t, s, workflowID)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// holdsText reports whether a JSON document holds text in any string value,
// as it is or base64-decoded (Temporal's JSON keeps payloads in base64).
func holdsText(t *testing.T, doc, text string) bool {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("history is not JSON: %v", err)
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			if strings.Contains(v, text) {
				return true
			}
			b, err := base64.StdEncoding.DecodeString(v)
			return err == nil && strings.Contains(string(b), text)
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// history is a workflow's history as the Temporal CLI prints it in JSON.
func history(t *testing.T, s *system.System, workflowID string) string {
	t.Helper()
	out, err := exec.Command(testenv.TemporalCLI(t), "workflow", "show", "--address", s.Cfg.TemporalAddress,
		"--namespace", s.Cfg.TemporalNamespace, "--workflow-id", workflowID, "--output", "json").Output()
	if err != nil {
		t.Fatalf("read history of %s: %v", workflowID, err)
	}
	return string(out)
}

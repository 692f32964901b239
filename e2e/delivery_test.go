package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/internal/testenv"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// TestDeliveryEndToEnd publishes events for several keys to two subscribing
// apps, one of which rejects one event of one key: every event arrives
// exactly in per-key order with a verified signature, the failing key holds
// while the others flow, and a real redeliver signal resumes it.
func TestDeliveryEndToEnd(t *testing.T) {
	s := start(t, nil)
	s.apply()
	const keys, perKey = 5, 20
	fixed := false
	s.sub.setReject(func(audience, subject string, n int) error {
		if audience == "app:billing" && subject == "person-bad" && n == 3 && !fixed {
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
			s.publish(subj, n)
		}
	}

	waitFor(t, 90*time.Second, "every healthy key delivered to both apps", func() bool {
		for _, subj := range subjects {
			if s.sub.count("audit-log", subj) < perKey {
				return false
			}
			if subj != "person-bad" && s.sub.count("billing", subj) < perKey {
				return false
			}
		}
		return s.sub.count("billing", "person-bad") >= 2
	})

	c, err := client.Dial(client.Options{HostPort: s.cfg.TemporalAddress, Namespace: s.cfg.TemporalNamespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	badID := workflows.DeliveryID("billing:contacts.person.updated@1", "person-bad")
	var st workflows.State
	waitFor(t, 30*time.Second, "the failing key to hold as failed", func() bool {
		v, err := c.QueryWorkflow(context.Background(), badID, "", workflows.QueryState)
		if err != nil || v.Get(&st) != nil {
			return false
		}
		return st.Status == workflows.StatusFailed
	})
	if st.Head == nil || st.Head.Code != "schema_mismatch" || len(st.Queued) != perKey-3 {
		t.Fatalf("failed key state: head %+v, %d queued", st.Head, len(st.Queued))
	}
	if got := s.sub.count("billing", "person-bad"); got != 2 {
		t.Fatalf("billing got %d events of the failed key; only those before the failure may arrive", got)
	}

	// The operator fixes the subscriber and sends a real redeliver signal.
	s.sub.setReject(nil)
	if err := c.SignalWorkflow(context.Background(), badID, "", workflows.SignalRedeliver,
		workflows.RedeliverSignal{Actor: "e2e-operator", Reason: "fixed the handler"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the held key to drain after redeliver", func() bool {
		return s.sub.count("billing", "person-bad") >= perKey
	})

	for _, app := range []string{"billing", "audit-log"} {
		for _, subj := range subjects {
			got := s.sub.arrivals(app, subj)
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
	if f := s.sub.verificationFailures(); len(f) != 0 {
		t.Fatalf("deliveries failed verification: %+v", f)
	}

	ctx := context.Background()
	failed, err := s.svc.Store.ListAudit(ctx, store.AuditFilter{Action: workflows.AuditDeliveryFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].TargetID != badID || failed[0].ErrorCode != "schema_mismatch" {
		t.Fatalf("delivery.failed audit rows: %+v", failed)
	}
	red, err := s.svc.Store.ListAudit(ctx, store.AuditFilter{Action: workflows.AuditDeliveryRedelivered})
	if err != nil {
		t.Fatal(err)
	}
	if len(red) != 1 || red[0].Actor != "e2e-operator" || red[0].Outcome != "allowed" {
		t.Fatalf("delivery.redelivered audit rows: %+v", red)
	}
	recordHistory(t, s, badID)

	lag, err := s.svc.Store.RelayLag(ctx)
	if err != nil || lag.Undispatched != 0 {
		t.Fatalf("relay lag after the run: %+v, %v", lag, err)
	}
}

// recordHistory writes the workflow's history for the replay test in
// workflows/ when HERALD_RECORD_HISTORY names a file:
//
//	HERALD_RECORD_HISTORY=$PWD/workflows/testdata/delivery-history.json go test ./e2e -run EndToEnd
func recordHistory(t *testing.T, s *system, workflowID string) {
	path := os.Getenv("HERALD_RECORD_HISTORY")
	if path == "" {
		return
	}
	out, err := exec.Command(testenv.TemporalCLI(t), "workflow", "show", "--address", s.cfg.TemporalAddress,
		"--namespace", s.cfg.TemporalNamespace, "--workflow-id", workflowID, "--output", "json").Output()
	if err != nil {
		t.Fatalf("read history: %v", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

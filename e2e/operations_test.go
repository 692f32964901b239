package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// TestMetricsMatchDeliveries scrapes /metrics after a run and checks the
// counters against what the subscriber saw.
func TestMetricsMatchDeliveries(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && subject == "k-0" && n == 1 {
			return subscriber.Reject(fmt.Errorf("no"))
		}
		return nil
	})
	for n := 1; n <= 4; n++ {
		for k := 0; k < 3; k++ {
			s.Publish(fmt.Sprintf("k-%d", k), n)
		}
	}
	if _, err := s.Publisher.Publish(context.Background(), system.PersonRequest("k-1", `{"name":1}`)); err == nil {
		t.Fatal("an invalid event was accepted")
	}
	// billing k-0 holds at its first event: 12 + 8 deliveries.
	testkit.Eventually(t, 60*time.Second, "deliveries", func() bool {
		total := 0
		for k := 0; k < 3; k++ {
			total += s.Sub.Count("audit-log", fmt.Sprintf("k-%d", k)) + s.Sub.Count("billing", fmt.Sprintf("k-%d", k))
		}
		return total == 20
	})
	// The worker counts a delivery when the subscriber's answer comes back,
	// a moment after the subscriber recorded it.
	// The delivery series carry subscription and app labels: sums over
	// them are the figures of the whole worker.
	var m scraped
	testkit.Eventually(t, 10*time.Second, "the delivery counters", func() bool {
		m = scrapeMetrics(t, "http://"+s.Svc.Addr()+"/metrics")
		return m.value("herald_deliveries_total") >= 20 &&
			m.value("herald_delivery_attempts_total", "code", "schema_mismatch", "result", "failed") >= 1
	})
	if got := m.value("herald_deliveries_total"); got != 20 {
		t.Errorf("herald_deliveries_total = %v, want 20", got)
	}
	if got := m.value("herald_delivery_attempts_total", "code", "schema_mismatch", "result", "failed"); got != 1 {
		t.Errorf("failed attempts metric = %v, want 1", got)
	}
	if got := m.value("herald_delivery_latency_seconds_count"); got != 20 {
		t.Errorf("latency observations = %v, want 20", got)
	}
	// The relay's lag reaches 0 once it has dispatched everything, the
	// operational event the failed key emitted (herald.key.failed) included.
	testkit.Eventually(t, 10*time.Second, "the relay lag metric to read 0", func() bool {
		lag := scrapeMetrics(t, "http://"+s.Svc.Addr()+"/metrics")
		return lag.has("herald_relay_undispatched_events") && lag.value("herald_relay_undispatched_events") == 0
	})
	if !m.has("go_goroutines") {
		t.Error("runtime metrics missing")
	}
	sdk := 0
	for _, smp := range m {
		if strings.HasPrefix(smp.name, "temporal_") {
			sdk++
		}
	}
	if sdk == 0 {
		t.Error("no Temporal SDK metrics (temporal_*) exported")
	}
}

// TestRetentionSchedule: the worker creates the retention schedule at start
// with the configured interval; a run deletes dispatched events past
// retention, leaves the audit trail alone and adds its own retention.purged
// row to it.
func TestRetentionSchedule(t *testing.T) {
	t.Parallel()
	s := system.Start(t, system.Config(func(c *config.Worker) {
		c.Retention = time.Millisecond
		c.RetentionEvery = 6 * time.Hour
	}))
	s.Apply()
	for n := 1; n <= 3; n++ {
		s.Publish("r-1", n)
	}
	testkit.Eventually(t, 60*time.Second, "deliveries", func() bool { return s.Sub.Count("billing", "r-1") == 3 })
	ctx := context.Background()
	before, err := s.Svc.Store.ListAudit(ctx, store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(client.Options{HostPort: s.Cfg.TemporalAddress, Namespace: s.Cfg.TemporalNamespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.ScheduleClient().GetHandle(ctx, workflows.RetentionScheduleID)
	var desc *client.ScheduleDescription
	testkit.Eventually(t, 20*time.Second, "the retention schedule", func() bool {
		desc, err = h.Describe(ctx)
		return err == nil
	})
	if iv := desc.Schedule.Spec.Intervals; len(iv) != 1 || iv[0].Every != 6*time.Hour {
		t.Fatalf("schedule intervals %+v", iv)
	}
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "retention to delete the dispatched events", func() bool {
		var n int
		err := s.Svc.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n)
		return err == nil && n == 0
	})
	// The trail keeps every row, and gains the run's own retention.purged.
	// (Other rows may arrive meanwhile, such as a subscriber app's
	// app.secret_created before its first delivery: they are not counted.)
	var after []store.AuditRow
	purged := func() int {
		n := 0
		for _, r := range after {
			if r.Action == store.ActionRetentionPurged {
				n++
			}
		}
		return n
	}
	testkit.Eventually(t, 30*time.Second, "the run's audit row", func() bool {
		after, err = s.Svc.Store.ListAudit(ctx, store.AuditFilter{Limit: 1000})
		return err == nil && purged() >= 1
	})
	if n := purged(); n != 1 {
		t.Fatalf("%d retention.purged rows after one run, want 1", n)
	}
	kept := map[int64]bool{}
	for _, r := range after {
		kept[r.ID] = true
	}
	for _, r := range before {
		if !kept[r.ID] {
			t.Errorf("retention deleted audit row %d (%s)", r.ID, r.Action)
		}
	}
}

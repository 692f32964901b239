package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/workflows"
)

// TestHandStartedRetentionKeepsWorkerRetention: a Retention run started by
// hand through Temporal takes its age limit from the worker. With keep = 1ns
// in its input it deletes only what is older than the worker's
// HERALD_RETENTION (48h here); a longer keep is honoured (it is stricter).
// Each run writes exactly one retention.purged audit row with its counts.
func TestHandStartedRetentionKeepsWorkerRetention(t *testing.T) {
	t.Parallel()
	const retention = 48 * time.Hour
	s := system.Start(t, system.Config(func(c *config.Worker) {
		c.Retention = retention
		c.IdleTimeout = time.Second
	}))
	s.Apply()
	ctx := context.Background()
	pool := s.Svc.Store.Pool
	// Two events past the worker's retention, one within it but a day old,
	// one new; each delivered to billing and audit-log.
	s.Publish("person-old", 1)
	s.Publish("person-old", 2)
	s.Publish("person-mid", 1)
	s.Publish("person-new", 1)
	testkit.Eventually(t, 60*time.Second, "8 outcomes delivered", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM outcomes WHERE status = 'delivered'`).Scan(&n)
		return err == nil && n == 8
	})
	age := func(subject string, d time.Duration) {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE events SET received_at = now() - $2::interval,
			dispatched_at = now() - $2::interval WHERE subject = $1`, subject, d.String()); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE outcomes SET queued_at = now() - $2::interval,
			updated_at = now() - $2::interval, delivered_at = now() - $2::interval WHERE subject = $1`,
			subject, d.String()); err != nil {
			t.Fatal(err)
		}
	}
	age("person-old", 72*time.Hour)
	age("person-mid", 24*time.Hour)

	c := s.Dial()
	run := func(id string, keep time.Duration) map[string]any {
		t.Helper()
		wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
			workflows.RetentionWorkflowType, workflows.RetentionParams{Keep: keep})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var res map[string]any
		if err := wr.Get(wctx, &res); err != nil {
			t.Fatalf("retention run %s: %v", id, err)
		}
		return res
	}
	left := func(table string) map[string]int {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT subject, count(*) FROM `+table+` GROUP BY subject`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var subject string
			var n int
			if err := rows.Scan(&subject, &n); err != nil {
				t.Fatal(err)
			}
			out[subject] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// A longer keep than the worker's is stricter: nothing here is that old.
	run("retention-keep-more", 100*time.Hour)
	if ev, oc := left("events"), left("outcomes"); ev["person-old"] != 2 || oc["person-old"] != 4 {
		t.Fatalf("keep=100h removed rows 72h old: events %v, outcomes %v", ev, oc)
	}

	res := run("retention-by-hand", time.Nanosecond)
	ev, oc := left("events"), left("outcomes")
	if ev["person-mid"] != 1 || ev["person-new"] != 1 || oc["person-mid"] != 2 || oc["person-new"] != 2 {
		t.Errorf("keep=1ns removed rows newer than HERALD_RETENTION (%s): left events %v, outcomes %v",
			retention, ev, oc)
	}
	if ev["person-old"] != 0 || oc["person-old"] != 0 {
		t.Errorf("rows older than HERALD_RETENTION survived: events %v, outcomes %v", ev, oc)
	}
	t.Logf("result of the run: %v", res)

	rows, err := s.Svc.Store.ListAudit(ctx, store.AuditFilter{Action: "retention.purged"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("retention.purged audit rows: %d, want one per run (2): %+v", len(rows), rows)
	}
	type purged struct {
		Events, Outcomes int64
		Batches          int
		Clamped          bool
		Cutoff           time.Time
		CutoffRequested  time.Time
	}
	want := map[string]struct {
		events, outcomes int64
		clamped          bool
	}{
		"retention-keep-more": {0, 0, false},
		"retention-by-hand":   {2, 4, true},
	}
	for _, r := range rows {
		w, ok := want[r.TargetID]
		if !ok || r.Actor != store.ActorSystem || r.TargetType != "retention" || r.Outcome != store.OutcomeAllowed {
			t.Errorf("unexpected audit row %+v", r)
			continue
		}
		var m purged
		if err := json.Unmarshal(r.Metadata, &m); err != nil {
			t.Fatal(err)
		}
		if m.Events != w.events || m.Outcomes != w.outcomes || m.Clamped != w.clamped || m.Batches < 1 {
			t.Errorf("%s: metadata %s; want events %d, outcomes %d, clamped %v",
				r.TargetID, r.Metadata, w.events, w.outcomes, w.clamped)
		}
		if m.Cutoff.After(time.Now().Add(-retention)) || m.Cutoff.After(m.CutoffRequested) {
			t.Errorf("%s: applied cutoff %s is later than now - HERALD_RETENTION or the requested %s",
				r.TargetID, m.Cutoff, m.CutoffRequested)
		}
		delete(want, r.TargetID)
	}
}

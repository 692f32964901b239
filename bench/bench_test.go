package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/workflows"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// liveConfig is a benchmark of tiny shapes against the test services, on a
// schema and a namespace of its own, writing its progress to progress.
func liveConfig(t *testing.T, progress *bytes.Buffer) Config {
	t.Helper()
	dbURL := testenv.NewSchema(t)
	addr, ns := testenv.NewNamespace(t)
	return Config{
		DatabaseURL: dbURL, TemporalAddress: addr, Namespace: ns,
		TemporalMetrics: testenv.TemporalMetricsURL(t),
		ModuleRoot:      testenv.RepoRoot(), WorkDir: t.TempDir(),
		Timeout: 90 * time.Second, Grace: 300 * time.Millisecond,
		PublishBatch: 5, // several batches even for tiny shapes
		Progress:     progress,
	}
}

// TestSmoke runs the benchmark's own code path (both ceilings and Herald, the
// worker as a separate process, the sink, a paced run) on tiny shapes against
// the test services, and asserts only correctness: every delivery arrived,
// once, in per-key order. No timing is asserted.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker process and real services")
	}
	var progress bytes.Buffer
	cfg := liveConfig(t, &progress)
	cfg.Shapes = []Shape{
		{Name: "A", Keys: 2, EventsPerKey: 6, Subscriptions: 1},
		{Name: "C", Keys: 3, EventsPerKey: 1, Subscriptions: 2}, // one event per key: the floor too
		{Name: "D", Keys: 3, EventsPerKey: 2, Subscriptions: 3},
		{Name: "F", Keys: 3, EventsPerKey: 2, Subscriptions: 1, HeraldOnly: true}, // a burst: Herald alone
	}
	cfg.Steady = Shape{Name: "steady", Keys: 4, EventsPerKey: 2, Subscriptions: 1, Rate: 10}
	cfg.Batched, cfg.ShapedFloor = true, true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got, want := len(rep.Measurements), 15; got != want {
		t.Fatalf("%d measurements, want %d (ceiling, batched ceiling and Herald for A, C, D, steady; the floor and the shaped floor for C; Herald alone for F)", got, want)
	}
	floors, shaped := 0, 0
	for _, m := range rep.Measurements {
		name := m.System + " " + m.Shape.Name
		if m.Deliveries != m.Shape.Deliveries() || m.Delivered != m.Deliveries {
			t.Errorf("%s: delivered %d of %d (shape expects %d)", name, m.Delivered, m.Deliveries, m.Shape.Deliveries())
		}
		if m.Lost != 0 || m.OutOfOrder != 0 || m.Duplicates != 0 || m.Stray != 0 {
			t.Errorf("%s: lost %d, out of order %d, duplicates %d, stray %d; want all 0",
				name, m.Lost, m.OutOfOrder, m.Duplicates, m.Stray)
		}
		// With the default idle timeout every Herald key's run waits idle
		// once its events are delivered: the bench ends each (endRuns).
		if strings.HasPrefix(m.System, SystemHerald) && (m.RunsEnded != m.Shape.Keys*m.Shape.Subscriptions || m.RunsLeft != 0) {
			t.Errorf("%s: ended %d runs waiting idle and left %d, want one a key and subscription ended (%d)",
				name, m.RunsEnded, m.RunsLeft, m.Shape.Keys*m.Shape.Subscriptions)
		}
		if m.System == SystemHerald && m.WorkerPeakRSSMB <= 0 {
			t.Errorf("%s: no worker peak RSS", name)
		}
		// A few rows may fit pages already allocated: growth may be 0.
		if m.System == SystemHerald && (m.PostgresMB <= 0 || m.PostgresGrowthMB < 0 || m.PostgresMB < m.PostgresGrowthMB) {
			t.Errorf("%s: PostgreSQL size %v MB, grown by %v MB: want a size, and the growth within it",
				name, m.PostgresMB, m.PostgresGrowthMB)
		}
		if m.Shape.HeraldOnly && m.System != SystemHerald {
			t.Errorf("%s: a shape on Herald only measured on %s", name, m.System)
		}
		if m.System == SystemFloor {
			// Started eagerly with the event in its input: no signal, one
			// local activity per event, and Herald's ratio to it is set.
			floors++
			if m.Shape.Name != "C" {
				t.Errorf("%s: the floor runs only on shapes of one event per key", name)
			}
			if a := m.Actions; a == nil || a.Workflows == 0 || a.Signals != 0 || a.LocalActivities != a.Workflows || a.Activities != 0 {
				t.Errorf("%s: want one local activity per workflow and no signal or activity: %+v", name, a)
			}
			continue
		}
		if m.System == SystemShapedFloor {
			// The history of a Herald key the relay starts for one event
			// (e2e.TestOneEventNewKeyHistory): 7 events, no signal, two local
			// activities (the start read, the delivery) in one workflow
			// task, the idle timer, no upsert.
			shaped++
			a := m.Actions
			if a == nil || a.Workflows == 0 || a.HistoryEvents != 7*a.Workflows || a.Signals != 0 || a.Activities != 0 ||
				a.LocalActivities != 2*a.Workflows || a.LocalActivityBatches != a.Workflows || a.Timers != a.Workflows ||
				a.WorkflowTasks != a.Workflows || a.SearchAttributeUpserts != 0 {
				t.Errorf("%s: want per workflow 7 history events, one task, two local activities, one timer, no signal, activity or upsert: %+v", name, a)
			}
			continue
		}
		if m.System == SystemHerald && m.Shape.Name == "C" && (m.RatioFloor <= 0 || m.RatioShapedFloor <= 0) {
			t.Errorf("%s: no ratio to the floor (%v) or to the shaped floor (%v)", name, m.RatioFloor, m.RatioShapedFloor)
		}
		// Herald starts a new key's workflow without a signal (relay/start.go),
		// so a shape of new keys may count none: its history is the count.
		if m.Actions == nil || m.Actions.Workflows == 0 || m.Actions.HistoryEvents == 0 ||
			(m.System != SystemHerald && m.Actions.Signals == 0) {
			t.Errorf("%s: no Temporal actions counted: %+v", name, m.Actions)
			continue
		}
		// Herald makes each first attempt a local activity (every smoke
		// delivery succeeds at once); the ceilings run regular activities.
		if m.System == SystemHerald && m.Actions.LocalActivities == 0 {
			t.Errorf("%s: no local activities counted: %+v", name, m.Actions)
		}
		if m.System != SystemHerald && m.Actions.Activities == 0 {
			t.Errorf("%s: no activities counted: %+v", name, m.Actions)
		}
	}

	checkVisibility(t, cfg, rep)
	if floors != 1 || shaped != 1 {
		t.Errorf("%d floor and %d shaped floor measurements, want 1 each (shape C)", floors, shaped)
	}
	// The shaped floor's runs start with Herald's search attributes, as an
	// idle key of the bench's app (3 keys to 2 subscriptions); the floor's
	// have none.
	c, err := client.Dial(client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testkit.Eventually(t, 30*time.Second, "the shaped floor's 6 runs listed with Herald's search attributes", func() bool {
		n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + FloorWorkflowType + "' AND HeraldApp = 'bench' AND HeraldStatus = 'idle'"})
		return err == nil && n.GetCount() == 6
	})
	// No Herald run is left to wait idle in the namespace: none of a shape's
	// idle timers fires in a later shape.
	testkit.Eventually(t, 30*time.Second, "no Delivery run open in the bench's namespace", func() bool {
		n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + workflows.DeliveryWorkflowType + "' AND ExecutionStatus = 'Running'"})
		return err == nil && n.GetCount() == 0
	})
	closed, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Query: "WorkflowType = '" + workflows.DeliveryWorkflowType + "' AND ExecutionStatus = 'Terminated'"})
	if err != nil || closed.GetCount() == 0 {
		t.Errorf("terminated Delivery runs in the bench's namespace: %d, %v; want the bench's", closed.GetCount(), err)
	}

	dir := t.TempDir()
	var table bytes.Buffer
	if err := writeTables(&table, rep); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"| × floor |", "| × shaped floor |", "| PostgreSQL MB (+ growth) |"} {
		if !strings.Contains(table.String(), col) {
			t.Errorf("the results table has no %s column:\n%s", col, table.String())
		}
	}
	suite := &Suite{Runs: []*Report{rep}}
	if err := writeJSON(filepath.Join(dir, "r.json"), suite); err != nil {
		t.Fatal(err)
	}
	if err := writePNG(filepath.Join(dir, "r.png"), suite); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
}

// checkVisibility: with the server's metrics known (make test and CI give
// them), every measurement counts the visibility writes of the server,
// in windows that follow each other, so the run counts at least the
// shaped floor's 6 start records (its runs stay open) and the floor's 6
// close records (its runs end), both written well before the run's last
// reading. Other tests' workflows on a shared server only add to them.
func checkVisibility(t *testing.T, cfg Config, rep *Report) {
	t.Helper()
	if cfg.TemporalMetrics == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI gives the Temporal server's metrics (TEMPORAL_METRICS_URL, or testenv's own server): none known")
		}
		t.Log("the Temporal server's metrics are not known (TEMPORAL_ADDRESS without TEMPORAL_METRICS_URL): visibility not counted")
		return
	}
	var total Visibility
	for _, m := range rep.Measurements {
		if m.Visibility == nil {
			t.Errorf("%s %s: no visibility writes counted", m.System, m.Shape.Name)
			continue
		}
		if v := m.Visibility; v.Started < 0 || v.Closed < 0 || v.Upserted < 0 || v.Store < 0 || v.ClusterMetadata < 0 || v.ClusterMetadata > v.Store {
			t.Errorf("%s %s: negative visibility counts %+v", m.System, m.Shape.Name, *m.Visibility)
		}
		total = Visibility{Started: total.Started + m.Visibility.Started, Closed: total.Closed + m.Visibility.Closed,
			Upserted: total.Upserted + m.Visibility.Upserted, Store: total.Store + m.Visibility.Store}
	}
	if total.Started < 6 || total.Closed < 6 {
		t.Errorf("the run counted %+v visibility writes, want at least 6 started (the shaped floor's) and 6 closed (the floor's)", total)
	}
	// Each run the floor started was created in the main store: none
	// counted means the store's counter was not read (renamed, or its
	// lines not kept).
	if total.Store < 6 {
		t.Errorf("the run counted %v requests to the server's main store (%s), want at least the floor's 6 runs' creations",
			total.Store, storeCounter)
	}
}

// TestHeraldFirst: with HeraldFirst (every other -repeat run) a shape is
// measured on Herald before its references, and its ratios are still set.
func TestHeraldFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker process and real services")
	}
	var progress bytes.Buffer
	cfg := liveConfig(t, &progress)
	cfg.Shapes = []Shape{{Name: "C", Keys: 3, EventsPerKey: 1, Subscriptions: 1}}
	cfg.HeraldFirst = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	log := progress.String()
	herald, ceiling, floor := strings.Index(log, "herald C: starting"), strings.Index(log, "ceiling C:"), strings.Index(log, "floor C:")
	if herald < 0 || ceiling < 0 || floor < 0 || herald > ceiling || herald > floor {
		t.Errorf("Herald measured at %d of the log, the ceiling at %d, the floor at %d: want Herald first", herald, ceiling, floor)
	}
	var h *Measurement
	for i, m := range rep.Measurements {
		if m.System == SystemHerald {
			h = &rep.Measurements[i]
		}
	}
	if !rep.HeraldFirst {
		t.Error("the report does not say Herald went first")
	}
	if h == nil || h.Ratio <= 0 || h.RatioFloor <= 0 || h.Delivered != 3 {
		t.Fatalf("Herald's measurement %+v: want its 3 deliveries and its ratios to the ceiling and the floor", h)
	}
}

// TestNoisySmoke runs the noisy-neighbour comparison on tiny shapes and
// asserts that it measures what it claims: the healthy deliveries all
// arrive in order alone and beside the neighbours, and the neighbours really
// misbehaved meanwhile (their endpoints were hit, their events published,
// their guessed tokens sent and none accepted). No timing is asserted.
func TestNoisySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes and real services")
	}
	dbURL := testenv.NewSchema(t)
	addr, ns := testenv.NewNamespace(t)
	var progress bytes.Buffer
	cfg := Config{
		DatabaseURL: dbURL, TemporalAddress: addr, Namespace: ns,
		TemporalMetrics: testenv.TemporalMetricsURL(t),
		ModuleRoot:      testenv.RepoRoot(), WorkDir: t.TempDir(), HeraldOnly: true,
		Noisy: []Shape{
			{Name: noisyBurstShape, Keys: 4, EventsPerKey: 3, Subscriptions: noisyFanOut},
			{Name: noisyPacedShape, Keys: 3, EventsPerKey: 3, Subscriptions: noisyFanOut, Rate: 5},
		},
		NeighbourLoad: neighbourLoad{Rate: 10, Keys: 3, Guessers: 2, GuessRate: 20},
		Timeout:       90 * time.Second,
		Grace:         300 * time.Millisecond,
		Progress:      &progress,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got, want := len(rep.Measurements), 8; got != want {
		t.Fatalf("%d measurements, want %d (NB and NP alone, alone again, beside the calm neighbours, then the misbehaving ones)", got, want)
	}
	for i, m := range rep.Measurements {
		name := m.System + " " + m.Shape.Name
		wantSystem := []string{SystemAlone, SystemAloneAgain, SystemCalm, SystemNeighbours}[i/2]
		if m.System != wantSystem {
			t.Errorf("measurement %d is %q, want %q", i, m.System, wantSystem)
		}
		if m.Delivered != m.Deliveries || m.Lost != 0 || m.OutOfOrder != 0 || m.Duplicates != 0 || m.Stray != 0 {
			t.Errorf("%s: delivered %d of %d, lost %d, out of order %d, duplicates %d, stray %d",
				name, m.Delivered, m.Deliveries, m.Lost, m.OutOfOrder, m.Duplicates, m.Stray)
		}
		if m.System == SystemAlone || m.System == SystemAloneAgain {
			if m.Neighbours != nil {
				t.Errorf("%s: neighbour figures on a measurement alone", name)
			}
			if m.System == SystemAloneAgain && (m.AloneRatio <= 0 || m.AloneP99Ratio <= 0) {
				t.Errorf("%s: ratios to the first measurement alone not computed: %v, %v", name, m.AloneRatio, m.AloneP99Ratio)
			}
			continue
		}
		if m.AloneRatio <= 0 || m.AloneP99Ratio <= 0 {
			t.Errorf("%s: ratios to alone not computed: %v, %v", name, m.AloneRatio, m.AloneP99Ratio)
		}
		n := m.Neighbours
		if n == nil {
			t.Fatalf("%s: no neighbour figures", name)
		}
		for _, typ := range []string{"slow", "fail", "heavy"} {
			if n.Published[typ] == 0 {
				t.Errorf("%s: the neighbours published no %s events: %+v", name, typ, n.Published)
			}
		}
		for _, app := range []string{noisySlowApp, noisyFailApp} {
			if n.Received[app] == 0 {
				t.Errorf("%s: neighbour endpoint %s got no POST: %+v", name, app, n.Received)
			}
		}
		if m.System == SystemCalm {
			if len(n.TokenGuesses) != 0 {
				t.Errorf("%s: token guesses beside the calm neighbours: %v", name, n.TokenGuesses)
			}
			continue
		}
		guesses := 0
		for status, c := range n.TokenGuesses {
			guesses += c
			if status != "401" && status != "429" {
				t.Errorf("%s: %d token guesses answered %s, want only 401 or 429", name, c, status)
			}
		}
		if guesses == 0 {
			t.Errorf("%s: no token guesses sent", name)
		}
	}
	var table bytes.Buffer
	if err := writeTables(&table, rep); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(table.Bytes(), []byte("beside deliveries/s")) {
		t.Errorf("no noisy-neighbour table in:\n%s", table.String())
	}
	t.Log("\n" + table.String())
}

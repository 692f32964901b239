package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSmoke runs the benchmark's own code path (both ceilings and Herald, the
// worker as a separate process, the sink, a paced run) on tiny shapes against
// the test services, and asserts only correctness: every delivery arrived,
// once, in per-key order. No timing is asserted.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker process and real services")
	}
	dbURL := testenv.NewSchema(t)
	addr, ns := testenv.NewNamespace(t)
	var progress bytes.Buffer
	cfg := Config{
		DatabaseURL: dbURL, TemporalAddress: addr, Namespace: ns,
		ModuleRoot: testenv.RepoRoot(), WorkDir: t.TempDir(),
		Shapes: []Shape{
			{Name: "A", Keys: 2, EventsPerKey: 6, Subscriptions: 1},
			{Name: "D", Keys: 3, EventsPerKey: 2, Subscriptions: 3},
		},
		Steady:       Shape{Name: "steady", Keys: 4, EventsPerKey: 2, Subscriptions: 1, Rate: 10},
		Timeout:      90 * time.Second,
		Grace:        300 * time.Millisecond,
		PublishBatch: 5, // several batches even for tiny shapes
		Batched:      true,
		Progress:     &progress,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got, want := len(rep.Measurements), 9; got != want {
		t.Fatalf("%d measurements, want %d (ceiling, batched ceiling and Herald for A, D, steady)", got, want)
	}
	for _, m := range rep.Measurements {
		name := m.System + " " + m.Shape.Name
		if m.Deliveries != m.Shape.Deliveries() || m.Delivered != m.Deliveries {
			t.Errorf("%s: delivered %d of %d (shape expects %d)", name, m.Delivered, m.Deliveries, m.Shape.Deliveries())
		}
		if m.Lost != 0 || m.OutOfOrder != 0 || m.Duplicates != 0 || m.Stray != 0 {
			t.Errorf("%s: lost %d, out of order %d, duplicates %d, stray %d; want all 0",
				name, m.Lost, m.OutOfOrder, m.Duplicates, m.Stray)
		}
		if m.System == SystemHerald && m.WorkerPeakRSSMB <= 0 {
			t.Errorf("%s: no worker peak RSS", name)
		}
		if m.Actions == nil || m.Actions.Workflows == 0 || m.Actions.Signals == 0 {
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

	dir := t.TempDir()
	var table bytes.Buffer
	if err := writeTables(&table, rep); err != nil {
		t.Fatal(err)
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

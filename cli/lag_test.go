package cli

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"herald/internal/testenv"
	"herald/service"
)

// TestStatusLagWhileWorkerStopped: with no worker running, accepted events
// wait in the outbox and status reports them; once a worker starts, its
// relay catches up and status reports zero.
func TestStatusLagWhileWorkerStopped(t *testing.T) {
	t.Parallel()
	cfg := testenv.WorkerConfig(t)
	e := env{"HERALD_DATABASE_URL": cfg.DatabaseURL, "TEMPORAL_ADDRESS": cfg.TemporalAddress,
		"TEMPORAL_NAMESPACE": cfg.TemporalNamespace, "USER": "tester"}
	mustRun(t, e, "migrate")
	mustRun(t, e, "apps", "apply", examplesDir())
	for _, subject := range []string{"person-1", "person-1", "person-2"} {
		mustRun(t, e, personUpdated(subject, `{"id":"1","name":"A"}`)...)
	}
	// A port nothing listens on: no worker.
	st := decode[statusJSON](t, mustRun(t, e.with("HERALD_WORKER_URL", "http://127.0.0.1:1"), "status", "--json").stdout)
	if st.Relay.Undispatched != 3 || st.Relay.OldestAgeSeconds <= 0 {
		t.Fatalf("with no worker: relay %+v, want 3 undispatched with an age", st.Relay)
	}
	if st.Worker.State != "unreachable" {
		t.Errorf("worker state %q with no worker", st.Worker.State)
	}

	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.DPanicLevel)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(30 * time.Second)
	for {
		st = decode[statusJSON](t, mustRun(t, e.with("HERALD_WORKER_URL", "http://"+svc.Addr()), "status", "--json").stdout)
		if st.Relay.Undispatched == 0 && st.Worker.State == "ready" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the worker started: relay %+v, worker %+v", st.Relay, st.Worker)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

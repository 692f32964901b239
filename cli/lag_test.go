package cli

import (
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
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
	// A port bound for the test that nothing listens on: no worker.
	noWorker := "http://" + testkit.ReservePort(t).Addr()
	st := decode[statusJSON](t, mustRun(t, e.with("HERALD_WORKER_URL", noWorker), "status", "--json").stdout)
	if st.Relay.Undispatched != 3 || st.Relay.OldestAgeSeconds <= 0 {
		t.Fatalf("with no worker: relay %+v, want 3 undispatched with an age", st.Relay)
	}
	if st.Worker.State != "unreachable" {
		t.Errorf("worker state %q with no worker", st.Worker.State)
	}

	svc, stop := system.RunWorker(t, cfg, zapcore.DPanicLevel)
	t.Cleanup(stop)
	testkit.EventuallyValue(t, 30*time.Second, "status to report the relay caught up and the worker ready", func() (statusJSON, bool) {
		st := decode[statusJSON](t, mustRun(t, e.with("HERALD_WORKER_URL", "http://"+svc.Addr()), "status", "--json").stdout)
		return st, st.Relay.Undispatched == 0 && st.Worker.State == "ready"
	})
}

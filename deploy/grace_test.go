package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"herald/activities"
	"herald/config"
	"herald/internal/tracing"
	heraldservice "herald/service"
)

// graceAtDefaults is the longest a worker with the default settings takes
// to stop on SIGTERM: the service's graceful stop, then the flush of its
// traces.
func graceAtDefaults(t *testing.T) time.Duration {
	t.Helper()
	required := map[string]string{"HERALD_DATABASE_URL": "postgres://db", "HERALD_SIGNING_KEY": "/keys", "HERALD_SECRET_KEY": "@/keys/secret.key"}
	cfg, err := config.LoadWorker(func(k string) string { return required[k] })
	if err != nil {
		t.Fatal(err)
	}
	return heraldservice.StopTimeout(cfg) + tracing.FlushTimeout
}

// TestComposeGraceCoversTheStop: docker-compose.yml gives the worker the
// time its graceful stop can take, so Compose does not kill it mid-stop.
func TestComposeGraceCoversTheStop(t *testing.T) {
	w, ok := loadCompose(t).Services[workerService]
	if !ok {
		t.Fatalf("no %s service", workerService)
	}
	env := func(k string) string { return w.Environment[k] }
	cfg, err := config.LoadWorker(env)
	if err != nil {
		t.Fatalf("%s's environment: %v", workerService, err)
	}
	need := heraldservice.StopTimeout(cfg) + tracing.FlushTimeout
	got, err := time.ParseDuration(w.StopGracePeriod)
	if err != nil {
		t.Fatalf("%s: stop_grace_period %q: %v", workerService, w.StopGracePeriod, err)
	}
	if got < need {
		t.Errorf("%s: stop_grace_period %s is shorter than the worker's graceful stop, %s", workerService, got, need)
	}
}

// TestProductionGraceFigure holds docs/production.md's grace period to the
// code's timeouts: the figure at the defaults and its form in terms of
// HERALD_DELIVERY_TIMEOUT.
func TestProductionGraceFigure(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "production.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("at least `HERALD_DELIVERY_TIMEOUT` \\+ (\\d+) s: \\*\\*(\\d+) s\\*\\* at the default delivery\\s+timeout").FindSubmatch(src)
	if m == nil {
		t.Fatal("docs/production.md does not state the grace period as `HERALD_DELIVERY_TIMEOUT` + N s: **M s** at the default delivery timeout")
	}
	grace := graceAtDefaults(t)
	plus, _ := strconv.Atoi(string(m[1]))
	total, _ := strconv.Atoi(string(m[2]))
	if time.Duration(total)*time.Second != grace {
		t.Errorf("docs/production.md: a grace period of %d s at the defaults; the code's graceful stop takes up to %s", total, grace)
	}
	if time.Duration(plus)*time.Second != grace-activities.DefaultPostTimeout {
		t.Errorf("docs/production.md: HERALD_DELIVERY_TIMEOUT + %d s; the code's stop takes the delivery timeout + %s", plus,
			grace-activities.DefaultPostTimeout)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"herald/config"
	"herald/internal/testenv"
	"herald/publish"
	"herald/service"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// Subscriptions of the test system: billing and audit-log both subscribe to
// contacts.person.updated@1.
const (
	billingSub  = "billing:contacts.person.updated@1"
	auditLogSub = "audit-log:contacts.person.updated@1"
)

// herald is a running Herald for the delivery commands: a worker service in
// its own database schema and Temporal namespace, a verifying subscriber
// that can be told to reject events, and the environment starter runs in.
type herald struct {
	t         *testing.T
	env       env
	svc       *service.Service
	sub       *inbox
	publisher *publish.Publisher
	address   string
	namespace string
	// stopWorker stops the worker service (the subscriber keeps running).
	stopWorker func()
}

// startHerald starts the worker in-process with a one-retry schedule, so a
// failing key fails within a second, and applies the manifests. Each option
// changes the worker's configuration before it starts.
func startHerald(t *testing.T, options ...func(*config.Worker)) *herald {
	t.Helper()
	cfg := testenv.WorkerConfig(t)
	cfg.LogLevel = "error"
	cfg.Schedule = []time.Duration{200 * time.Millisecond}
	cfg.DBMaxConns = 6
	for _, o := range options {
		o(&cfg)
	}
	address, namespace := cfg.TemporalAddress, cfg.TemporalNamespace
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.DPanicLevel)))
	if err != nil {
		cancel()
		t.Fatalf("start the worker: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	h := &herald{t: t, svc: svc, sub: &inbox{got: map[string][]int{}}, address: address, namespace: namespace,
		publisher: publish.New(svc.Store, publish.Options{})}
	handler, err := subscriber.New(subscriber.Config{
		Audiences:         []string{"app:billing", "app:audit-log"},
		JWKSURL:           "http://" + svc.Addr() + "/.well-known/jwks.json",
		AllowLoopbackHTTP: true, // the worker serves its JWKS on loopback
	}, h.sub.handle)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	h.stopWorker = func() {
		cancel()
		<-done
	}
	t.Cleanup(func() {
		h.stopWorker()
		srv.Close()
	})
	h.env = env{
		"HERALD_DATABASE_URL":   cfg.DatabaseURL,
		"TEMPORAL_ADDRESS":      address,
		"TEMPORAL_NAMESPACE":    namespace,
		"HERALD_WORKER_URL":     "http://" + svc.Addr(),
		"HERALD_ALLOW_NETWORKS": "127.0.0.0/8",
		"USER":                  "tester",
	}
	dir := t.TempDir()
	writeFile(t, dir, "contacts.json", fmt.Sprintf(`{"app":"contacts","endpoint":%q,"events":[{"name":"person.updated","version":1,"subject":"person",
		"dataSchema":{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}}]}`, srv.URL))
	for _, app := range []string{"billing", "audit-log"} {
		writeFile(t, dir, app+".json", fmt.Sprintf(`{"app":%q,"endpoint":%q,"subscribes":[{"type":"contacts.person.updated","version":1}]}`, app, srv.URL))
	}
	mustRun(t, h.env, "apps", "apply", dir)
	return h
}

// publish publishes events n of each subject key, for each n given.
func (h *herald) publish(subjects []string, ns ...int) {
	h.t.Helper()
	for _, n := range ns {
		for _, subject := range subjects {
			if _, err := h.publisher.Publish(context.Background(), publish.Request{
				App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: subject,
				Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
			}); err != nil {
				h.t.Fatalf("publish %s #%d: %v", subject, n, err)
			}
		}
	}
}

// waitFor polls cond every 100 ms until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitArrivals waits until app received exactly the events want of subject, in that order.
func (h *herald) waitArrivals(app, subject string, want ...int) {
	h.t.Helper()
	waitFor(h.t, 30*time.Second, fmt.Sprintf("%s to receive %v of %s", app, want, subject), func() bool {
		return len(h.sub.arrivals(app, subject)) >= len(want)
	})
	if got := h.sub.arrivals(app, subject); !slices.Equal(got, want) {
		h.t.Fatalf("%s received %v of %s, want %v in that order", app, got, subject, want)
	}
}

// listed runs starter deliveries with args and --json and returns the keys'
// subjects, sorted.
func (h *herald) listed(args ...string) []string {
	h.t.Helper()
	out := decode[deliveriesJSON](h.t, mustRun(h.t, h.env, append([]string{"deliveries", "--json"}, args...)...).stdout)
	var subjects []string
	for _, k := range out.Keys {
		subjects = append(subjects, k.Subject)
	}
	slices.Sort(subjects)
	return subjects
}

// waitListed waits until starter deliveries with args lists exactly the
// subjects want (Temporal's visibility lags behind status changes).
func (h *herald) waitListed(want []string, args ...string) {
	h.t.Helper()
	want = slices.Sorted(slices.Values(want))
	var got []string
	waitFor(h.t, 30*time.Second, fmt.Sprintf("deliveries %v to list %v (last: %v)", args, want, got), func() bool {
		got = h.listed(args...)
		return slices.Equal(got, want)
	})
}

// state runs starter inspect --json on one key of a subscription.
func (h *herald) state(subscription, subject string) workflows.State {
	h.t.Helper()
	r := mustRun(h.t, h.env, "inspect", "--json", "--subscription", subscription, "--subject", subject)
	return decode[workflows.State](h.t, r.stdout)
}

// audit returns the audit rows of action about one key's workflow.
func (h *herald) audit(action, subscription, subject string) []store.AuditRow {
	h.t.Helper()
	rows, err := h.svc.Store.ListAudit(context.Background(), store.AuditFilter{
		Action: action, TargetID: workflows.DeliveryID(subscription, subject),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return rows
}

// wantAudit waits for exactly one audit row of action about the key and
// checks its outcome, actor and reason.
func (h *herald) wantAudit(action, subscription, subject, actor, reason string) {
	h.t.Helper()
	var rows []store.AuditRow
	waitFor(h.t, 10*time.Second, action+" audit row of "+subject, func() bool {
		rows = h.audit(action, subscription, subject)
		return len(rows) > 0
	})
	time.Sleep(200 * time.Millisecond) // a duplicate would show up by now
	rows = h.audit(action, subscription, subject)
	if len(rows) != 1 {
		h.t.Fatalf("%d %s audit rows for %s, want 1: %+v", len(rows), action, subject, rows)
	}
	var meta struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(rows[0].Metadata, &meta); err != nil {
		h.t.Fatal(err)
	}
	if r := rows[0]; r.Outcome != store.OutcomeAllowed || r.Actor != actor || meta.Reason != reason || r.TargetType != store.TargetDelivery {
		h.t.Fatalf("%s audit row: outcome %s, actor %q, target %s %s, metadata %s; want outcome allowed, actor %q, reason %q",
			action, r.Outcome, r.Actor, r.TargetType, r.TargetID, r.Metadata, actor, reason)
	}
}

// inbox is the subscriber's handler: it records the n of each accepted
// event per app and subject, and answers 422 while reject says so.
type inbox struct {
	mu     sync.Mutex
	got    map[string][]int
	reject func(app, subject string, n int) bool
}

func (in *inbox) handle(_ context.Context, ev subscriber.Event) error {
	var data struct {
		N int `json:"n"`
	}
	if err := ev.DecodeData(&data); err != nil {
		return subscriber.Reject(err)
	}
	app := ev.Audience[len("app:"):]
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.reject != nil && in.reject(app, ev.Subject, data.N) {
		return subscriber.Reject(fmt.Errorf("event %d of %s does not fit", data.N, ev.Subject))
	}
	in.got[app+"|"+ev.Subject] = append(in.got[app+"|"+ev.Subject], data.N)
	return nil
}

// setReject replaces the rejection rule; nil accepts everything.
func (in *inbox) setReject(fn func(app, subject string, n int) bool) {
	in.mu.Lock()
	in.reject = fn
	in.mu.Unlock()
}

func (in *inbox) arrivals(app, subject string) []int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.got[app+"|"+subject])
}

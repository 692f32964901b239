package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// opsReceiver is an alerting app's endpoint: it records every event
// delivered to it, verified, and can be told to fail them all or to refuse
// contacts.person.updated for one subject key. An app hears of its own
// subscriptions' keys only (issue 27, item 7), so the alerting app also
// subscribes to contacts.person.updated and the failing key is its own.
type opsReceiver struct {
	mu       sync.Mutex
	got      []subscriber.Event
	failures []subscriber.Failure
	fail     bool
	// refuse, when set, is the subject key of contacts.person.updated
	// events the endpoint answers 500 "not today".
	refuse string
	url    string
}

func (r *opsReceiver) handle(_ context.Context, ev subscriber.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("alerting bridge down")
	}
	if r.refuse != "" && ev.Type == contactsType && ev.Subject == r.refuse {
		return errors.New("not today")
	}
	r.got = append(r.got, ev)
	return nil
}

// events returns the events received of the given types, in order.
func (r *opsReceiver) events(types ...string) []subscriber.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []subscriber.Event
	for _, ev := range r.got {
		for _, typ := range types {
			if ev.Type == typ {
				out = append(out, ev)
			}
		}
	}
	return out
}

// contactsType is the event type of the system's publisher, and opsSub the
// alerting app's subscription to it.
const (
	contactsType = "contacts.person.updated"
	opsSub       = "alerts:" + contactsType + "@1"
)

// refuseSubject makes the endpoint refuse contacts.person.updated events of
// subject ("" accepts them all).
func (r *opsReceiver) refuseSubject(subject string) {
	r.mu.Lock()
	r.refuse = subject
	r.mu.Unlock()
}

// verificationFailures are the failures that were not the handler's own
// refusals: deliveries that did not verify.
func (r *opsReceiver) verificationFailures() []subscriber.Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []subscriber.Failure
	for _, f := range r.failures {
		if f.Code != subscriber.CodeHandlerFailed {
			out = append(out, f)
		}
	}
	return out
}

// startOps runs an "alerts" app subscribed to contacts.person.updated and
// to types, at version 1.
func startOps(t *testing.T, s *system.System, types ...string) *opsReceiver {
	t.Helper()
	r := &opsReceiver{}
	h, err := subscriber.New(subscriber.Config{
		Audiences: []string{"app:alerts"}, JWKSURL: s.WorkerURL() + "/.well-known/jwks.json",
		AllowLoopbackHTTP: true,
		OnFailure: func(_ *http.Request, f subscriber.Failure) {
			r.mu.Lock()
			r.failures = append(r.failures, f)
			r.mu.Unlock()
		},
	}, r.handle)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r.url = srv.URL
	m := &manifest.Manifest{App: "alerts", Endpoint: srv.URL}
	for _, typ := range append([]string{contactsType}, types...) {
		m.Subscribes = append(m.Subscribes, manifest.Subscription{Type: typ, Version: 1})
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Svc.Store.ApplyManifest(context.Background(), m, "e2e"); err != nil {
		t.Fatal(err)
	}
	return r
}

func eventData(t *testing.T, ev subscriber.Event) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestKeyFailedAndRecoveredAreDelivered: an app subscribed to
// herald.key.failed and herald.key.recovered receives, signed and in order,
// the failure of its own subscription's key once its attempts run out, and
// its recovery once the operator's redeliver goes through.
func TestKeyFailedAndRecoveredAreDelivered(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	ops := startOps(t, s, store.TypeKeyFailed, store.TypeKeyRecovered, store.TypeSubscriptionStateChanged)
	ops.refuseSubject("person-ops")
	ev := s.Publish("person-ops", 1)
	id := workflows.DeliveryID(opsSub, "person-ops")
	testkit.Eventually(t, 30*time.Second, "the key to fail", func() bool { return status(c, id) == workflows.StatusFailed })
	keyEvents := func() []subscriber.Event { return ops.events(store.TypeKeyFailed, store.TypeKeyRecovered) }
	testkit.Eventually(t, 30*time.Second, "herald.key.failed at the alerting app", func() bool { return len(keyEvents()) >= 1 })

	ops.refuseSubject("")
	if err := c.SignalWorkflow(context.Background(), id, "", workflows.SignalRedeliver,
		workflows.RedeliverSignal{Actor: "e2e-operator", Reason: "handler fixed"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the redelivered head", func() bool { return len(ops.events(contactsType)) == 1 })
	testkit.Eventually(t, 30*time.Second, "herald.key.recovered at the alerting app", func() bool { return len(keyEvents()) >= 2 })

	got := keyEvents()
	if len(got) != 2 || got[0].Type != store.TypeKeyFailed || got[1].Type != store.TypeKeyRecovered {
		t.Fatalf("operational events: %+v", got)
	}
	f, r := eventData(t, got[0]), eventData(t, got[1])
	subject := opsSub + "/person-ops"
	for _, e := range got {
		if e.Subject != subject || e.Source != "app:herald" || e.DataVersion != 1 || e.Attempt != 1 {
			t.Fatalf("event %s: subject %q, source %q, version %d, attempt %d", e.Type, e.Subject, e.Source, e.DataVersion, e.Attempt)
		}
	}
	if e := got[0]; e.Subscription != "alerts:herald.key.failed@1" {
		t.Fatalf("delivered for subscription %q", e.Subscription)
	}
	if f["subscriptionId"] != opsSub || f["subscriberApp"] != "alerts" || f["eventType"] != contactsType ||
		f["subjectKey"] != "person-ops" || f["eventId"] != ev.ID || f["code"] != "attempts_exhausted" ||
		f["lastCode"] != "handler_failed" || f["attempts"] != float64(3) || f["workflowId"] != id ||
		!strings.Contains(f["lastError"].(string), "not today") {
		t.Fatalf("herald.key.failed data: %v", f)
	}
	if r["failedEventId"] != ev.ID || r["failedCode"] != "attempts_exhausted" || r["failedAt"] != f["failedAt"] ||
		r["failedSeconds"].(float64) <= 0 || r["subjectKey"] != "person-ops" {
		t.Fatalf("herald.key.recovered data: %v", r)
	}

	// A state change of its own subscription reaches the app too; another
	// app's does not (issue 27, item 7).
	for _, sub := range []string{"audit-log:" + contactsType + "@1", opsSub} {
		if _, err := s.Svc.Store.SetSubscriptionPaused(context.Background(), sub, true, "alice", "maintenance"); err != nil {
			t.Fatal(err)
		}
	}
	paused := func() *subscriber.Event {
		for _, ev := range ops.events(store.TypeSubscriptionStateChanged) {
			if ev.Subject == opsSub && strings.Contains(string(ev.Data), `"to":"paused"`) {
				return &ev
			}
		}
		return nil
	}
	testkit.Eventually(t, 30*time.Second, "herald.subscription.state_changed", func() bool { return paused() != nil })
	if d := eventData(t, *paused()); d["from"] != "active" || d["actor"] != "alice" || d["reason"] != "maintenance" ||
		d["subscriberApp"] != "alerts" {
		t.Fatalf("state change: %v", d)
	}
	for _, ev := range ops.events(store.TypeKeyFailed, store.TypeKeyRecovered, store.TypeSubscriptionStateChanged) {
		if !strings.HasPrefix(ev.Subject, "alerts:") {
			t.Errorf("the alerting app received %s about another app's subscription: %s", ev.Type, ev.Subject)
		}
	}
	if f := ops.verificationFailures(); len(f) != 0 {
		t.Fatalf("operational deliveries failed verification: %+v", f)
	}
}

// TestOperationalEventsLoopGuard: when the alerting app's endpoint fails on
// everything, its contacts key fails, then its key of the herald.key.failed
// about that, and no herald.key.failed is emitted about the second: one
// event, not a chain.
func TestOperationalEventsLoopGuard(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	ops := startOps(t, s, store.TypeKeyFailed)
	ops.mu.Lock()
	ops.fail = true // its contacts.person.updated events, and then herald.key.failed about them
	ops.mu.Unlock()
	s.Publish("person-loop", 1)
	opsKey := workflows.DeliveryID("alerts:herald.key.failed@1", opsSub+"/person-loop")
	testkit.Eventually(t, 60*time.Second, "the alerting app's key to fail", func() bool { return status(c, opsKey) == workflows.StatusFailed })
	ctx := context.Background()
	// The failure of the alerting key is recorded (its audit row) in the
	// transaction that would have emitted an event about it.
	testkit.Eventually(t, 30*time.Second, "the alerting key's delivery.failed row", func() bool {
		rows, err := s.Svc.Store.ListAudit(ctx, store.AuditFilter{Action: workflows.AuditDeliveryFailed, TargetID: opsKey})
		return err == nil && len(rows) == 1
	})
	var n int
	if err := s.Svc.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1`, store.TypeKeyFailed).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d herald.key.failed events, want 1 (about the alerting app's contacts key only)", n)
	}
}

// TestKeyExpiredIsDelivered: events a failed key held longer than the hold
// expiry are dropped as expired, and the alerting app hears of it once.
// Herald's own app is declared by the worker's start.
func TestKeyExpiredIsDelivered(t *testing.T) {
	t.Parallel()
	s := system.Start(t, system.Config(func(cfg *config.Worker) { cfg.HoldExpiry = 3 * time.Second }))
	ctx := context.Background()
	app, err := s.Svc.Store.GetApp(ctx, store.HeraldApp)
	if err != nil || len(app.Declarations) != 5 {
		t.Fatalf("the worker did not declare the app herald: %+v, %v", app, err)
	}
	s.Apply()
	ops := startOps(t, s, store.TypeKeyExpired)
	ops.refuseSubject("person-exp")
	first := s.Publish("person-exp", 1)
	second := s.Publish("person-exp", 2)
	// One event per expiry pass: both events at once, or one pass each.
	expired := func() (ids []any, passes int) {
		for _, ev := range ops.events(store.TypeKeyExpired) {
			d := eventData(t, ev)
			got, _ := d["eventIds"].([]any)
			if ev.Subject != opsSub+"/person-exp" || d["count"] != float64(len(got)) ||
				d["holdExpiry"] != "3s" || d["subjectKey"] != "person-exp" || d["subscriptionId"] != opsSub {
				t.Fatalf("herald.key.expired %s: %s", ev.Subject, ev.Data)
			}
			ids = append(ids, got...)
			passes++
		}
		return ids, passes
	}
	testkit.Eventually(t, 60*time.Second, "herald.key.expired for both events", func() bool { ids, _ := expired(); return len(ids) >= 2 })
	ids, passes := expired()
	if len(ids) != 2 || ids[0] != first.ID || ids[1] != second.ID || passes > 2 {
		t.Fatalf("expired ids %v in %d events, want %s and %s", ids, passes, first.ID, second.ID)
	}
}

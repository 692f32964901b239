package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/api"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/subscriber"
	"herald/workflows"
)

// TestMetricsPerSubscription scrapes the worker's /metrics after a known
// run: three events to two subscriptions, billing answering 2xx and
// audit-log failing the first event once with a 500, plus two refused
// publishes. Every per-subscription and per-app figure must be exact.
func TestMetricsPerSubscription(t *testing.T) {
	t.Parallel()
	s := system.Start(t, system.API())
	s.Apply()
	id, token, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Svc.Store.CreateAPIToken(ctx, id, "contacts", "e2e", hash, "e2e"); err != nil {
		t.Fatal(err)
	}
	subs := map[string]string{} // app -> subscription id
	for _, app := range []string{"billing", "audit-log"} {
		list, err := s.Svc.Store.ListSubscriptions(ctx, app)
		if err != nil || len(list) != 1 {
			t.Fatalf("subscriptions of %s: %+v (%v)", app, list, err)
		}
		subs[app] = list[0].ID
	}
	failedOnce := false
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "audit-log" && n == 1 && !failedOnce {
			failedOnce = true
			return errors.New("not yet")
		}
		return nil
	})

	post := func(auth, body string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+s.Svc.APIAddr()+api.EventsPath, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var body strings.Builder
	for n := 1; n <= 3; n++ {
		fmt.Fprintf(&body, `{"type":"contacts.person.updated","version":1,"subject":"person-metrics","data":{"name":%q,"n":%d}}`+"\n", system.DataMarker, n)
	}
	if code := post("Bearer "+token, body.String()); code != http.StatusAccepted {
		t.Fatalf("publish: status %d", code)
	}
	// Refused: data without the required "n" (data_invalid, app contacts),
	// and a request with a token that does not exist (unauthorized, app unknown).
	bad := `{"type":"contacts.person.updated","version":1,"subject":"person-metrics","data":{"name":"x"}}`
	if code := post("Bearer "+token, bad); code == http.StatusAccepted {
		t.Fatalf("invalid data accepted")
	}
	if code := post("Bearer hrld_not-a-token", bad); code != http.StatusUnauthorized {
		t.Fatalf("unknown token: status %d, want 401", code)
	}
	for _, app := range []string{"billing", "audit-log"} {
		testkit.Eventually(t, 60*time.Second, app+" to receive the three events", func() bool { return s.Sub.Count(app, "person-metrics") >= 3 })
	}

	metricsURL := "http://" + s.Svc.Addr() + "/metrics"
	var m scraped
	// Outcome rows are written beside the POSTs: poll until nothing is queued.
	testkit.Eventually(t, 30*time.Second, "no queued events in the scrape", func() bool {
		m = scrapeMetrics(t, metricsURL)
		return m.value("herald_subscription_queued_events", "subscription", subs["billing"]) == 0 &&
			m.value("herald_subscription_queued_events", "subscription", subs["audit-log"]) == 0
	})

	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"herald_worker_ready", nil, 1},
		{"herald_subscription_metrics_up", nil, 1},
		{"herald_deliveries_total", []string{"subscription", subs["billing"], "app", "billing"}, 3},
		{"herald_deliveries_total", []string{"subscription", subs["audit-log"], "app", "audit-log"}, 3},
		{"herald_delivery_attempts_total", []string{"subscription", subs["billing"], "result", "delivered"}, 3},
		{"herald_delivery_attempts_total", []string{"subscription", subs["billing"], "result", "failed"}, 0},
		{"herald_delivery_attempts_total", []string{"subscription", subs["audit-log"], "result", "delivered"}, 3},
		{"herald_delivery_attempts_total", []string{"subscription", subs["audit-log"], "app", "audit-log", "result", "failed", "code", "handler_failed"}, 1},
		{"herald_delivery_outcomes_total", []string{"subscription", subs["billing"], "outcome", "delivered"}, 3},
		{"herald_delivery_outcomes_total", []string{"subscription", subs["audit-log"], "outcome", "delivered"}, 3},
		{"herald_delivery_outcomes_total", []string{"subscription", subs["audit-log"], "outcome", "failed"}, 0},
		{"herald_delivery_latency_seconds_count", []string{"subscription", subs["billing"], "app", "billing"}, 3},
		{"herald_delivery_latency_seconds_count", []string{"subscription", subs["audit-log"], "app", "audit-log"}, 3},
		{"herald_subscription_keys", []string{"subscription", subs["billing"], "app", "billing", "status", "failed"}, 0},
		{"herald_subscription_keys", []string{"subscription", subs["audit-log"], "status", "pending"}, 0},
		{"herald_publish_rejections_total", []string{"app", "contacts", "code", "data_invalid"}, 1},
		{"herald_publish_rejections_total", []string{"app", "unknown", "code", "unauthorized"}, 1},
		{"herald_publish_rejections_total", nil, 2},
	}
	for _, w := range want {
		if got := m.value(w.name, w.labels...); got != w.value {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
		}
	}
	// The subscriptions' series exist even when zero, so dashboards and
	// alerts see them.
	if !m.has("herald_subscription_keys", "subscription", subs["billing"], "status", "failed") {
		t.Errorf("no herald_subscription_keys series for %s", subs["billing"])
	}
}

// TestMetricsFailedKey: a key whose head the subscriber rejects (terminal)
// shows as a failed key with its later events queued, which is what
// HeraldKeyFailed watches; an operator's cancel settles the head as
// cancelled and the key drains.
func TestMetricsFailedKey(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	const billingSub, auditSub = "billing:contacts.person.updated@1", "audit-log:contacts.person.updated@1"
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && n == 1 {
			return subscriber.Reject(fmt.Errorf("event %d does not fit", n))
		}
		return nil
	})
	for n := 1; n <= 3; n++ {
		s.Publish("person-stuck", n)
	}
	testkit.Eventually(t, 60*time.Second, "audit-log to receive the three events", func() bool { return s.Sub.Count("audit-log", "person-stuck") >= 3 })
	metricsURL := "http://" + s.Svc.Addr() + "/metrics"
	var m scraped
	testkit.Eventually(t, 60*time.Second, "billing's key to show as failed", func() bool {
		m = scrapeMetrics(t, metricsURL)
		return m.value("herald_subscription_keys", "subscription", billingSub, "status", "failed") == 1 &&
			m.value("herald_subscription_queued_events", "subscription", auditSub) == 0
	})
	check := func(want []struct {
		name   string
		labels []string
		value  float64
	}) {
		t.Helper()
		for _, w := range want {
			if got := m.value(w.name, w.labels...); got != w.value {
				t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
			}
		}
	}
	type row = struct {
		name   string
		labels []string
		value  float64
	}
	check([]row{
		{"herald_subscription_queued_events", []string{"subscription", billingSub, "app", "billing"}, 2},
		{"herald_subscription_keys", []string{"subscription", billingSub, "status", "pending"}, 0},
		{"herald_subscription_keys", []string{"subscription", auditSub, "status", "failed"}, 0},
		{"herald_delivery_outcomes_total", []string{"subscription", billingSub, "outcome", "failed"}, 1},
		{"herald_delivery_outcomes_total", []string{"subscription", billingSub, "outcome", "delivered"}, 0},
		{"herald_delivery_attempts_total", []string{"subscription", billingSub, "result", "failed", "code", "schema_mismatch"}, 1},
		{"herald_delivery_outcomes_total", []string{"subscription", auditSub, "outcome", "delivered"}, 3},
	})

	c, err := client.Dial(client.Options{HostPort: s.Cfg.TemporalAddress, Namespace: s.Cfg.TemporalNamespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SignalWorkflow(context.Background(), workflows.DeliveryID(billingSub, "person-stuck"), "", workflows.SignalCancel,
		workflows.CancelSignal{Actor: "e2e-operator", Reason: "cannot be fixed"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "billing to receive the two later events", func() bool { return s.Sub.Count("billing", "person-stuck") >= 2 })
	testkit.Eventually(t, 30*time.Second, "billing's key to drain in the scrape", func() bool {
		m = scrapeMetrics(t, metricsURL)
		return m.value("herald_subscription_queued_events", "subscription", billingSub) == 0 &&
			m.value("herald_subscription_keys", "subscription", billingSub, "status", "failed") == 0
	})
	check([]row{
		{"herald_delivery_outcomes_total", []string{"subscription", billingSub, "outcome", "cancelled"}, 1},
		{"herald_delivery_outcomes_total", []string{"subscription", billingSub, "outcome", "failed"}, 1},
		{"herald_delivery_outcomes_total", []string{"subscription", billingSub, "outcome", "delivered"}, 2},
		{"herald_deliveries_total", []string{"subscription", billingSub, "app", "billing"}, 2},
	})
}

// sample is one line of the text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type scraped []sample

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrapeMetrics reads /metrics in the text format.
func scrapeMetrics(t *testing.T, url string) scraped {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d (%v)", resp.StatusCode, err)
	}
	var out scraped
	for _, line := range strings.Split(string(text), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		head := line[:sp]
		smp := sample{name: head, labels: map[string]string{}, value: v}
		if i := strings.IndexByte(head, '{'); i >= 0 {
			smp.name = head[:i]
			for _, m := range labelRE.FindAllStringSubmatch(head[i:], -1) {
				smp.labels[m[1]] = m[2]
			}
		}
		out = append(out, smp)
	}
	return out
}

func (s scraped) matching(name string, kv ...string) []sample {
	var out []sample
next:
	for _, smp := range s {
		if smp.name != name {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if smp.labels[kv[i]] != kv[i+1] {
				continue next
			}
		}
		out = append(out, smp)
	}
	return out
}

// value sums the samples of name whose labels include kv (pairs); 0 when none.
func (s scraped) value(name string, kv ...string) float64 {
	var sum float64
	for _, smp := range s.matching(name, kv...) {
		sum += smp.value
	}
	return sum
}

func (s scraped) has(name string, kv ...string) bool { return len(s.matching(name, kv...)) > 0 }

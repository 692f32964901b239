// Package metrics defines Herald's Prometheus metrics and serves them.
package metrics

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"herald/activities"
	"herald/store"
)

// Metrics holds the collectors of one process.
//
// Per-subscription series carry the subscription id (and the subscriber
// app where the code that counts knows it); their number is bounded by the
// subscriptions, never by subjects or events. Rejections carry the source
// app only when it is a declared one ("unknown" otherwise).
type Metrics struct {
	Registry *prometheus.Registry

	attempts   *prometheus.CounterVec
	delivered  *prometheus.CounterVec
	outcomes   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	attemptsOK prometheus.Histogram
	rejections *prometheus.CounterVec
	redriven   *prometheus.CounterVec
	// relayFailed counts signals Temporal did not accept; relayDead the
	// events the relay gave up on.
	relayFailed prometheus.Counter
	relayDead   prometheus.Counter
	ready       atomic.Bool
	// readyCheck, when set, must also hold for herald_worker_ready to be 1.
	readyCheck func() bool

	// filterErrors counts failed content-filter evaluations (relay).
	filterErrors *prometheus.CounterVec
}

// UnknownApp is the app label of a rejection whose app is not a declared one.
const UnknownApp = "unknown"

// New registers Herald's collectors and the Go runtime's in a new registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_delivery_attempts_total",
		Help: "Delivery attempts (HTTP POSTs) per subscription by result (delivered or failed) and error code.",
	}, []string{"subscription", "app", "result", "code"})
	m.delivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_deliveries_total",
		Help: "Events delivered (2xx) per subscription.",
	}, []string{"subscription", "app"})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_delivery_outcomes_total",
		Help: "Events settled per subscription by outcome (delivered, failed, cancelled, expired, filtered), counted where the outcome is decided.",
	}, []string{"subscription", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "herald_delivery_latency_seconds",
		Help:    "Time from an event's publication to its 2xx delivery, per subscription.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
	}, []string{"subscription", "app"})
	m.attemptsOK = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_delivery_attempts_per_delivery",
		Help:    "The attempt number at which an event was delivered.",
		Buckets: []float64{1, 2, 3, 4, 5, 6, 7, 8, 10, 20},
	})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_publish_rejections_total",
		Help: "Rejected publishes by source app (\"unknown\" when not a declared app) and code.",
	}, []string{"app", "code"})
	m.redriven = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_relay_keys_redriven_total",
		Help: "Keys whose workflow was gone while their outcome rows still held events, started again by the relay leader, per subscription.",
	}, []string{"subscription"})
	m.filterErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_relay_filter_errors_total",
		Help: "Events whose subscription's content filter failed (eval_error, cost_limit, timeout, bad_event, refused), per subscription and reason; they are delivered.",
	}, []string{"subscription", "reason"})
	m.relayFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "herald_relay_signal_failures_total",
		Help: "Signals of the relay to a key's workflow that Temporal did not accept; their events back off.",
	})
	m.relayDead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "herald_relay_dead_events_total",
		Help: "Events the relay gave up on after HERALD_RELAY_MAX_ATTEMPTS failed signals (code relay_failed).",
	})
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_worker_ready",
		Help: "1 while this process's Temporal worker is started and Temporal answers, else 0.",
	}, func() float64 {
		if m.ready.Load() && (m.readyCheck == nil || m.readyCheck()) {
			return 1
		}
		return 0
	})
	m.Registry.MustRegister(m.attempts, m.delivered, m.outcomes, m.latency, m.attemptsOK, m.rejections,
		m.redriven, m.filterErrors, m.relayFailed, m.relayDead, ready,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetReady tells whether the Temporal worker is started (polling).
func (m *Metrics) SetReady(ready bool) { m.ready.Store(ready) }

// ReadyCheck sets a check run at each scrape while the worker is started
// (Temporal's health); herald_worker_ready is 0 when it fails. Call it
// before the metrics are served.
func (m *Metrics) ReadyCheck(check func() bool) { m.readyCheck = check }

// Attempted records one delivery attempt (activities.Observer).
func (m *Metrics) Attempted(subscriptionID, app string, envelope []byte, attempt int, r activities.PostResult) {
	if r.Delivered() {
		m.attempts.WithLabelValues(subscriptionID, app, "delivered", "").Inc()
		m.delivered.WithLabelValues(subscriptionID, app).Inc()
		m.attemptsOK.Observe(float64(attempt))
		if t, ok := publishedAt(envelope); ok {
			m.latency.WithLabelValues(subscriptionID, app).Observe(time.Since(t).Seconds())
		}
		return
	}
	m.attempts.WithLabelValues(subscriptionID, app, "failed", r.Code).Inc()
}

// Settled counts n events of a subscription settled with outcome
// (activities.Observer, relay.Observer).
func (m *Metrics) Settled(subscriptionID, outcome string, n int) {
	if n > 0 {
		m.outcomes.WithLabelValues(subscriptionID, outcome).Add(float64(n))
	}
}

// FilterErrors counts n events of a subscription whose content filter
// failed with reason (relay.FilterErrorObserver); they were delivered.
func (m *Metrics) FilterErrors(subscriptionID, reason string, n int) {
	if n > 0 {
		m.filterErrors.WithLabelValues(subscriptionID, reason).Add(float64(n))
	}
}

// Redriven counts a key the relay re-drove because its workflow was gone
// (relay.RedriveObserver).
func (m *Metrics) Redriven(subscriptionID string) {
	m.redriven.WithLabelValues(subscriptionID).Inc()
}

// Rejected counts a rejected publish of app with code. app must be a
// declared app or UnknownApp: callers pass what they checked.
func (m *Metrics) Rejected(app, code string) {
	if app == "" {
		app = UnknownApp
	}
	m.rejections.WithLabelValues(app, code).Inc()
}

// RelayRound counts a relay round's failed signals and the events it gave
// up on (relay.Relay.OnRound).
func (m *Metrics) RelayRound(failedSignals, dead int) {
	m.relayFailed.Add(float64(failedSignals))
	m.relayDead.Add(float64(dead))
}

// Held exports, once per scrape and in one query, each subscription's
// queued events and keys by status.
func (m *Metrics) Held(read func(context.Context) ([]store.HeldCounts, error)) {
	m.Registry.MustRegister(held{read: read})
}

// Unreachable exports how long each app has been marked unreachable.
func (m *Metrics) Unreachable(read func(context.Context) ([]store.UnreachableApp, error)) {
	m.Registry.MustRegister(unreachable{read: read})
}

var (
	queuedDesc = prometheus.NewDesc("herald_subscription_queued_events",
		"Events queued for a subscription (waiting, in delivery or retrying), from the outcome rows.",
		[]string{"subscription", "app"}, nil)
	keysDesc = prometheus.NewDesc("herald_subscription_keys",
		"Subject keys of a subscription that hold events, by status: failed (head failed terminally; the key holds), paused, blocked (the subscription's state), unreachable (the app is), retrying (a queued event has failed attempts), pending (the rest).",
		[]string{"subscription", "app", "status"}, nil)
	heldUpDesc = prometheus.NewDesc("herald_subscription_metrics_up",
		"1 when the per-subscription gauges were read from PostgreSQL at this scrape, 0 when the query failed.", nil, nil)
	unreachableDesc = prometheus.NewDesc("herald_app_unreachable_seconds",
		"How long an app has been marked unreachable (nothing answered a delivery); absent when it is not.",
		[]string{"app"}, nil)
)

// held collects the per-subscription gauges from one query.
type held struct {
	read func(context.Context) ([]store.HeldCounts, error)
}

func (c held) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuedDesc
	ch <- keysDesc
	ch <- heldUpDesc
}

func (c held) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.read(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(heldUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(heldUpDesc, prometheus.GaugeValue, 1)
	for _, h := range counts {
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(h.Queued), h.SubscriptionID, h.App)
		for _, k := range []struct {
			status string
			n      int64
		}{
			{"pending", h.PendingKeys}, {"retrying", h.RetryingKeys}, {"unreachable", h.UnreachableKeys},
			{"blocked", h.BlockedKeys}, {"paused", h.PausedKeys}, {"failed", h.FailedKeys},
		} {
			ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(k.n), h.SubscriptionID, h.App, k.status)
		}
	}
}

type unreachable struct {
	read func(context.Context) ([]store.UnreachableApp, error)
}

func (c unreachable) Describe(ch chan<- *prometheus.Desc) { ch <- unreachableDesc }

func (c unreachable) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	apps, err := c.read(ctx)
	if err != nil {
		return // herald_subscription_metrics_up tells the database did not answer
	}
	for _, a := range apps {
		ch <- prometheus.MustNewConstMetric(unreachableDesc, prometheus.GaugeValue, time.Since(a.Since).Seconds(), a.App)
	}
}

// RelayPartitions exports how many partitions of the log this process's
// relay leads (0 while it stands by), read at each scrape.
func (m *Metrics) RelayPartitions(led func() int) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_relay_partitions_led",
		Help: "Partitions of the event log this process's relay leads (of 16 among all relays; 0 while it stands by).",
	}, func() float64 { return float64(led()) }))
}

// RelayLag exports the relay's lag, read from the database once per scrape.
func (m *Metrics) RelayLag(read func(context.Context) (store.Lag, error)) {
	m.Registry.MustRegister(relayLag{read: read})
}

var (
	undispatchedDesc = prometheus.NewDesc("herald_relay_undispatched_events",
		"Accepted events not yet handed to Temporal, dead ones apart (-1 when the database did not answer).", nil, nil)
	oldestAgeDesc = prometheus.NewDesc("herald_relay_oldest_undispatched_age_seconds",
		"Age of the oldest undispatched event.", nil, nil)
	deadDesc = prometheus.NewDesc("herald_relay_dead_events",
		"Undispatched events the relay gave up on (code relay_failed), waiting for starter events retry-relay (-1 when the database did not answer).", nil, nil)
)

// relayLag collects both lag figures from one query.
type relayLag struct {
	read func(context.Context) (store.Lag, error)
}

func (c relayLag) Describe(ch chan<- *prometheus.Desc) {
	ch <- undispatchedDesc
	ch <- oldestAgeDesc
	ch <- deadDesc
}

func (c relayLag) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := c.read(ctx)
	if err != nil {
		l = store.Lag{Undispatched: -1, Dead: -1}
	}
	ch <- prometheus.MustNewConstMetric(undispatchedDesc, prometheus.GaugeValue, float64(l.Undispatched))
	ch <- prometheus.MustNewConstMetric(oldestAgeDesc, prometheus.GaugeValue, l.OldestAge.Seconds())
	ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(l.Dead))
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// publishedAt reads the CloudEvent's "time" without decoding the whole body:
// Herald writes it near the start of every envelope.
func publishedAt(env []byte) (time.Time, bool) {
	head := env[:min(len(env), 2048)]
	i := bytes.Index(head, []byte(`"time":"`))
	if i < 0 {
		return time.Time{}, false
	}
	rest := head[i+len(`"time":"`):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(rest[:j]))
	return t, err == nil
}

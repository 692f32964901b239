// Package metrics defines Herald's Prometheus metrics and serves them.
package metrics

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"herald/activities"
	"herald/store"
)

// Metrics holds the collectors of one process.
type Metrics struct {
	Registry *prometheus.Registry

	attempts   *prometheus.CounterVec
	delivered  prometheus.Counter
	latency    prometheus.Histogram
	attemptsOK prometheus.Histogram
	rejections *prometheus.CounterVec
}

// New registers Herald's collectors and the Go runtime's in a new registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_delivery_attempts_total",
		Help: "Delivery attempts (HTTP POSTs) by result (delivered or failed) and error code.",
	}, []string{"result", "code"})
	m.delivered = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "herald_deliveries_total",
		Help: "Events delivered (2xx) to a subscription.",
	})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_delivery_latency_seconds",
		Help:    "Time from an event's publication to its 2xx delivery.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
	})
	m.attemptsOK = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_delivery_attempts_per_delivery",
		Help:    "The attempt number at which an event was delivered.",
		Buckets: []float64{1, 2, 3, 4, 5, 6, 7, 8, 10, 20},
	})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_publish_rejections_total",
		Help: "Rejected publishes by code.",
	}, []string{"code"})
	m.Registry.MustRegister(m.attempts, m.delivered, m.latency, m.attemptsOK, m.rejections,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Attempted records one delivery attempt (activities.Observer).
func (m *Metrics) Attempted(_ string, envelope []byte, attempt int, r activities.PostResult) {
	if r.Delivered() {
		m.attempts.WithLabelValues("delivered", "").Inc()
		m.delivered.Inc()
		m.attemptsOK.Observe(float64(attempt))
		if t, ok := publishedAt(envelope); ok {
			m.latency.Observe(time.Since(t).Seconds())
		}
		return
	}
	m.attempts.WithLabelValues("failed", r.Code).Inc()
}

// Rejected counts a rejected publish.
func (m *Metrics) Rejected(code string) { m.rejections.WithLabelValues(code).Inc() }

// RelayLag exports the relay's lag, read from the database once per scrape.
func (m *Metrics) RelayLag(read func(context.Context) (store.Lag, error)) {
	m.Registry.MustRegister(relayLag{read: read})
}

var (
	undispatchedDesc = prometheus.NewDesc("herald_relay_undispatched_events",
		"Accepted events not yet handed to Temporal (-1 when the database did not answer).", nil, nil)
	oldestAgeDesc = prometheus.NewDesc("herald_relay_oldest_undispatched_age_seconds",
		"Age of the oldest undispatched event.", nil, nil)
)

// relayLag collects both lag figures from one query.
type relayLag struct {
	read func(context.Context) (store.Lag, error)
}

func (c relayLag) Describe(ch chan<- *prometheus.Desc) {
	ch <- undispatchedDesc
	ch <- oldestAgeDesc
}

func (c relayLag) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := c.read(ctx)
	if err != nil {
		l = store.Lag{Undispatched: -1}
	}
	ch <- prometheus.MustNewConstMetric(undispatchedDesc, prometheus.GaugeValue, float64(l.Undispatched))
	ch <- prometheus.MustNewConstMetric(oldestAgeDesc, prometheus.GaugeValue, l.OldestAge.Seconds())
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

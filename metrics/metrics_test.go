package metrics_test

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"

	"herald/metrics"
	"herald/store"
)

// gather returns the samples of the named families as
// "name{label=value,...} value", sorted.
func gather(t *testing.T, m *metrics.Metrics, names ...string) []string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		want := false
		for _, n := range names {
			want = want || mf.GetName() == n
		}
		if !want {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
			out = append(out, mf.GetName()+"{"+strings.Join(labels, ",")+"} "+strconvF(v))
		}
	}
	sort.Strings(out)
	return out
}

func strconvF(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func check(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestHeldGauges(t *testing.T) {
	m := metrics.New()
	var fail bool
	m.Held(func(context.Context) ([]store.HeldCounts, error) {
		if fail {
			return nil, errors.New("database down")
		}
		return []store.HeldCounts{{SubscriptionID: "billing:t@1", App: "billing", Queued: 7, PendingKeys: 2, FailedKeys: 1,
			RetryingKeys: 3, UnreachableKeys: 4, PausedKeys: 5, BlockedKeys: 6}}, nil
	})
	names := []string{"herald_subscription_keys", "herald_subscription_metrics_up", "herald_subscription_queued_events"}
	check(t, gather(t, m, names...),
		`herald_subscription_keys{app=billing,status=blocked,subscription=billing:t@1} 6`,
		`herald_subscription_keys{app=billing,status=failed,subscription=billing:t@1} 1`,
		`herald_subscription_keys{app=billing,status=paused,subscription=billing:t@1} 5`,
		`herald_subscription_keys{app=billing,status=pending,subscription=billing:t@1} 2`,
		`herald_subscription_keys{app=billing,status=retrying,subscription=billing:t@1} 3`,
		`herald_subscription_keys{app=billing,status=unreachable,subscription=billing:t@1} 4`,
		`herald_subscription_metrics_up{} 1`,
		`herald_subscription_queued_events{app=billing,subscription=billing:t@1} 7`)
	fail = true
	check(t, gather(t, m, names...), `herald_subscription_metrics_up{} 0`)
}

func TestRejectedWithoutAppIsUnknown(t *testing.T) {
	m := metrics.New()
	m.Rejected("", "unknown_app")
	m.Rejected("contacts", "data_invalid")
	m.Rejected("contacts", "data_invalid")
	check(t, gather(t, m, "herald_publish_rejections_total"),
		`herald_publish_rejections_total{app=contacts,code=data_invalid} 2`,
		`herald_publish_rejections_total{app=unknown,code=unknown_app} 1`)
}

func TestWorkerReady(t *testing.T) {
	m := metrics.New()
	healthy := true
	m.ReadyCheck(func() bool { return healthy })
	check(t, gather(t, m, "herald_worker_ready"), `herald_worker_ready{} 0`)
	m.SetReady(true)
	check(t, gather(t, m, "herald_worker_ready"), `herald_worker_ready{} 1`)
	healthy = false
	check(t, gather(t, m, "herald_worker_ready"), `herald_worker_ready{} 0`)
}

func TestRelayBackoffMetrics(t *testing.T) {
	m := metrics.New()
	var fail bool
	m.RelayLag(func(context.Context) (store.Lag, error) {
		if fail {
			return store.Lag{}, errors.New("database down")
		}
		return store.Lag{Undispatched: 3, Dead: 2}, nil
	})
	m.RelayRound(0, 0)
	m.RelayRound(2, 1)
	m.RelayRound(1, 0)
	names := []string{"herald_relay_signal_failures_total", "herald_relay_dead_events_total",
		"herald_relay_dead_events", "herald_relay_undispatched_events"}
	check(t, gather(t, m, names...),
		`herald_relay_dead_events_total{} 1`,
		`herald_relay_dead_events{} 2`,
		`herald_relay_signal_failures_total{} 3`,
		`herald_relay_undispatched_events{} 3`)
	fail = true
	check(t, gather(t, m, names...),
		`herald_relay_dead_events_total{} 1`,
		`herald_relay_dead_events{} -1`,
		`herald_relay_signal_failures_total{} 3`,
		`herald_relay_undispatched_events{} -1`)
}

// TestFilterErrors: the relay's failed content filters are counted per
// subscription and reason.
func TestFilterErrors(t *testing.T) {
	m := metrics.New()
	m.FilterErrors("billing:t@1", "eval_error", 3)
	m.FilterErrors("billing:t@1", "timeout", 1)
	m.FilterErrors("billing:t@1", "eval_error", 2)
	m.FilterErrors("crm:t@1", "cost_limit", 0)
	check(t, gather(t, m, "herald_relay_filter_errors_total"),
		`herald_relay_filter_errors_total{reason=eval_error,subscription=billing:t@1} 5`,
		`herald_relay_filter_errors_total{reason=timeout,subscription=billing:t@1} 1`)
}

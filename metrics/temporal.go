package metrics

import (
	"io"
	"time"

	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// TemporalHandler exports the Temporal SDK's own metrics (workflow and
// activity task latencies, poller counts, sticky cache, …) into the same
// registry, prefixed temporal_. Close the returned closer at shutdown.
func (m *Metrics) TemporalHandler() (client.MetricsHandler, io.Closer) {
	reporter := tallyprom.NewReporter(tallyprom.Options{Registerer: m.Registry})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		Prefix:          "temporal",
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, time.Second)
	return sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), closer
}

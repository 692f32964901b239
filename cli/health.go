package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"herald/config"
)

// Worker readiness, as starter status reports it.
const (
	// envWorkerURL names the worker's HTTP base URL.
	envWorkerURL = "HERALD_WORKER_URL"
	// defaultWorkerURL is the worker's default HERALD_HTTP_ADDR as a URL.
	defaultWorkerURL = "http://" + config.DefaultHTTPAddr
	readyzTimeout    = 3 * time.Second

	workerReady       = "ready"
	workerNotReady    = "not ready"
	workerUnreachable = "unreachable"
)

// workerJSON is the worker's readiness in starter status.
type workerJSON struct {
	URL string `json:"url"`
	// State is "ready", "not ready" or "unreachable".
	State string `json:"state"`
	// Detail says why the worker is not ready or could not be reached.
	Detail string `json:"detail,omitempty"`
}

// workerURL is the worker's base URL from HERALD_WORKER_URL.
func (inv *invocation) workerURL() string {
	if u := strings.TrimSpace(inv.getenv(envWorkerURL)); u != "" {
		return strings.TrimRight(u, "/")
	}
	return defaultWorkerURL
}

// checkWorker asks the worker's /readyz whether it can reach PostgreSQL and
// Temporal.
func checkWorker(ctx context.Context, baseURL string) workerJSON {
	out := workerJSON{URL: baseURL + "/readyz"}
	ctx, cancel := context.WithTimeout(ctx, readyzTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, out.URL, nil)
	if err != nil {
		out.State, out.Detail = workerUnreachable, fmt.Sprintf("bad %s: %v", envWorkerURL, err)
		return out
	}
	// No proxy from the environment: the worker is usually on loopback.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: readyzTimeout}
	resp, err := client.Do(req)
	if err != nil {
		out.State, out.Detail = workerUnreachable, err.Error()
		return out
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		out.State = workerReady
		return out
	}
	out.State, out.Detail = workerNotReady, notReadyReason(resp.StatusCode, body)
	return out
}

// notReadyReason names the failing checks of a /readyz answer, such as
// "temporal: connection refused", or its HTTP status.
func notReadyReason(status int, body []byte) string {
	var checks map[string]any
	if json.Unmarshal(body, &checks) == nil {
		var failing []string
		for _, name := range []string{"database", "temporal"} {
			if v, ok := checks[name].(string); ok && v != "ok" {
				failing = append(failing, name+": "+v)
			}
		}
		if len(failing) > 0 {
			return strings.Join(failing, "; ")
		}
	}
	return fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
}

// workerText is the worker line of starter status.
func (w workerJSON) text() string {
	if w.Detail == "" {
		return w.State
	}
	return w.State + " (" + w.Detail + ")"
}

// keysJSON counts running delivery workflows by status in starter status.
type keysJSON struct {
	Address   string `json:"address"`
	Namespace string `json:"namespace"`
	// Reachable reports that starter could connect to Temporal.
	Reachable bool `json:"reachable"`
	// Error is set when the keys could not be counted; the counts are then absent.
	Error    string           `json:"error,omitempty"`
	ByStatus map[string]int64 `json:"byStatus,omitempty"`
	// Total counts every running delivery workflow, including ones that
	// have not recorded a status yet.
	Total int64 `json:"total"`
}

// countKeys counts the running delivery workflows per status. Temporal's
// visibility can group counts by ExecutionStatus only, so each status gets
// its own count.
func (inv *invocation) countKeys() keysJSON {
	var out keysJSON
	cfg, err := config.LoadCommon(inv.getenv)
	if err != nil {
		out.Error = fmt.Sprintf("read configuration: %v", err)
		return out
	}
	out.Address, out.Namespace = cfg.TemporalAddress, cfg.TemporalNamespace
	tc, err := inv.dialTemporal()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer tc.Close()
	out.Reachable = true
	byStatus := map[string]int64{}
	for _, s := range deliveryStatuses {
		if byStatus[s], err = tc.countDeliveries(inv.ctx, deliveryFilter{Status: s}); err != nil {
			out.Error = err.Error()
			return out
		}
	}
	if out.Total, err = tc.countDeliveries(inv.ctx, deliveryFilter{}); err != nil {
		out.Error = err.Error()
		return out
	}
	out.ByStatus = byStatus
	return out
}

// countDeliveries counts the running delivery workflows matching f.
func (tc *temporalConn) countDeliveries(ctx context.Context, f deliveryFilter) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, temporalCallTimeout)
	defer cancel()
	resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: tc.namespace, Query: f.query()})
	if err != nil {
		return 0, fmt.Errorf("count delivery workflows in namespace %s: %w", tc.namespace, err)
	}
	return resp.GetCount(), nil
}

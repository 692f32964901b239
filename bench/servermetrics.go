package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Visibility counts the writes a Temporal server made to its visibility
// store (the table the UI and List/Count queries read), from the server's
// own counter visibility_persistence_requests, by operation: requests,
// so a write tried again counts again. On the dev server's SQLite file
// each is a row written with all of the table's indexes, some 4-5 ms of
// the server's CPU on this machine, so they are much of what a workflow
// per key costs it (docs/performance.md). The server records a run's
// start only if the run is still open when its visibility task comes
// round: a run that completes within milliseconds (the floor's) usually
// has only its close written.
type Visibility struct {
	// Started: RecordWorkflowExecutionStarted; Closed:
	// RecordWorkflowExecutionClosed; Upserted: UpsertWorkflowExecution
	// (search-attribute upserts, and a start's first task changing them).
	Started  float64 `json:"started"`
	Closed   float64 `json:"closed"`
	Upserted float64 `json:"upserted"`
	// Beside the visibility store, the same reading counts the server's
	// requests to its main store (storeCounter: histories, runs' state,
	// tasks, namespaces), Store all of them and ClusterMetadata its reads
	// of the cluster's metadata (GetCurrentClusterMetadata), which holds
	// the search attributes' types. A server's search-attribute cache
	// reads those once a minute; the dev server's CLI turns the cache off
	// (so that a new attribute is seen at once), and the server then reads
	// them whenever it handles a run's search attributes, one SQLite read
	// each (3 a run of the floor's, which sets none of its own, on this
	// machine). Zero in results written before they were counted.
	Store           float64 `json:"store,omitempty"`
	ClusterMetadata float64 `json:"clusterMetadata,omitempty"`
}

// Sub is v - o: what was requested between two readings.
func (v Visibility) Sub(o Visibility) Visibility {
	return Visibility{Started: v.Started - o.Started, Closed: v.Closed - o.Closed, Upserted: v.Upserted - o.Upserted,
		Store: v.Store - o.Store, ClusterMetadata: v.ClusterMetadata - o.ClusterMetadata}
}

// Add is v + o.
func (v Visibility) Add(o Visibility) Visibility {
	return Visibility{Started: v.Started + o.Started, Closed: v.Closed + o.Closed, Upserted: v.Upserted + o.Upserted,
		Store: v.Store + o.Store, ClusterMetadata: v.ClusterMetadata + o.ClusterMetadata}
}

// visibilityCounter is the server's counter of visibility store requests,
// storeCounter its counter of main store requests.
const (
	visibilityCounter = "visibility_persistence_requests"
	storeCounter      = "persistence_requests"
)

// parseVisibility sums the visibility writes and the main store's
// requests in a Prometheus text exposition, over every namespace and
// service, and reports whether the visibility counter was there: a server
// registers it on its first visibility request, and one that exports it
// under another name (an OpenTelemetry exporter's _total) would otherwise
// read as writing nothing.
func parseVisibility(r io.Reader) (Visibility, bool, error) {
	// Only the counters' own lines go to the parser: a server that many
	// namespaces have used (make test's) exposes megabytes of other
	// series, which took longer than a reading may under the race
	// detector.
	var kept bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if line := sc.Bytes(); isCounterLine(line, visibilityCounter) || isCounterLine(line, storeCounter) {
			kept.Write(line)
			kept.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return Visibility{}, false, fmt.Errorf("read the server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(&kept)
	if err != nil {
		return Visibility{}, false, fmt.Errorf("parse the server's metrics: %w", err)
	}
	// each calls f with each sample of the named counter (none when the
	// server has not registered it) and its operation label.
	each := func(name string, f func(op string, value float64)) {
		for _, m := range families[name].GetMetric() {
			var value float64
			switch {
			case m.GetCounter() != nil:
				value = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				value = m.GetUntyped().GetValue()
			default:
				continue
			}
			op := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" {
					op = l.GetValue()
				}
			}
			f(op, value)
		}
	}
	var v Visibility
	each(storeCounter, func(op string, value float64) {
		v.Store += value
		if op == "GetCurrentClusterMetadata" {
			v.ClusterMetadata += value
		}
	})
	if _, ok := families[visibilityCounter]; !ok {
		return v, false, nil
	}
	each(visibilityCounter, func(op string, value float64) {
		switch op {
		case "RecordWorkflowExecutionStarted":
			v.Started += value
		case "RecordWorkflowExecutionClosed":
			v.Closed += value
		case "UpsertWorkflowExecution":
			v.Upserted += value
		}
	})
	return v, true, nil
}

// isCounterLine reports whether an exposition line is one of the named
// counter's: a sample, or its HELP or TYPE comment.
func isCounterLine(line []byte, name string) bool {
	for _, comment := range [][]byte{[]byte("# HELP "), []byte("# TYPE ")} {
		if rest, ok := bytes.CutPrefix(line, comment); ok {
			line = rest
			break
		}
	}
	rest, ok := bytes.CutPrefix(line, []byte(name))
	return ok && len(rest) > 0 && (rest[0] == '{' || rest[0] == ' ')
}

// readVisibility reads the visibility writes from a server's metrics
// endpoint (scripts/temporal.sh's DIR/metrics-port), as parseVisibility.
func readVisibility(ctx context.Context, url string) (Visibility, bool, error) {
	// The server renders every series it has; under make test's load
	// that took seconds.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Visibility{}, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Visibility{}, false, fmt.Errorf("read the server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Visibility{}, false, fmt.Errorf("read the server's metrics: %s answered %s", url, resp.Status)
	}
	return parseVisibility(resp.Body)
}

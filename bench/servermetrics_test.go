package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A dev server's exposition (scripts/temporal.sh, CLI v1.5.1), cut down:
// the visibility writes of two services, reads, and another counter.
const visibilityExposition = `# HELP persistence_requests persistence_requests counter
# TYPE persistence_requests counter
persistence_requests{namespace="system",operation="GetNamespace",service_name="history"} 10018
persistence_requests{namespace="bench",operation="GetCurrentClusterMetadata",service_name="frontend"} 300
persistence_requests{namespace="bench",operation="GetCurrentClusterMetadata",service_name="history"} 250
persistence_requests{namespace="bench",operation="CreateWorkflowExecution",service_name="history"} 100
# HELP persistence_requests_other another counter whose name begins alike
# TYPE persistence_requests_other counter
persistence_requests_other{operation="GetCurrentClusterMetadata"} 7
# HELP visibility_persistence_requests visibility_persistence_requests counter
# TYPE visibility_persistence_requests counter
visibility_persistence_requests{operation="ListWorkflowExecutions",service_name="worker",visibility_index_name="db",visibility_plugin_name="sqlite"} 37
visibility_persistence_requests{operation="RecordWorkflowExecutionClosed",service_name="history",visibility_index_name="db",visibility_plugin_name="sqlite"} 18001
visibility_persistence_requests{operation="RecordWorkflowExecutionStarted",service_name="history",visibility_index_name="db",visibility_plugin_name="sqlite"} 8654
visibility_persistence_requests{operation="RecordWorkflowExecutionStarted",service_name="worker",visibility_index_name="db",visibility_plugin_name="sqlite"} 6
visibility_persistence_requests{operation="UpsertWorkflowExecution",service_name="history",visibility_index_name="db",visibility_plugin_name="sqlite"} 5
`

func TestParseVisibility(t *testing.T) {
	v, found, err := parseVisibility(strings.NewReader(visibilityExposition))
	if err != nil || !found {
		t.Fatalf("parsed: found %v, %v", found, err)
	}
	// Visibility writes only, summed over services; visibility reads and
	// other counters left out. The main store's requests of every
	// operation and service, the cluster metadata's reads among them.
	if want := (Visibility{Started: 8660, Closed: 18001, Upserted: 5, Store: 10668, ClusterMetadata: 550}); v != want {
		t.Errorf("parsed %+v, want %+v", v, want)
	}
	if got := v.Sub(Visibility{Started: 8000, Closed: 18000, Store: 10000, ClusterMetadata: 500}); got !=
		(Visibility{Started: 660, Closed: 1, Upserted: 5, Store: 668, ClusterMetadata: 50}) {
		t.Errorf("difference %+v, want 660, 1, 5, 668, 50", got)
	}
	// A server that has written nothing yet has no such counter; nor has
	// one that names it otherwise. Its main store's requests still count.
	for _, text := range []string{"# TYPE up gauge\nup 1\n",
		"# TYPE visibility_persistence_requests_total counter\nvisibility_persistence_requests_total{operation=\"RecordWorkflowExecutionClosed\"} 3\n"} {
		if v, found, err := parseVisibility(strings.NewReader(text)); err != nil || found || v != (Visibility{}) {
			t.Errorf("without the counter: %+v, found %v, %v; want zero counts, not found, no error", v, found, err)
		}
	}
	text := "# TYPE persistence_requests counter\npersistence_requests{operation=\"GetCurrentClusterMetadata\"} 4\n"
	if v, found, err := parseVisibility(strings.NewReader(text)); err != nil || found || v != (Visibility{Store: 4, ClusterMetadata: 4}) {
		t.Errorf("the main store's counter alone: %+v, found %v, %v; want 4 requests and reads, not found, no error", v, found, err)
	}
	if _, _, err := parseVisibility(strings.NewReader("visibility_persistence_requests{operation=\n")); err == nil {
		t.Error("a broken exposition parsed without an error")
	}
}

// TestCounterLines: a line is a counter's when it names that counter, not
// one whose name begins or ends alike.
func TestCounterLines(t *testing.T) {
	for _, c := range []struct {
		line, name string
		want       bool
	}{
		{`persistence_requests{operation="GetNamespace"} 3`, storeCounter, true},
		{`persistence_requests 3`, storeCounter, true},
		{`# TYPE persistence_requests counter`, storeCounter, true},
		{`# HELP persistence_requests persistence_requests counter`, storeCounter, true},
		{`persistence_requests_other{operation="GetNamespace"} 7`, storeCounter, false},
		{`visibility_persistence_requests{operation="RecordWorkflowExecutionClosed"} 5`, storeCounter, false},
		{`visibility_persistence_requests{operation="RecordWorkflowExecutionClosed"} 5`, visibilityCounter, true},
		{`# TYPE visibility_persistence_requests_total counter`, visibilityCounter, false},
		{`persistence_requests`, storeCounter, false},
	} {
		if got := isCounterLine([]byte(c.line), c.name); got != c.want {
			t.Errorf("isCounterLine(%q, %s) = %v, want %v", c.line, c.name, got, c.want)
		}
	}
}

func TestReadVisibility(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(visibilityExposition))
	}))
	defer srv.Close()
	v, found, err := readVisibility(context.Background(), srv.URL+"/metrics")
	if err != nil || !found || v.Closed != 18001 {
		t.Errorf("read %+v (found %v), %v; want 18001 closed", v, found, err)
	}
	if _, _, err := readVisibility(context.Background(), srv.URL+"/nothing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404 read as %v, want an error naming it", err)
	}
}

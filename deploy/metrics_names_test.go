package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// registeredMetrics returns the herald_ metric names the metrics package
// registers: the Name of its collector options and of its descriptors.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, "metrics", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(herald_[a-z0-9_]+)"`)
	names := map[string]bool{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d registered herald_ metrics in metrics/: %v", len(names), names)
	}
	return names
}

var usedMetric = regexp.MustCompile(`herald_[a-z0-9_]+`)

// usedMetrics returns the herald_ names in text, a histogram's series
// (_bucket, _sum, _count) reduced to the registered histogram's name.
func usedMetrics(text string, registered map[string]bool) []string {
	seen := map[string]bool{}
	for _, n := range usedMetric.FindAllString(text, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && !registered[n] && registered[base] {
				n = base
			}
		}
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestAlertAndDashboardMetricsExist: every herald_ metric the alert rules,
// their tests, the dashboard and the metrics page use is one the worker
// registers, so a rename cannot leave them silently empty.
func TestAlertAndDashboardMetricsExist(t *testing.T) {
	registered := registeredMetrics(t)
	for _, file := range []string{
		"deploy/prometheus/alerts.yml",
		"deploy/prometheus/alerts_test.yml",
		"deploy/grafana/herald.json",
		"docs/metrics.md",
	} {
		src, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		used := usedMetrics(string(src), registered)
		if len(used) == 0 {
			t.Errorf("%s uses no herald_ metric", file)
		}
		for _, n := range used {
			if !registered[n] {
				t.Errorf("%s uses %s, which metrics/ does not register", file, n)
			}
		}
	}
}

// TestMetricsDocumented: docs/metrics.md names every registered metric.
func TestMetricsDocumented(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	registered := registeredMetrics(t)
	documented := usedMetrics(string(src), registered)
	for n := range registered {
		if !slices.Contains(documented, n) {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
}

// TestDashboardJSON: the dashboard is valid JSON with a Prometheus
// datasource variable that every panel and query uses.
func TestDashboardJSON(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "herald.json"))
	if err != nil {
		t.Fatal(err)
	}
	type ds struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title      string `json:"title"`
			Datasource ds     `json:"datasource"`
			Targets    []struct {
				Datasource ds     `json:"datasource"`
				Expr       string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(src, &d); err != nil {
		t.Fatalf("herald.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q", d.Title, d.UID)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error("no Prometheus datasource variable named datasource")
	}
	want := ds{Type: "prometheus", UID: "${datasource}"}
	for _, p := range d.Panels {
		if p.Datasource != want || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d targets", p.Title, p.Datasource, len(p.Targets))
		}
		for _, q := range p.Targets {
			if q.Datasource != want || q.Expr == "" {
				t.Errorf("panel %q: query %q with datasource %+v", p.Title, q.Expr, q.Datasource)
			}
		}
	}
	if len(d.Panels) < 7 {
		t.Errorf("%d panels, want at least 7", len(d.Panels))
	}
}

package deploy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestAlertsTableIsTheRules holds the table of docs/metrics.md#alerts to
// deploy/prometheus/alerts.yml: the same alerts, each with its expression,
// its `for` (— for none) and its severity.
func TestAlertsTableIsTheRules(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `json:"alert"`
				Expr   string            `json:"expr"`
				For    string            `json:"for"`
				Labels map[string]string `json:"labels"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	type rule struct{ expr, forDur, severity string }
	inFile := map[string]rule{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				inFile[r.Alert] = rule{strings.TrimSpace(r.Expr), r.For, r.Labels["severity"]}
			}
		}
	}
	documented := map[string]bool{}
	for _, row := range tableAfter(t, "docs/metrics.md", "\n## Alerts\n") {
		if len(row) != 4 {
			t.Errorf("docs/metrics.md alerts: a row with %d cells, want 4: %q", len(row), row)
			continue
		}
		name, expr := strings.Trim(row[0], "`"), strings.Trim(row[1], "`")
		documented[name] = true
		r, ok := inFile[name]
		if !ok {
			t.Errorf("docs/metrics.md documents the alert %s, which alerts.yml does not have", name)
			continue
		}
		if expr != r.expr {
			t.Errorf("docs/metrics.md: %s's expression is %q; alerts.yml says %q", name, expr, r.expr)
		}
		forDur := row[2]
		if strings.HasPrefix(forDur, "—") {
			forDur = ""
		}
		if forDur != r.forDur {
			t.Errorf("docs/metrics.md: %s's for is %q; alerts.yml says %q", name, row[2], r.forDur)
		}
		if row[3] != r.severity {
			t.Errorf("docs/metrics.md: %s's severity is %q; alerts.yml says %q", name, row[3], r.severity)
		}
	}
	for name := range inFile {
		if !documented[name] {
			t.Errorf("alerts.yml has the alert %s; docs/metrics.md#alerts does not document it", name)
		}
	}
}

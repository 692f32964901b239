package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"herald/activities"
)

// attemptCodes are the codes of one delivery attempt that the runbook and
// the design's HTTP contract explain, each a constant of activities.
var attemptCodes = []string{
	activities.CodeSchemaMismatch, activities.CodeSubscriptionUnavailable, activities.CodeThrottled,
	activities.CodeHandlerFailed, activities.CodeHandlerTimeout, activities.CodeConnectionLost,
	activities.CodeSubscriberUnreachable, activities.CodeEndpointForbidden,
}

// tableAfter returns the rows of the first Markdown table after heading in
// page, each cut into its trimmed cells.
func tableAfter(t *testing.T, page, heading string) [][]string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), heading)
	if !ok {
		t.Fatalf("%s has no %q", page, heading)
	}
	var rows [][]string
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		if strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("%s: no table after %q", page, heading)
	}
	return rows[1:]
}

var codeCell = regexp.MustCompile("^`([a-z_]+)`$")

// TestAttemptCodesAreDocumented holds the runbook's table of error codes and
// the design's HTTP contract to the attempt codes: each code once, and the
// runbook's "retried?" to activities.IsTerminal.
func TestAttemptCodesAreDocumented(t *testing.T) {
	var runbook []string
	for _, r := range tableAfter(t, "docs/runbook.md", "### Error codes\n") {
		m := codeCell.FindStringSubmatch(r[0])
		if m == nil || len(r) < 3 {
			t.Errorf("docs/runbook.md error codes: a row without a code: %q", r)
			continue
		}
		runbook = append(runbook, m[1])
		if terminal := regexp.MustCompile(`^no\b`).MatchString(r[2]); terminal != activities.IsTerminal(m[1]) {
			t.Errorf("docs/runbook.md: %s retried? %q; the code retries it: %v", m[1], r[2], !activities.IsTerminal(m[1]))
		}
	}
	var design []string
	for _, r := range tableAfter(t, "docs/design.md", "| the subscriber's answer | code | what Herald does |") {
		if m := codeCell.FindStringSubmatch(r[1]); m != nil {
			design = append(design, m[1])
			if terminal := r[2] == "terminal"; terminal != activities.IsTerminal(m[1]) {
				t.Errorf("docs/design.md: %s is %q; terminal in the code: %v", m[1], r[2], activities.IsTerminal(m[1]))
			}
		}
	}
	for _, got := range []struct {
		page  string
		codes []string
	}{{"docs/runbook.md", runbook}, {"docs/design.md", design}} {
		slices.Sort(got.codes)
		want := slices.Clone(attemptCodes)
		slices.Sort(want)
		if !slices.Equal(got.codes, want) {
			t.Errorf("%s documents the attempt codes %v; the code has %v", got.page, got.codes, want)
		}
	}
}

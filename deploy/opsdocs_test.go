package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOperationsPageListsTheOpenAPIPaths holds the table of endpoints of
// docs/operations-api.md to the paths of api/openapi.yaml, both ways. The
// table is read as Markdown renders it: its rows up to the first line that
// is not a row, so a table broken in two loses the rows after the break.
func TestOperationsPageListsTheOpenAPIPaths(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join(repoRoot, "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var inSpec []string
	for _, m := range regexp.MustCompile(`(?m)^  (/v1/ops/\S*):$`).FindAllSubmatch(spec, -1) {
		inSpec = append(inSpec, string(m[1]))
	}
	page, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations-api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## Endpoints\n")
	if !ok {
		t.Fatal("docs/operations-api.md has no ## Endpoints")
	}
	lines := strings.Split(section, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| path |") })
	if start < 0 {
		t.Fatal("docs/operations-api.md: no table of endpoints (| path | answers |)")
	}
	row := regexp.MustCompile("^\\| `(?:(GET|POST) )?(/v1/ops/[^`?\\[]*)")
	var documented []string
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		m := row.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("docs/operations-api.md: a row of the endpoints' table names no /v1/ops/ path: %s", l)
			continue
		}
		documented = append(documented, m[2])
	}
	for _, p := range inSpec {
		if !slices.Contains(documented, p) {
			t.Errorf("api/openapi.yaml serves %s; the table of docs/operations-api.md#endpoints does not list it", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(inSpec, p) {
			t.Errorf("docs/operations-api.md lists %s, which api/openapi.yaml does not have", p)
		}
	}
}

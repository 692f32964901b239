package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	heraldapi "herald/api"
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

// keyStatusLists are the places that list the statuses keys are listed by
// (GET /v1/ops/keys, the console's keys page): the first group holds them.
var keyStatusLists = []struct{ page, pattern string }{
	{"docs/operations-api.md", `running delivery keys in status (.*?) \(also`},
	{"docs/console.md", `running keys in one status \(([^)]*)\)`},
	{"docs/design.md", "`GET /v1/ops/keys\\?status=` \\(([^)]*)\\)"},
}

// TestKeyStatusListsAreTheAPIs holds each list of the statuses keys are
// listed by to api.KeyStatuses.
func TestKeyStatusListsAreTheAPIs(t *testing.T) {
	want := slices.Clone(heraldapi.KeyStatuses)
	slices.Sort(want)
	word := regexp.MustCompile("`([a-z_]+)`")
	for _, l := range keyStatusLists {
		src, err := os.ReadFile(filepath.Join(repoRoot, l.page))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(l.pattern).FindSubmatch(src)
		if m == nil {
			t.Errorf("%s no longer lists the key statuses as %q; update this test", l.page, l.pattern)
			continue
		}
		var got []string
		for _, w := range word.FindAllSubmatch(m[1], -1) {
			got = append(got, string(w[1]))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the key statuses %v; the API lists keys by %v", l.page, got, want)
		}
	}
}

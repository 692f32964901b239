package deploy_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	heraldapi "herald/api"
	"herald/store"
	"herald/workflows"
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

// TestSearchAttributesAreDocumented holds production.md's registration loop
// and its count, and docker.md's list, to workflows.SearchAttributes.
func TestSearchAttributesAreDocumented(t *testing.T) {
	want := map[string]string{}
	for _, k := range workflows.SearchAttributes {
		typ := map[enumspb.IndexedValueType]string{enumspb.INDEXED_VALUE_TYPE_KEYWORD: "Keyword", enumspb.INDEXED_VALUE_TYPE_INT: "Int"}[k.GetValueType()]
		want[k.GetName()] = typ
	}
	prod, err := os.ReadFile(filepath.Join(repoRoot, "docs", "production.md"))
	if err != nil {
		t.Fatal(err)
	}
	loop := map[string]string{}
	for _, m := range regexp.MustCompile(`\b(Herald[A-Za-z]+)=(Keyword|Int)\b`).FindAllSubmatch(prod, -1) {
		loop[string(m[1])] = string(m[2])
	}
	if !maps.Equal(loop, want) {
		t.Errorf("docs/production.md registers the search attributes %v; the workflow sets %v", loop, want)
	}
	if m := regexp.MustCompile(`Register Herald's (\w+) in that namespace`).FindSubmatch(prod); m == nil || string(m[1]) != numberWords[len(want)] {
		t.Errorf("docs/production.md does not count the search attributes as %s", numberWords[len(want)])
	}
	docker, err := os.ReadFile(filepath.Join(repoRoot, "docs", "docker.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("registers (`Herald[^|]*?) in it").FindSubmatch(docker)
	if m == nil {
		t.Fatal("docs/docker.md no longer lists the search attributes temporal-setup registers; update this test")
	}
	listed := map[string]string{}
	var pending []string
	for _, tok := range regexp.MustCompile("`(Herald[A-Za-z]+)`|\\((Keyword|Int)\\)").FindAllSubmatch(m[1], -1) {
		if len(tok[1]) > 0 {
			pending = append(pending, string(tok[1]))
			continue
		}
		for _, n := range pending {
			listed[n] = string(tok[2])
		}
		pending = nil
	}
	if !maps.Equal(listed, want) {
		t.Errorf("docs/docker.md lists the search attributes %v; the workflow sets %v", listed, want)
	}
}

// TestProblemCodesAreInTheContract: every problem code the API answers is
// in a table of docs/design.md's publishing or operations API.
func TestProblemCodesAreInTheContract(t *testing.T) {
	codes := []string{
		heraldapi.CodeUnauthorized, heraldapi.CodeNotFound, heraldapi.CodeMethodNotAllowed,
		heraldapi.CodeUnsupportedMediaType, heraldapi.CodeEventsRejected, heraldapi.CodeInternal,
		heraldapi.CodeAuthThrottled, heraldapi.CodeTokenBusy, heraldapi.CodeAppBusy, heraldapi.CodeLockTimeout, heraldapi.CodeBadParameter,
		heraldapi.CodeForbidden, heraldapi.CodeNothingToDo, heraldapi.CodeBadRequest,
	}
	var documented []string
	for _, heading := range []string{"\n## The publishing API\n", "\n## The operations API\n"} {
		for _, row := range tableAfter(t, "docs/design.md", heading) {
			if len(row) > 1 {
				if m := codeCell.FindStringSubmatch(row[1]); m != nil {
					documented = append(documented, m[1])
				}
			}
		}
	}
	for _, c := range codes {
		if !slices.Contains(documented, c) {
			t.Errorf("the API answers problem code %s; no table of docs/design.md's publishing or operations API has it", c)
		}
	}
}

// TestAuditActionsAreInTheContract: design.md#audit names every audit
// action Herald writes (store.AuditActions), and no other.
func TestAuditActionsAreInTheContract(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "\n## Audit\n")
	if !ok {
		t.Fatal("docs/design.md has no ## Audit")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	list, _, ok := strings.Cut(section, "`starter audit` lists")
	if !ok {
		t.Fatal("docs/design.md#audit: the list of actions no longer ends before `starter audit` lists; update this test")
	}
	var named []string
	for _, m := range regexp.MustCompile("`([a-z_]+\\.[a-z_.]+)`").FindAllStringSubmatch(list, -1) {
		named = append(named, m[1])
	}
	actions := store.AuditActions()
	for _, a := range actions {
		if !slices.Contains(named, a) {
			t.Errorf("Herald writes the audit action %s; docs/design.md#audit does not name it", a)
		}
	}
	for _, a := range named {
		if !slices.Contains(actions, a) {
			t.Errorf("docs/design.md#audit names %s, which is no audit action of store.AuditActions", a)
		}
	}
}

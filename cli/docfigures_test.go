package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"herald/internal/testenv"
)

// TestRunbookQuotesTheListingDefault: the runbook's page size of starter
// deliveries is the command's.
func TestRunbookQuotesTheListingDefault(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("at most `--limit` keys \\((\\d+) by default\\)").FindSubmatch(src)
	if m == nil {
		t.Fatal("docs/runbook.md no longer quotes the default of starter deliveries --limit; update this test")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != defaultDeliveriesLimit {
		t.Errorf("docs/runbook.md: starter deliveries lists %d keys by default; the code says %d", n, defaultDeliveriesLimit)
	}
}

// TestKeyStatusesAreDocumented holds design.md's list of a key's statuses
// and the runbook's table of them to the statuses a delivery workflow can
// be in.
func TestKeyStatusesAreDocumented(t *testing.T) {
	t.Parallel()
	want := slices.Clone(deliveryStatuses)
	slices.Sort(want)
	read := func(page string) string {
		src, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", page))
		if err != nil {
			t.Fatal(err)
		}
		return string(src)
	}
	word := regexp.MustCompile("`([a-z]+)`")
	m := regexp.MustCompile(`(?s)\*\*Statuses\*\* \(also the ` + "`HeraldStatus`" + `.*?\): (.*?)\.`).FindStringSubmatch(read("design.md"))
	if m == nil {
		t.Fatal("docs/design.md no longer lists the statuses after **Statuses**; update this test")
	}
	var design []string
	for _, w := range word.FindAllStringSubmatch(m[1], -1) {
		design = append(design, w[1])
	}
	_, table, ok := strings.Cut(read("runbook.md"), "### Statuses\n")
	if !ok {
		t.Fatal("docs/runbook.md has no ### Statuses")
	}
	var runbook []string
	for _, r := range regexp.MustCompile("(?m)^\\| `([a-z]+)` \\|").FindAllStringSubmatch(strings.SplitN(table, "\n###", 2)[0], -1) {
		runbook = append(runbook, r[1])
	}
	for page, got := range map[string][]string{"docs/design.md": design, "docs/runbook.md": runbook} {
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the key statuses %v; a delivery workflow's are %v", page, got, want)
		}
	}
}

// TestRunbookBatchQueryIsTheCLIs: the runbook's batch jobs for every failed
// key of a subscription select the keys redeliver --all-failed acts on.
func TestRunbookBatchQueryIsTheCLIs(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "### Every failed key of a subscription at once")
	if !ok {
		t.Fatal("docs/runbook.md has no section for every failed key of a subscription")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	squeeze := strings.NewReplacer(" ", "", "\t", "")
	want := squeeze.Replace(deliveryFilter{Subscription: "billing:contacts.person.updated@1", AnyStatus: heldStatuses}.query())
	queries := regexp.MustCompile(`--query '([^']*)'`).FindAllStringSubmatch(section, -1)
	if len(queries) == 0 {
		t.Fatal("docs/runbook.md: no --query in the section for every failed key; update this test")
	}
	for _, q := range queries {
		if got := squeeze.Replace(q[1]); got != want {
			t.Errorf("docs/runbook.md: the batch job selects %s; redeliver --all-failed selects %s", q[1], want)
		}
	}
}

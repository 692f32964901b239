package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// devPage lists the variables of the tests, the benchmark and the chaos
// suite.
const devPage = "../docs/development.md"

// notVariables are HERALD_ names in tests that no test reads from the
// environment.
var notVariables = map[string]string{
	"HERALD_RETRY_SCHEDUL": "deploy/compose_broken_test.go plants the misspelling in a compose file",
}

// testVariables lists the HERALD_ and TEMPORAL_ names in the tests, the
// benchmark, the chaos suite, the end-to-end tests, internal/ and the
// scripts that the programs do not read (those are in configuration.md).
func testVariables(t *testing.T) []string {
	t.Helper()
	programs := map[string]bool{}
	for _, r := range readEnvTable(t) {
		programs[r.name] = true
	}
	lit := regexp.MustCompile(`"((?:HERALD|TEMPORAL)_[A-Z0-9_]+)"`)
	testOnly := map[string]bool{"bench": true, "chaos": true, "e2e": true, "internal": true}
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		top, _, _ := strings.Cut(strings.TrimPrefix(filepath.ToSlash(path), "../"), "/")
		if !strings.HasSuffix(path, ".go") || (!testOnly[top] && !strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(src), -1) {
			if !programs[m[1]] && notVariables[m[1]] == "" {
				seen[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The scripts the tests start their services with (scripts/pg.sh,
	// scripts/temporal.sh) read variables of their own.
	scripts, err := filepath.Glob("../scripts/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	shellVar := regexp.MustCompile(`\$\{?((?:HERALD|TEMPORAL)_[A-Z0-9_]+)`)
	for _, path := range scripts {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range shellVar.FindAllStringSubmatch(string(src), -1) {
			if !programs[m[1]] {
				seen[m[1]] = true
			}
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestDevelopmentPageListsTestVariables keeps the table of the tests'
// variables in docs/development.md and the tests in step, both ways.
func TestDevelopmentPageListsTestVariables(t *testing.T) {
	src, err := os.ReadFile(devPage)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(src), "## Variables of the tests")
	if !ok {
		t.Fatalf("%s has no section Variables of the tests", devPage)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	documented := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| ((?:`[A-Z][A-Z0-9_]*`(?:, )?)+) \\|")
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		for _, n := range strings.Split(m[1], ", ") {
			documented[strings.Trim(n, "`")] = true
		}
	}
	inTests := testVariables(t)
	for _, n := range inTests {
		if !documented[n] {
			t.Errorf("the tests read %s but %s does not list it", n, devPage)
		}
	}
	for n := range documented {
		if !slices.Contains(inTests, n) && n != "HERALD_DATABASE_URL" && n != "TEMPORAL_ADDRESS" {
			t.Errorf("%s lists %s, which no test reads", devPage, n)
		}
	}
}

// TestDocsNameOnlyKnownVariables: every HERALD_ or TEMPORAL_ variable a page
// of the docs names is a row of configuration.md's table (the programs') or
// of development.md's (the tests'), so a page cannot keep a renamed or
// removed variable.
func TestDocsNameOnlyKnownVariables(t *testing.T) {
	known := map[string]bool{}
	for _, r := range readEnvTable(t) {
		known[r.name] = true
	}
	for _, n := range testVariables(t) {
		known[n] = true
	}
	known["HERALD_DATABASE_URL"], known["TEMPORAL_ADDRESS"] = true, true
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\b(?:HERALD|TEMPORAL)_[A-Z0-9_]*[A-Z0-9]\b`)
	for _, p := range append(pages, "../README.md") {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(src), -1) {
			if !known[n] {
				t.Errorf("%s names %s, which neither the programs nor the tests read", filepath.Base(p), n)
			}
		}
	}
}

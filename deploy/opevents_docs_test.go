package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"herald/store"
)

// numberWords are the counts the pages write as words.
var numberWords = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}

// TestOperationalEventTypesAreDocumented holds the docs to Herald's own
// manifest: docs/operational-events.md has a section per operational event
// type and counts them right, and the README names each.
func TestOperationalEventTypesAreDocumented(t *testing.T) {
	m, err := store.HeraldManifest()
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range m.Events {
		types = append(types, m.App+"."+e.Name)
	}
	if len(types) == 0 || len(types) >= len(numberWords) {
		t.Fatalf("Herald's manifest declares %d types", len(types))
	}
	page, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operational-events.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, h := range regexp.MustCompile("(?m)^### `(herald\\.[a-z_.]+)`$").FindAllSubmatch(page, -1) {
		sections = append(sections, string(h[1]))
	}
	for _, typ := range types {
		if !slices.Contains(sections, typ) {
			t.Errorf("docs/operational-events.md has no section ### `%s`", typ)
		}
	}
	for _, s := range sections {
		if !slices.Contains(types, s) {
			t.Errorf("docs/operational-events.md documents %s, which Herald does not declare", s)
		}
	}
	counts := regexp.MustCompile(`(?i)\b(\w+) event types each time|\bAll (\w+) are version`).FindAllSubmatch(page, -1)
	if len(counts) == 0 {
		t.Error("docs/operational-events.md no longer counts the types; update this test")
	}
	for _, c := range counts {
		if n := strings.ToLower(string(c[1]) + string(c[2])); n != numberWords[len(types)] {
			t.Errorf("docs/operational-events.md: %q; Herald declares %s types", c[0], numberWords[len(types)])
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range types {
		if !strings.Contains(string(readme), "`"+typ+"`") {
			t.Errorf("README.md's operational events do not name %s", typ)
		}
	}
}

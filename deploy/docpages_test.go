package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// docMatch is one match of a pattern in a page of the docs.
type docMatch struct {
	page string   // the page's file name
	m    [][]byte // the match and its groups
}

// docMatches returns every match of re in docs/*.md and README.md, the
// pages whose commands and names the docs tests check against the code.
func docMatches(t *testing.T, re *regexp.Regexp) []docMatch {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []docMatch
	for _, p := range append(pages, filepath.Join(repoRoot, "README.md")) {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			out = append(out, docMatch{filepath.Base(p), m})
		}
	}
	return out
}

package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDocumentedMakeTargetsExist: every `make TARGET` a page of the docs
// shows (in a code span or block) is a target of the Makefile.
func TestDocumentedMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z-]*):`).FindAllSubmatch(mk, -1) {
		targets[string(m[1])] = true
	}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	use := regexp.MustCompile("(?m)(?:`|^)(?:[A-Z_]+=\\S+ )*make ([a-z][a-z-]*)\\b")
	n := 0
	for _, p := range append(pages, filepath.Join(repoRoot, "README.md")) {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllSubmatch(src, -1) {
			n++
			if !targets[string(m[1])] {
				t.Errorf("%s: %q: the Makefile has no target %s", filepath.Base(p), m[0], m[1])
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d make commands in the docs; the scan lost some", n)
	}
}

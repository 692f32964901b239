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
	use := regexp.MustCompile("(?m)(?:`|^)(?:[A-Z_]+=\\S+ )*make ([a-z][a-z-]*)\\b")
	found := docMatches(t, use)
	for _, d := range found {
		if !targets[string(d.m[1])] {
			t.Errorf("%s: %q: the Makefile has no target %s", d.page, d.m[0], d.m[1])
		}
	}
	if n := len(found); n < 20 {
		t.Errorf("found %d make commands in the docs; the scan lost some", n)
	}
}

// TestDocumentedScriptCommandsExist: every `scripts/NAME.sh COMMAND` the
// docs show is a script of scripts/ with a case for that command.
func TestDocumentedScriptCommandsExist(t *testing.T) {
	found := docMatches(t, regexp.MustCompile(`\bscripts/([a-z-]+\.sh) ([a-z][a-z-]*)\b`))
	for _, d := range found {
		script, err := os.ReadFile(filepath.Join(repoRoot, "scripts", string(d.m[1])))
		if err != nil {
			t.Errorf("%s: %q: %v", d.page, d.m[0], err)
			continue
		}
		if !regexp.MustCompile(`(?m)^\s+(?:[a-z-]+\|)*` + regexp.QuoteMeta(string(d.m[2])) + `(?:\|[a-z-]+)*\)`).Match(script) {
			t.Errorf("%s: %q: scripts/%s has no command %s", d.page, d.m[0], d.m[1], d.m[2])
		}
	}
	if len(found) == 0 {
		t.Error("found no scripts/ command in the docs; the scan lost them")
	}
}

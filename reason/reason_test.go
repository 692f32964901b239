package reason_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"herald/reason"
)

// TestDesignListsEveryCode checks docs/design.md's table of operator
// reason codes against the constants: the same codes, in the same order,
// each with an explanation for the command line.
func TestDesignListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### Operator reason codes\n")
	if !ok {
		t.Fatal("docs/design.md has no section \"### Operator reason codes\"")
	}
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")
	var documented []reason.Code
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented = append(documented, reason.Code(m[1]))
	}
	if !slices.Equal(documented, reason.All) {
		t.Errorf("docs/design.md#operator-reason-codes lists\n%v\nthe reason package has\n%v", documented, reason.All)
	}
	for _, c := range reason.All {
		if reason.Texts[c] == "" {
			t.Errorf("code %s has no text", c)
		}
	}
	if len(reason.Texts) != len(reason.All) {
		t.Errorf("reason.Texts has %d codes, reason.All %d", len(reason.Texts), len(reason.All))
	}
}

package payload_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"herald/workflows/payload"
)

// TestDeliveryWorkflowIDSplitsBack: the id built for a subscription and a
// subject key splits back into them, whatever ":" and "@" the subject
// holds, and what is not a delivery workflow id does not split.
func TestDeliveryWorkflowIDSplitsBack(t *testing.T) {
	t.Parallel()
	const sub = "billing:contacts.person.updated@1"
	for _, subject := range []string{"person-1", "a:b@2:c", "@", ":", "person 42", ""} {
		id := payload.DeliveryWorkflowID(sub, subject)
		if want := "deliver:" + sub + ":" + subject; id != want {
			t.Errorf("DeliveryWorkflowID(%q, %q) = %q, want %q", sub, subject, id, want)
		}
		if !payload.IsDeliveryWorkflowID(id) {
			t.Errorf("IsDeliveryWorkflowID(%q) = false", id)
		}
		gotSub, gotSubject, ok := payload.SplitDeliveryWorkflowID(id)
		if !ok || gotSub != sub || gotSubject != subject {
			t.Errorf("SplitDeliveryWorkflowID(%q) = %q, %q, %v; want %q, %q", id, gotSub, gotSubject, ok, sub, subject)
		}
	}
	for _, id := range []string{"", "deliver:", "deliver:billing:x", "deliver:billing:x@1", "order:billing:x@1:k", "billing:x@1:k"} {
		if sub, subject, ok := payload.SplitDeliveryWorkflowID(id); ok {
			t.Errorf("SplitDeliveryWorkflowID(%q) = %q, %q, true; want not a delivery workflow id", id, sub, subject)
		}
	}
}

// TestDeliveryWorkflowIDIsBuiltHereOnly: no Go source outside this package
// spells out the "deliver:" prefix (or its "deliver" part) as a string
// literal: every package builds, recognises and splits the id with
// payload's functions (through workflows.DeliveryID and friends), so that
// its format cannot drift in one copy.
func TestDeliveryWorkflowIDIsBuiltHereOnly(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") ||
				path == here {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if v, err := strconv.Unquote(lit.Value); err == nil && (v == "deliver" || strings.HasPrefix(v, "deliver:")) {
				t.Errorf("%s: the delivery workflow id's prefix spelled out as %s; use workflows.DeliveryID, "+
					"SplitDeliveryID or IsDeliveryID", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s: not the repository", files, root)
	}
}

package store_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"herald/internal/testenv"
	"herald/store"
)

// auditActionForm is the form of an audit action: "<target>.<what>".
var auditActionForm = regexp.MustCompile(`^[a-z_]+\.[a-z_]+$`)

// writtenAuditActions finds every audit action the source writes: the
// string constants named Action… or Audit… of the form of an action in the
// non-test Go files, and the actions of INSERT INTO audit statements of
// the migrations. An action spelled out as a literal in two Go constants
// is an error: a copy can be renamed without the other.
func writtenAuditActions(t *testing.T) map[string]string {
	t.Helper()
	root := testenv.RepoRoot()
	found := map[string]string{} // action -> where
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
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
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) || !(strings.HasPrefix(name.Name, "Action") || strings.HasPrefix(name.Name, "Audit")) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err == nil && auditActionForm.MatchString(v) {
						rel, _ := filepath.Rel(root, path)
						if where, ok := found[v]; ok {
							t.Errorf("audit action %s is spelled out twice, in %s and in %s: define it once "+
								"(workflows/payload for the Delivery workflow's) and name that constant", v, where, rel+": "+name.Name)
						}
						found[v] = rel + ": " + name.Name
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Migrations that write audit rows name the action as a literal.
	insert := regexp.MustCompile(`(?is)INSERT INTO audit\b[^;]*`)
	literal := regexp.MustCompile(`'([a-z_]+\.[a-z_]+)'`)
	dir := filepath.Join(root, "store", "migrations")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range insert.FindAllString(string(b), -1) {
			for _, m := range literal.FindAllStringSubmatch(stmt, -1) {
				found[m[1]] = "store/migrations/" + e.Name()
			}
		}
	}
	return found
}

// TestEveryAuditActionHasALabel: every audit action the code writes has a
// readable label, and the table holds no label for an action nothing
// writes.
func TestEveryAuditActionHasALabel(t *testing.T) {
	t.Parallel()
	written := writtenAuditActions(t)
	// The search must see the actions of every writer: store, workflows,
	// migrations.
	for _, a := range []string{store.ActionAppApplied, "delivery.signal_rejected", "api_token.revoked", "publisher_role.granted"} {
		if _, ok := written[a]; !ok {
			t.Fatalf("the search for audit actions missed %s; it found %v", a, written)
		}
	}
	for a, where := range written {
		if l := store.AuditLabel(a); l == a || strings.TrimSpace(l) == "" {
			t.Errorf("audit action %s (%s) has no label: add it to store's auditLabels", a, where)
		}
	}
	for _, a := range store.AuditActions() {
		if _, ok := written[a]; !ok {
			t.Errorf("audit label for %s, which no code writes", a)
		}
	}
	labels := map[string]string{}
	for _, a := range store.AuditActions() {
		l := store.AuditLabel(a)
		if other, ok := labels[l]; ok {
			t.Errorf("actions %s and %s share the label %q", other, a, l)
		}
		labels[l] = a
	}
	if got := store.AuditLabel("app.frobnicated"); got != "app.frobnicated" {
		t.Errorf("label of an unknown action = %q, want the action itself", got)
	}
}

// TestListAuditLabels: rows read from the audit trail carry their label.
func TestListAuditLabels(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	for _, a := range []string{store.ActionAppRemoved, "app.frobnicated"} {
		if err := s.Audit(ctx, store.AuditEntry{Action: a, TargetType: store.TargetApp, TargetID: "labels"}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.ListAudit(ctx, store.AuditFilter{TargetID: "labels"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Action+"="+r.Label)
	}
	if want := []string{"app.frobnicated=app.frobnicated", "app.removed=App removed"}; !slices.Equal(got, want) {
		t.Errorf("labels of listed rows = %v, want %v", got, want)
	}
}

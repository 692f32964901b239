package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"herald/config"
	"herald/workflows"
)

// goFiles parses the non-test Go files of one package directory.
func goFiles(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// stringConsts returns the string constants declared in files, by name.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						break
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							out[name.Name] = s
						}
					}
				}
			}
		}
	}
	return out
}

// stringArg returns the value of a call's first argument when it is a string
// literal or one of consts.
func stringArg(call *ast.CallExpr, consts map[string]string) (string, bool) {
	if len(call.Args) == 0 {
		return "", false
	}
	switch arg := call.Args[0].(type) {
	case *ast.BasicLit:
		if arg.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(arg.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[arg.Name]
		return s, ok
	}
	return "", false
}

// calledName is the name of the function or method a call invokes.
func calledName(call *ast.CallExpr) string {
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		return fun.Name
	case *ast.SelectorExpr:
		return fun.Sel.Name
	}
	return ""
}

// cliGetenvNames returns the variables package cli reads itself, beyond
// config.Common: the names handed to a getenv function or method, as string
// literals or constants.
func cliGetenvNames(t *testing.T) []string {
	t.Helper()
	files := goFiles(t, "cli")
	consts := stringConsts(files)
	var names []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch calledName(call) {
			case "getenv", "Getenv", "LookupEnv":
				if name, ok := stringArg(call, consts); ok && !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
			return true
		})
	}
	slices.Sort(names)
	return names
}

// subscriberEnvPattern matches the example subscriber's variable names.
var subscriberEnvPattern = regexp.MustCompile(`^SUBSCRIBER_[A-Z0-9_]+$`)

// subscriberEnvNames returns the variables the example subscriber reads: the
// SUBSCRIBER_* string literals of its main package.
func subscriberEnvNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, f := range goFiles(t, filepath.Join("examples", "subscriber")) {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && subscriberEnvPattern.MatchString(s) &&
				!slices.Contains(names, s) {
				names = append(names, s)
			}
			return true
		})
	}
	slices.Sort(names)
	return names
}

// programEnv maps each Herald binary to the environment variables it reads.
func programEnv(t *testing.T) map[string][]string {
	t.Helper()
	starter := append(config.EnvNames(config.Common{}), cliGetenvNames(t)...)
	return map[string][]string{
		"workers":    config.EnvNames(config.Worker{}),
		"starter":    starter,
		"subscriber": subscriberEnvNames(t),
	}
}

// declaredSearchAttributes returns the search attributes package workflows
// declares with temporal.NewSearchAttributeKey*("Name"), by name, with the
// constructor's suffix (Keyword, Int64, ...).
func declaredSearchAttributes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range goFiles(t, "workflows") {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !strings.HasPrefix(sel.Sel.Name, "NewSearchAttributeKey") {
				return true
			}
			if name, ok := stringArg(call, nil); ok {
				out[name] = strings.TrimPrefix(sel.Sel.Name, "NewSearchAttributeKey")
			}
			return true
		})
	}
	return out
}

// heraldSearchAttributes returns Herald's search attributes with their types
// as the temporal CLI spells them (Keyword, Int), from the workflows
// package's variables. TestSearchAttributeListIsComplete keeps this list in
// step with the declarations in workflows.
func heraldSearchAttributes() map[string]string {
	out := map[string]string{}
	for _, k := range workflows.SearchAttributes {
		out[k.GetName()] = k.GetValueType().String()
	}
	return out
}

// TestSearchAttributeListIsComplete: every search attribute declared in
// package workflows is in heraldSearchAttributes, so a new one cannot be
// forgotten by the compose check.
func TestSearchAttributeListIsComplete(t *testing.T) {
	declared := declaredSearchAttributes(t)
	listed := heraldSearchAttributes()
	if len(declared) == 0 {
		t.Fatal("found no temporal.NewSearchAttributeKey* calls in workflows")
	}
	for name := range declared {
		if name == workflows.SABuildIDs.GetName() {
			// Temporal's own (the server defines and writes it): never
			// registered on a namespace, and not in the list.
			if _, ok := listed[name]; ok {
				t.Errorf("heraldSearchAttributes lists Temporal's own %s, which no namespace may register", name)
			}
			continue
		}
		if _, ok := listed[name]; !ok {
			t.Errorf("workflows declares search attribute %s; add it to heraldSearchAttributes", name)
		}
	}
	for name := range listed {
		if _, ok := declared[name]; !ok {
			t.Errorf("heraldSearchAttributes lists %s, which workflows does not declare", name)
		}
	}
}

// TestSourceScans checks the scanners against names known to be read, so a
// scanner that silently finds nothing cannot make the environment check pass.
func TestSourceScans(t *testing.T) {
	env := programEnv(t)
	tests := []struct {
		program string
		want    []string
	}{
		{"workers", []string{"HERALD_DATABASE_URL", "HERALD_SIGNING_KEY", "HERALD_HTTP_ADDR", "TEMPORAL_ADDRESS"}},
		{"starter", []string{"HERALD_DATABASE_URL", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "HERALD_ALLOW_NETWORKS"}},
		{"subscriber", []string{"SUBSCRIBER_ADDR", "SUBSCRIBER_JWKS", "SUBSCRIBER_KEYS", "SUBSCRIBER_APPS"}},
	}
	for _, tt := range tests {
		t.Run(tt.program, func(t *testing.T) {
			for _, name := range tt.want {
				if !slices.Contains(env[tt.program], name) {
					t.Errorf("%s: %s not among the names found: %v", tt.program, name, env[tt.program])
				}
			}
		})
	}
	if got := env["starter"]; slices.Contains(got, "HERALD_SIGNING_KEY") {
		t.Errorf("starter does not read HERALD_SIGNING_KEY, but the scan says it does: %v", got)
	}
}

// TestScriptsRegisterTheSearchAttributes: the dev server script
// (--search-attribute NAME=Type) and the PostgreSQL-backed server script
// (a NAME=Type list) register exactly workflows.SearchAttributes.
func TestScriptsRegisterTheSearchAttributes(t *testing.T) {
	want := heraldSearchAttributes()
	pair := regexp.MustCompile(`\b(Herald[A-Za-z]+)=([A-Za-z]+)\b`)
	for _, script := range []string{"../scripts/temporal.sh", "../scripts/temporal-pg.sh"} {
		src, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, m := range pair.FindAllStringSubmatch(string(src), -1) {
			got[m[1]] = m[2]
		}
		for name, typ := range want {
			if got[name] != typ {
				t.Errorf("%s registers %s as %q, want %s", script, name, got[name], typ)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s registers %s, which the workflow does not use", script, name)
			}
		}
	}
}

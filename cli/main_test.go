package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// result is what one run of starter produced.
type result struct {
	code   int
	stdout string
	stderr string
}

// env is a fake environment for Run.
type env map[string]string

func (e env) getenv(k string) string { return e[k] }

// with returns a copy of e with k set to v.
func (e env) with(k, v string) env {
	out := env{}
	for key, val := range e {
		out[key] = val
	}
	out[k] = v
	return out
}

// run runs starter with args and an empty stdin.
func run(t *testing.T, e env, args ...string) result {
	t.Helper()
	return runInput(t, e, "", args...)
}

// runInput runs starter with args, feeding stdin.
func runInput(t *testing.T, e env, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(stdin), &out, &errOut, e.getenv)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// mustRun runs starter and fails the test unless it exits 0.
func mustRun(t *testing.T, e env, args ...string) result {
	t.Helper()
	r := run(t, e, args...)
	if r.code != ExitOK {
		t.Fatalf("starter %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// newEnv returns an environment whose database is a fresh, empty schema.
func newEnv(t *testing.T) env {
	t.Helper()
	return env{"HERALD_DATABASE_URL": testenv.NewSchema(t), "USER": "tester"}
}

// migratedEnv returns an environment whose fresh schema is migrated.
func migratedEnv(t *testing.T) env {
	t.Helper()
	e := newEnv(t)
	mustRun(t, e, "migrate")
	return e
}

// appliedEnv returns a migrated environment with the example manifests applied.
func appliedEnv(t *testing.T) env {
	t.Helper()
	e := migratedEnv(t)
	mustRun(t, e, "apps", "apply", examplesDir())
	return e
}

func examplesDir() string {
	return filepath.Join(testenv.RepoRoot(), "examples", "manifests")
}

// decode parses JSON output into a T, failing the test if it is not JSON.
func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output is not the expected JSON: %v\n%s", err, s)
	}
	return v
}

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

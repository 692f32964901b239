package cli

import (
	"strings"
	"testing"

	"herald/internal/testenv"
)

// apps apply gives each app a whsec_ secret; apps secret show prints it,
// rotate makes a new one and keeps the replaced ones valid (at most
// MaxPreviousSecrets), and both are audited with the actor, never a secret.
func TestAppsSecretShowRotate(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t).with("HERALD_SECRET_KEY", testenv.SecretKey)
	mustRun(t, e, "apps", "apply", examplesDir())
	r := mustRun(t, e, "audit", "--action", "app.secret_created", "--target", "billing", "--json")
	wantContains(t, "audit", r.stdout, `"actor": "tester"`)

	shown := decode[secretJSON](t, mustRun(t, e, "apps", "secret", "show", "billing", "--json").stdout)
	if shown.App != "billing" || !strings.HasPrefix(shown.Secret, "whsec_") || len(shown.Previous) != 0 || shown.CreatedAt.IsZero() {
		t.Fatalf("show: %+v", shown)
	}
	if text := mustRun(t, e, "apps", "secret", "show", "billing"); strings.TrimSpace(text.stdout) != shown.Secret {
		t.Fatalf("show prints %q, want the secret alone", text.stdout)
	}
	other := decode[secretJSON](t, mustRun(t, e, "apps", "secret", "show", "contacts", "--json").stdout)
	if other.Secret == shown.Secret {
		t.Fatal("two apps share a secret")
	}

	seen := []string{shown.Secret}
	for i, wantPrevious := range []int{1, 2, 2} {
		rot := decode[secretJSON](t, mustRun(t, e, "apps", "secret", "rotate", "billing", "--overlap", "1h",
			"--reason", "leaked in a log", "--json").stdout)
		if len(rot.Previous) != wantPrevious || rot.Previous[0].Secret != seen[len(seen)-1] {
			t.Fatalf("rotation %d: previous %+v, want %d, newest %s first", i+1, rot.Previous, wantPrevious, seen[len(seen)-1])
		}
		for _, s := range seen {
			if rot.Secret == s {
				t.Fatalf("rotation %d reused a secret", i+1)
			}
		}
		seen = append(seen, rot.Secret)
	}
	r = mustRun(t, e, "audit", "--target", "billing", "--json")
	wantContains(t, "audit", r.stdout, `"app.secret_rotated"`, `"app.secret_shown"`, `"leaked in a log"`, `"overlap": "1h0m0s"`)
	for _, s := range seen {
		if strings.Contains(r.stdout, strings.TrimPrefix(s, "whsec_")) {
			t.Fatal("the audit trail holds a secret")
		}
	}
	// An overlap of 0s ends the previous ones at once.
	rot := decode[secretJSON](t, mustRun(t, e, "apps", "secret", "rotate", "billing", "--overlap", "0s", "--json").stdout)
	if len(rot.Previous) != 2 || rot.Previous[0].Secret == seen[len(seen)-1] {
		t.Fatalf("0s overlap: previous %+v, want the replaced one gone", rot.Previous)
	}
}

// Bad input exits 2 with one line naming the problem.
func TestAppsSecretErrors(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t).with("HERALD_SECRET_KEY", testenv.SecretKey)
	mustRun(t, e, "apps", "apply", examplesDir())
	mustRun(t, e, "apps", "remove", "billing")
	for name, tc := range map[string]struct {
		env  env
		args []string
		want string
	}{
		"unknown app":  {e, []string{"apps", "secret", "show", "nope"}, "app nope is unknown"},
		"removed app":  {e, []string{"apps", "secret", "rotate", "billing"}, "app billing was removed"},
		"removed show": {e, []string{"apps", "secret", "show", "billing"}, "app billing was removed"},
		"bad overlap":  {e, []string{"apps", "secret", "rotate", "contacts", "--overlap", "a day"}, `--overlap "a day"`},
		"negative":     {e, []string{"apps", "secret", "rotate", "contacts", "--overlap", "-1h"}, `--overlap "-1h"`},
		"no key":       {e.with("HERALD_SECRET_KEY", ""), []string{"apps", "secret", "show", "contacts"}, "HERALD_SECRET_KEY is not set"},
		"bad key":      {e.with("HERALD_SECRET_KEY", "c2hvcnQ="), []string{"apps", "secret", "rotate", "contacts"}, "HERALD_SECRET_KEY: want base64 of exactly 32 bytes"},
		"wrong key":    {e.with("HERALD_SECRET_KEY", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="), []string{"apps", "secret", "show", "contacts"}, "wrong HERALD_SECRET_KEY"},
	} {
		t.Run(name, func(t *testing.T) {
			r := run(t, tc.env, tc.args...)
			if name == "wrong key" {
				if r.code == ExitOK {
					t.Fatalf("exit 0 with a wrong key")
				}
			} else if r.code != ExitInvalid {
				t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
			}
			if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q: want one line with %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Fatalf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

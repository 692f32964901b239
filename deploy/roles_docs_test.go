package deploy_test

import (
	"net/url"
	"regexp"
	"testing"
)

// runtimeRoleInDocs matches where a page names a role as the runtime role:
// `--runtime-role X`, `HERALD_RUNTIME_ROLE=X`, "runtime role (say `X`)",
// and the user of a HERALD_DATABASE_URL (which is the runtime role's).
var runtimeRoleInDocs = regexp.MustCompile("--runtime-role ([a-z_][a-z0-9_]*)|HERALD_RUNTIME_ROLE=([a-z_][a-z0-9_]*)|" +
	"runtime role\\*{0,2} \\(say `([a-z_][a-z0-9_]*)`\\)|(?:^|[^_])HERALD_DATABASE_URL=postgres://([a-z_][a-z0-9_]*)[:@]")

// TestDocsNameTheRuntimeRoleAsTheStackDoes: every page that names the
// runtime role names the one docker-compose.yml (and scripts/pg.sh) grants,
// never the owner role they migrate as, so no page can have a reader grant
// the owner to the workers or an app.
func TestDocsNameTheRuntimeRoleAsTheStackDoes(t *testing.T) {
	setup, ok := loadCompose(t).Services["herald-init"]
	if !ok {
		t.Fatal("no herald-init service")
	}
	runtime := setup.Environment["HERALD_RUNTIME_ROLE"]
	owner, err := url.Parse(setup.Environment["HERALD_OWNER_DATABASE_URL"])
	if runtime == "" || err != nil || owner.User.Username() == "" {
		t.Fatalf("herald-init names no runtime role (%q) or owner URL (%v)", runtime, err)
	}
	found := docMatches(t, runtimeRoleInDocs)
	for _, d := range found {
		m := d.m
		role := string(m[1]) + string(m[2]) + string(m[3]) + string(m[4])
		if role != runtime {
			t.Errorf("%s: %q names %s as the runtime role; the stack's runtime role is %s (and %s its owner)",
				d.page, m[0], role, runtime, owner.User.Username())
		}
	}
	if n := len(found); n < 3 {
		t.Errorf("found %d places naming the runtime role; the scan lost some", n)
	}
}

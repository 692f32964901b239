package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"

	"herald/internal/testenv"
)

// runtimeRoleEnv creates a login role for one test and returns its name and
// ownerURL with that role's credentials. The test database's role needs
// CREATEROLE (scripts/pg.sh gives it).
func runtimeRoleEnv(t *testing.T, ownerURL string) (string, string) {
	t.Helper()
	return testenv.LoginRole(t, ownerURL, "herald_cli_rt_")
}

func TestMigrateGrantsTheRuntimeRole(t *testing.T) {
	t.Parallel()
	ownerURL := newEnv(t)["HERALD_DATABASE_URL"]
	role, runtimeURL := runtimeRoleEnv(t, ownerURL)

	// Without the owner's URL the runtime role cannot create the schema, and
	// the error says what to do.
	runtimeOnly := env{"HERALD_DATABASE_URL": runtimeURL, "USER": "tester"}
	r := run(t, runtimeOnly, "migrate")
	if r.code != ExitError {
		t.Fatalf("migrate as the runtime role: exit %d, want %d\n%s", r.code, ExitError, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "HERALD_OWNER_DATABASE_URL")

	e := env{"HERALD_DATABASE_URL": runtimeURL, "HERALD_OWNER_DATABASE_URL": ownerURL,
		"HERALD_RUNTIME_ROLE": role, "USER": "tester"}
	r = mustRun(t, e, "migrate")
	wantContains(t, "stdout", r.stdout, "applied ", "role "+role+" may use the tables")
	got := decode[struct {
		Applied     []int
		RuntimeRole string
	}](t, mustRun(t, e, "migrate", "--json").stdout)
	if len(got.Applied) != 0 || got.RuntimeRole != role {
		t.Errorf("migrate --json = %+v", got)
	}
	// The rest of the CLI runs as the runtime role.
	mustRun(t, runtimeOnly, "apps", "apply", "../examples/manifests")
	mustRun(t, runtimeOnly, "audit", "--limit", "5")
	if r := run(t, e, "migrate", "--runtime-role", "no_such_role_here"); r.code != ExitError {
		t.Errorf("migrate --runtime-role missing: exit %d\n%s", r.code, r.stderr)
	}
}

// TestDBGrantPublisher: `starter db grant-publisher APP ROLE` maps the role
// to the app, grants it the publisher functions (and nothing on the
// tables), and audits it; an unknown app or a missing role is refused.
func TestDBGrantPublisher(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	ownerURL := e["HERALD_DATABASE_URL"]
	role, roleURL := runtimeRoleEnv(t, ownerURL)
	r := mustRun(t, e, "db", "grant-publisher", "billing", role)
	wantContains(t, "stdout", r.stdout, "role "+role+" publishes for app billing only")

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, roleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var app string
	var live bool
	if err := conn.QueryRow(ctx, `SELECT app, live FROM herald_publisher_app()`).Scan(&app, &live); err != nil || app != "billing" || !live {
		t.Fatalf("herald_publisher_app() as the granted role = %q, %v, %v; want billing, true", app, live, err)
	}
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM api_tokens`); err == nil {
		t.Error("the publisher role reads api_tokens")
	}
	audit := mustRun(t, e, "audit", "--action", "publisher_role.granted", "--json").stdout
	wantContains(t, "audit", audit, role)

	if r := run(t, e, "db", "grant-publisher", "no-such-app", role); r.code != ExitInvalid && r.code != ExitError {
		t.Errorf("grant-publisher for an unknown app: exit %d\n%s", r.code, r.stderr)
	} else if r.code == ExitOK {
		t.Error("grant-publisher for an unknown app succeeded")
	}
	if r := run(t, e, "db", "grant-publisher", "billing", "no_such_role_here"); r.code == ExitOK {
		t.Errorf("grant-publisher for a missing role succeeded")
	}
	// The owner role itself (the test's database role) is refused.
	owner, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	var self string
	if err := owner.QueryRow(ctx, `SELECT current_user`).Scan(&self); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, "db", "grant-publisher", "billing", self); r.code == ExitOK {
		t.Errorf("grant-publisher to the owner role succeeded")
	} else {
		wantContains(t, "stderr", r.stderr, "grant publisher role")
	}
	if r := run(t, e, "db", "grant-publisher", "billing"); r.code != ExitInvalid {
		t.Errorf("grant-publisher without a role: exit %d, want %d", r.code, ExitInvalid)
	}
	// A role that can already write Herald's tables is not confined by a
	// mapping: refused.
	writer := role + "_w"
	if _, err := owner.Exec(ctx, `CREATE ROLE `+pgx.Identifier{writer}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	defer func() { // before owner.Close (deferred earlier)
		_, _ = owner.Exec(context.Background(), `DROP OWNED BY `+pgx.Identifier{writer}.Sanitize())
		_, _ = owner.Exec(context.Background(), `DROP ROLE `+pgx.Identifier{writer}.Sanitize())
	}()
	if _, err := owner.Exec(ctx, `GRANT INSERT ON events TO `+pgx.Identifier{writer}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, "db", "grant-publisher", "billing", writer); r.code == ExitOK {
		t.Errorf("grant-publisher to a role that may insert events succeeded")
	} else {
		wantContains(t, "stderr", r.stderr, "can already write Herald's tables")
	}
}

// TestDBKeyStripes: `starter db key-stripes` shows how publishers lock
// ordering keys; with --fine-only it retires the coarse rows a database
// upgraded from before migration 0032 keeps (here made by hand), audits
// it, and a second time has nothing to do (exit 2). The runtime role may
// run it.
func TestDBKeyStripes(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	ctx := context.Background()
	owner, err := pgx.Connect(ctx, e["HERALD_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if _, err := owner.Exec(ctx, `UPDATE key_stripe_scheme SET coarse = true`); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, `INSERT INTO key_stripes (type, version, stripe)
		SELECT d.type, d.version, s FROM declarations d, generate_series(0, 255) AS s`); err != nil {
		t.Fatal(err)
	}
	var decls int
	if err := owner.QueryRow(ctx, `SELECT count(*) FROM declarations`).Scan(&decls); err != nil || decls == 0 {
		t.Fatalf("%d declarations, %v", decls, err)
	}
	role, roleURL := runtimeRoleEnv(t, e["HERALD_DATABASE_URL"])
	mustRun(t, e, "migrate", "--runtime-role", role)
	runtime := maps.Clone(e)
	runtime["HERALD_DATABASE_URL"] = roleURL

	r := mustRun(t, runtime, "db", "key-stripes")
	wantContains(t, "stdout", r.stdout, "and its coarse one")
	wantContains(t, "stdout", r.stdout, fmt.Sprintf("%d coarse rows", decls*256))
	if r := run(t, runtime, "db", "key-stripes", "--actor", "bob"); r.code != ExitInvalid {
		t.Errorf("--actor without --fine-only: exit %d, want %d", r.code, ExitInvalid)
	}

	var out struct {
		Coarse     bool  `json:"coarse"`
		CoarseRows int64 `json:"coarseRows"`
		FineRows   int64 `json:"fineRows"`
		Deleted    int64 `json:"coarseRowsDeleted"`
	}
	r = mustRun(t, runtime, "db", "key-stripes", "--fine-only", "--actor", "bob", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if out.Coarse || out.CoarseRows != 0 || out.Deleted != int64(decls*256) || out.FineRows != int64(decls*4096) {
		t.Errorf("after --fine-only: %+v, want %d deleted, none left, %d fine", out, decls*256, decls*4096)
	}
	audit := mustRun(t, e, "audit", "--action", "key_stripes.fine_only", "--json").stdout
	wantContains(t, "audit", audit, `"bob"`)
	r = run(t, runtime, "db", "key-stripes", "--fine-only")
	if r.code != ExitInvalid {
		t.Errorf("a second --fine-only: exit %d, want %d\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "nothing to do")
	wantContains(t, "stdout", mustRun(t, runtime, "db", "key-stripes").stdout, "fine stripe row only")
}

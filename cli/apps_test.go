package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"herald/manifest"
	"herald/store"
)

// ordersManifest is a small valid manifest for tests that write their own.
const ordersManifest = `{
  "app": "orders",
  "endpoint": "https://orders.example.com",
  "events": [
    {"name": "order.placed", "version": 1, "subject": "order", "dataSchema": {"type": "object"}},
    {"name": "order.shipped", "version": 1, "subject": "order", "dataSchema": {"type": "object"}}
  ],
  "subscribes": [{"type": "contacts.person.updated", "version": 1}]
}`

func TestApplyExamples(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	r := mustRun(t, e, "apps", "apply", examplesDir())
	wantContains(t, "stdout", r.stdout,
		"audit-log: applied", "billing: applied", "contacts: applied",
		"declarations: 2 added", "subscriptions: 2 added",
		"billing:contacts.person.updated@1", "blocked (event_not_declared)")

	subs := decode[[]store.Subscription](t, mustRun(t, e, "subscriptions", "--json").stdout)
	if len(subs) != 5 {
		t.Fatalf("got %d subscriptions, want 5: %+v", len(subs), subs)
	}
	for _, s := range subs {
		if s.State != store.StateActive || s.Reason != "" {
			t.Errorf("subscription %s is %s/%s, want active", s.ID, s.State, s.Reason)
		}
	}
	billing := decode[[]store.Subscription](t, mustRun(t, e, "subscriptions", "--app", "billing", "--json").stdout)
	if len(billing) != 2 || billing[0].App != "billing" || billing[1].App != "billing" {
		t.Errorf("subscriptions --app billing = %+v", billing)
	}
	text := mustRun(t, e, "subscriptions").stdout
	wantContains(t, "subscriptions", text, "ID", "STATE", "contacts:billing.invoice.paid@1", "active")

	catalog := decode[[]store.CatalogEntry](t, mustRun(t, e, "catalog", "--json").stdout)
	byEvent := map[string]store.CatalogEntry{}
	for _, c := range catalog {
		byEvent[c.Type] = c
	}
	if len(catalog) != 4 {
		t.Fatalf("catalog has %d entries, want 4: %+v", len(catalog), catalog)
	}
	updated := byEvent["contacts.person.updated"]
	if updated.App != "contacts" || updated.Retired || len(updated.Subscribers) != 2 ||
		updated.Subscribers[0].App != "audit-log" || updated.Subscribers[1].State != store.StateActive {
		t.Errorf("contacts.person.updated in catalog = %+v", updated)
	}
	if got := byEvent["audit-log.entry.recorded"]; got.Subscribers == nil || len(got.Subscribers) != 0 {
		t.Errorf("audit-log.entry.recorded subscribers = %#v, want an empty list", got.Subscribers)
	}
	text = mustRun(t, e, "catalog").stdout
	wantContains(t, "catalog", text, "EVENT", "PUBLISHER", "contacts.person.updated@1", "contacts", "billing", "audit-log")
}

func TestApplyUnchangedAndChanged(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	r := mustRun(t, e, "apps", "apply", examplesDir())
	for _, app := range []string{"audit-log", "billing", "contacts"} {
		wantContains(t, "stdout", r.stdout, app+": unchanged")
	}
	out := decode[applyOutput](t, mustRun(t, e, "apps", "apply", "--json", examplesDir()).stdout)
	if len(out.Apps) != 3 {
		t.Fatalf("apply --json reported %d apps, want 3", len(out.Apps))
	}
	for _, a := range out.Apps {
		if !a.Unchanged {
			t.Errorf("%s: unchanged = false on a second apply", a.App)
		}
	}

	// contacts stops declaring person.deleted: the declaration is retired and
	// billing's subscription to it becomes blocked.
	m, err := manifest.ParseFile(examplesDir() + "/contacts.json")
	if err != nil {
		t.Fatal(err)
	}
	m.Events = m.Events[:1]
	if m.Events[0].Name != "person.updated" {
		t.Fatalf("example changed: first event is %s", m.Events[0].Name)
	}
	doc, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, t.TempDir(), "contacts.json", string(doc))
	r = mustRun(t, e, "apps", "apply", path, "--actor", "alice")
	wantContains(t, "stdout", r.stdout, "contacts: applied", "declarations: 1 retired",
		"billing:contacts.person.deleted@1", "active", "blocked (event_not_declared)")

	rows := decode[[]store.AuditRow](t, mustRun(t, e, "audit", "--action", "app.applied", "--target", "contacts", "--limit", "1", "--json").stdout)
	if len(rows) != 1 || rows[0].Actor != "alice" {
		t.Errorf("latest app.applied row of contacts = %+v, want actor alice", rows)
	}
}

func TestApplyInvalidManifestAppliesNothing(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	dir := t.TempDir()
	writeFile(t, dir, "a-orders.json", ordersManifest)
	bad := writeFile(t, dir, "b-bad.json", `{
	  "app": "bad",
	  "endpoint": "ftp://bad.example.com",
	  "events": [{"name": "thing.done", "version": 0, "subject": "thing", "dataSchema": {"type": "object"}}],
	  "subscribes": []
	}`)

	r := run(t, e, "apps", "apply", dir)
	if r.code != ExitInvalid {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "nothing was applied", bad, "events[0].version", "endpoint")
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}

	r = run(t, e, "apps", "apply", "--json", dir)
	if r.code != ExitInvalid {
		t.Fatalf("--json: exit %d, want %d", r.code, ExitInvalid)
	}
	out := decode[struct {
		Applied bool
		Errors  []manifestProblem
	}](t, r.stdout)
	fields := map[string]bool{}
	for _, p := range out.Errors {
		if p.Source != bad || p.App != "bad" {
			t.Errorf("problem %+v does not name %s and app bad", p, bad)
		}
		fields[p.Field] = true
	}
	if out.Applied || !fields["events[0].version"] || !fields["endpoint"] {
		t.Errorf("apply --json = %+v, want both problems", out)
	}

	apps := decode[[]store.App](t, mustRun(t, e, "apps", "list", "--json").stdout)
	if len(apps) != 0 {
		t.Errorf("apps after a refused apply: %+v, want none", apps)
	}

	r = run(t, e, "apps", "apply", dir+"/missing.json")
	if r.code != ExitInvalid {
		t.Errorf("missing file: exit %d, want %d", r.code, ExitInvalid)
	}
	wantContains(t, "stderr", r.stderr, "missing.json")
}

func TestAppsListShowRemove(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)

	r := mustRun(t, e, "apps", "list")
	wantContains(t, "apps list", r.stdout, "APP", "ENDPOINT", "contacts", "billing", "audit-log", "http://127.0.0.1:8089")

	r = mustRun(t, e, "apps", "show", "contacts")
	wantContains(t, "apps show", r.stdout, "contacts", "contacts.person.updated@1", "contacts.person.deleted@1",
		"Person updated", "contacts:billing.invoice.paid@1")
	detail := decode[store.AppDetail](t, mustRun(t, e, "apps", "--json", "show", "contacts").stdout)
	if detail.ID != "contacts" || len(detail.Declarations) != 2 || len(detail.Subscriptions) != 1 || len(detail.Manifest) == 0 {
		t.Errorf("apps show --json = %+v", detail)
	}

	r = run(t, e, "apps", "show", "nobody")
	if r.code != ExitInvalid {
		t.Fatalf("show unknown app: exit %d, want %d", r.code, ExitInvalid)
	}
	wantContains(t, "stderr", r.stderr, "app nobody not found")

	r = mustRun(t, e, "apps", "remove", "billing", "--actor", "bob")
	wantContains(t, "apps remove", r.stdout, "billing: removed", "declarations: 1 retired", "subscriptions: 2 cancelled",
		"audit-log:billing.invoice.paid@1", "blocked (event_not_declared)")
	// Removing a removed app had nothing to do: exit 2 and one line,
	// with --json too (docs/design.md#command-line).
	for _, args := range [][]string{{"apps", "remove", "billing"}, {"apps", "remove", "billing", "--json"}} {
		r := run(t, e, args...)
		if r.code != ExitInvalid || r.stdout != "" ||
			r.stderr != "starter: app billing is already removed: nothing changed (starter apps apply brings it back)\n" {
			t.Errorf("%v of a removed app: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := run(t, e, "apps", "remove", "nobody"); r.code != ExitInvalid {
		t.Errorf("remove unknown app: exit %d, want %d", r.code, ExitInvalid)
	}

	apps := decode[[]store.App](t, mustRun(t, e, "apps", "list", "--json").stdout)
	removed := map[string]bool{}
	for _, a := range apps {
		removed[a.ID] = a.RemovedAt != nil
	}
	if len(apps) != 3 || !removed["billing"] || removed["contacts"] {
		t.Errorf("apps after remove = %+v", apps)
	}
	wantContains(t, "apps list", mustRun(t, e, "apps", "list").stdout, "removed")

	rows := decode[[]store.AuditRow](t, mustRun(t, e, "audit", "--target", "billing", "--action", "app.removed", "--json").stdout)
	if len(rows) != 1 || rows[0].Actor != "bob" {
		t.Errorf("app.removed rows = %+v, want one by bob", rows)
	}
}

func TestSubscriptionsPauseResume(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	const id = "billing:contacts.person.updated@1"

	r := mustRun(t, e, "subscriptions", "pause", id, "--reason", "maintenance", "--actor", "carol")
	wantContains(t, "pause", r.stdout, id, "active -> paused (paused_by_operator)")
	// Pausing a paused subscription had nothing to do: exit 2, one line
	// (docs/design.md#command-line).
	for _, args := range [][]string{{"subscriptions", "pause", id}, {"subscriptions", "--json", "pause", id}} {
		r := run(t, e, args...)
		if r.code != ExitInvalid || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 ||
			!strings.Contains(r.stderr, "subscription "+id+" is already paused (paused_by_operator): nothing changed") {
			t.Errorf("%v of a paused subscription: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, r.code, r.stdout, r.stderr)
		}
	}

	sub := decode[store.Subscription](t, mustRun(t, e, "subscriptions", "--json", "resume", id).stdout)
	if sub.ID != id || sub.State != store.StateActive {
		t.Errorf("resume --json = %+v, want active", sub)
	}

	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"resume an active subscription", []string{"subscriptions", "resume", id}, "not paused"},
		{"pause an unknown subscription", []string{"subscriptions", "pause", "nobody:x.y@1"}, "subscription nobody:x.y@1 not found"},
		{"resume an unknown subscription", []string{"subscriptions", "resume", "nobody:x.y@1"}, "not found"},
	}
	for _, tt := range tests {
		r := run(t, e, tt.args...)
		if r.code != ExitInvalid {
			t.Errorf("%s: exit %d, want %d\nstderr:\n%s", tt.name, r.code, ExitInvalid, r.stderr)
		}
		wantContains(t, tt.name, r.stderr, tt.wantStderr)
	}

	// Pausing a cancelled subscription is refused too.
	mustRun(t, e, "apps", "remove", "billing")
	if r := run(t, e, "subscriptions", "pause", id); r.code != ExitInvalid {
		t.Errorf("pause a cancelled subscription: exit %d, want %d", r.code, ExitInvalid)
	}

	rows := decode[[]store.AuditRow](t, mustRun(t, e, "audit", "--target", id, "--json").stdout)
	var paused *store.AuditRow
	for i := range rows {
		if strings.Contains(string(rows[i].Metadata), `"paused_by_operator"`) && strings.Contains(string(rows[i].Metadata), `"to": "paused"`) {
			paused = &rows[i]
		}
	}
	if paused == nil {
		t.Fatalf("no audit row for the pause among %+v", rows)
	}
	if paused.Actor != "carol" || !strings.Contains(string(paused.Metadata), "maintenance") {
		t.Errorf("pause audit row = %+v, want actor carol and the reason", paused)
	}
}

func TestAuditFilters(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, rows []store.AuditRow)
	}{
		{"action", []string{"--action", "subscription.first_seen"}, func(t *testing.T, rows []store.AuditRow) {
			if len(rows) != 5 {
				t.Errorf("got %d rows, want 5", len(rows))
			}
			for _, r := range rows {
				if r.Action != store.ActionSubscriptionFirstSeen || r.Actor != "tester" {
					t.Errorf("row %+v", r)
				}
			}
		}},
		{"target prefix", []string{"--target", "billing:*"}, func(t *testing.T, rows []store.AuditRow) {
			if len(rows) == 0 {
				t.Error("no rows")
			}
			for _, r := range rows {
				if !strings.HasPrefix(r.TargetID, "billing:") {
					t.Errorf("row %+v does not match billing:*", r)
				}
			}
		}},
		{"exact target and action", []string{"--target", "contacts", "--action", "app.applied"}, func(t *testing.T, rows []store.AuditRow) {
			if len(rows) != 1 || rows[0].TargetType != store.TargetApp {
				t.Errorf("rows = %+v, want the one app.applied of contacts", rows)
			}
		}},
		{"limit", []string{"--limit", "2"}, func(t *testing.T, rows []store.AuditRow) {
			if len(rows) != 2 || rows[0].ID < rows[1].ID {
				t.Errorf("rows = %+v, want the 2 newest, newest first", rows)
			}
		}},
		{"no match", []string{"--action", "delivery.failed"}, func(t *testing.T, rows []store.AuditRow) {
			if rows == nil || len(rows) != 0 {
				t.Errorf("rows = %#v, want an empty list", rows)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"audit", "--json"}, tt.args...)
			tt.check(t, decode[[]store.AuditRow](t, mustRun(t, e, args...).stdout))
		})
	}
	text := mustRun(t, e, "audit", "--action", "app.applied").stdout
	wantContains(t, "audit", text, "TIME", "ACTION", "app.applied", "app contacts", "declarationsAdded")
}

func TestApplyEndpointWarnings(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	r := mustRun(t, e, "apps", "apply", examplesDir())
	wantContains(t, "stderr", r.stderr,
		"warning: contacts endpoint 127.0.0.1 is a blocked address (loopback); deliveries will fail with endpoint_forbidden unless HERALD_ALLOW_NETWORKS covers it")

	allowed := newEnv(t).with("HERALD_ALLOW_NETWORKS", "127.0.0.0/8,::1/128")
	mustRun(t, allowed, "migrate")
	r = mustRun(t, allowed, "apps", "apply", examplesDir())
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("warnings despite the allow-list:\n%s", r.stderr)
	}

	broken := newEnv(t).with("HERALD_ALLOW_NETWORKS", "not-a-cidr")
	mustRun(t, broken, "migrate")
	out := decode[applyOutput](t, mustRun(t, broken, "apps", "apply", "--json", examplesDir()).stdout)
	if len(out.Warnings) != 4 || !strings.Contains(out.Warnings[0].Message, "HERALD_ALLOW_NETWORKS") ||
		out.Warnings[1].Address != "127.0.0.1" || out.Warnings[1].Reason != "loopback" {
		t.Errorf("warnings = %+v", out.Warnings)
	}
}

func TestCheckEndpoints(t *testing.T) {
	t.Parallel()
	ms := []*manifest.Manifest{
		{App: "public", Endpoint: "https://93.184.216.34:8443"},
		{App: "private", Endpoint: "http://10.1.2.3"},
		{App: "local", Endpoint: "http://localhost:8080"},
		{App: "v6", Endpoint: "http://[::1]:8080"},
		{App: "nowhere", Endpoint: "http://herald-test.invalid"},
	}
	start := time.Now()
	ws := checkEndpoints(context.Background(), ms, "")
	if d := time.Since(start); d > 2*resolveTimeout+time.Second {
		t.Errorf("checking took %v", d)
	}
	byApp := map[string]endpointWarning{}
	for _, w := range ws {
		byApp[w.App] = w
	}
	if _, ok := byApp["public"]; ok {
		t.Errorf("warning for a public address: %+v", byApp["public"])
	}
	if w := byApp["private"]; w.Reason != "private network" || !strings.Contains(w.Message, "private endpoint 10.1.2.3 is a blocked address (private network)") {
		t.Errorf("private: %+v", w)
	}
	if w := byApp["local"]; w.Reason != "loopback" || !strings.Contains(w.Message, "local endpoint host localhost resolves to") {
		t.Errorf("localhost: %+v", w)
	}
	if w := byApp["v6"]; w.Address != "::1" || !strings.Contains(w.Message, "v6 endpoint ::1 is a blocked address (loopback)") {
		t.Errorf("v6: %+v", w)
	}
	if w := byApp["nowhere"]; w.Address != "" || !strings.Contains(w.Message, "could not be resolved") {
		t.Errorf("unresolvable: %+v", w)
	}
	if ws := checkEndpoints(context.Background(), ms[1:2], "10.0.0.0/8"); len(ws) != 0 {
		t.Errorf("allow-listed private address still warned: %+v", ws)
	}
}

// TestReservedHeraldApp: a manifest may not be named herald (Herald's own
// operational events), and the app cannot be removed.
func TestReservedHeraldApp(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	dir := t.TempDir()
	writeFile(t, dir, "herald.json", `{"app": "herald", "endpoint": "https://alerts.example", "events": [], "subscribes": []}`)
	r := run(t, e, "apps", "apply", dir)
	if r.code != ExitInvalid {
		t.Fatalf("apply: exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "nothing was applied", `"herald" is reserved for Herald's own operational events`)
	r = run(t, e, "apps", "diff", dir)
	if r.code != ExitInvalid {
		t.Fatalf("diff: exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	r = run(t, e, "apps", "remove", "herald")
	if r.code != ExitInvalid {
		t.Fatalf("remove: exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "reserved")
	r = run(t, e, "apps", "token", "create", "herald")
	if r.code != ExitInvalid {
		t.Fatalf("token create: exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "reserved")

	// Once a worker has declared it (as each start does), the app shows.
	st, err := store.Open(context.Background(), e.getenv("HERALD_DATABASE_URL"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.EnsureHeraldApp(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, e, "apps", "show", "herald")
	wantContains(t, "stdout", r.stdout, "herald.key.failed", "herald.key.recovered", "herald.key.expired",
		"herald.subscription.state_changed")
	wantContains(t, "stdout", mustRun(t, e, "catalog").stdout, "herald.key.failed")
}

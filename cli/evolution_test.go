package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/publish"
	"herald/store"
)

// contactsV1 is the contacts manifest of these tests with dataSchema schema
// for person.updated@1.
func contactsV1(schema string) string {
	return `{"app": "contacts", "endpoint": "https://contacts.example.com",
  "events": [{"name": "person.updated", "version": 1, "subject": "person", "dataSchema": ` + schema + `}],
  "subscribes": []}`
}

func TestApplyRefusesBreakingChangeAndOverride(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	dir := t.TempDir()
	path := writeFile(t, dir, "contacts.json", contactsV1(`{"type": "object", "properties": {"name": {"type": "string"}}}`))
	mustRun(t, e, "apps", "apply", path)

	breaking := contactsV1(`{"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}`)
	writeFile(t, dir, "contacts.json", breaking)
	r := run(t, e, "apps", "apply", path)
	if r.code != ExitInvalid {
		t.Fatalf("apply of a breaking change: exit %d, want %d\n%s%s", r.code, ExitInvalid, r.stdout, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "breaking dataSchema changes refused", "contacts.person.updated@1",
		`/required/0: new required property "name"`, "declare the changed schema as contacts.person.updated@2",
		"--allow-breaking --reason R")

	r = run(t, e, "apps", "apply", "--json", path)
	out := decode[applyOutput](t, r.stdout)
	if r.code != ExitInvalid || out.Refused == nil || out.Refused.App != "contacts" ||
		len(out.Refused.BreakingChanges) != 1 || out.Refused.BreakingChanges[0].Changes[0].Pointer != "/required/0" {
		t.Fatalf("apply --json: exit %d, %+v", r.code, out)
	}

	if r := run(t, e, "apps", "apply", "--allow-breaking", path); r.code != ExitInvalid ||
		!strings.Contains(r.stderr, "--allow-breaking needs --reason") {
		t.Errorf("--allow-breaking without --reason: exit %d, %s", r.code, r.stderr)
	}
	r = mustRun(t, e, "apps", "apply", "--allow-breaking", "--reason", "every publisher sends a name", "--actor", "bob", path)
	wantContains(t, "stdout", r.stdout, "contacts: applied", "breaking dataSchema changes applied", `new required property "name"`)

	rows := decode[[]store.AuditRow](t, mustRun(t, e, "audit", "--action", store.ActionDeclarationBreakingChange, "--json").stdout)
	if len(rows) != 1 || rows[0].Actor != "bob" || rows[0].TargetID != "contacts.person.updated@1" ||
		!strings.Contains(string(rows[0].Metadata), "every publisher sends a name") {
		t.Fatalf("audit rows = %+v", rows)
	}
}

func TestAppsDiff(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	auditBefore := mustRun(t, e, "audit", "--limit", "1000", "--json").stdout

	// The examples as applied: nothing to change.
	r := mustRun(t, e, "apps", "diff", examplesDir())
	wantContains(t, "stdout", r.stdout, "audit-log: unchanged", "billing: unchanged", "contacts: unchanged")

	dir := t.TempDir()
	path := writeFile(t, dir, "billing.json", `{"app": "billing", "endpoint": "http://127.0.0.1:8089",
  "events": [
    {"name": "invoice.paid", "version": 1, "subject": "invoice", "dataSchema": {"type": "object",
      "required": ["invoiceId", "personId", "amount", "currency"],
      "properties": {"invoiceId": {"type": "string", "minLength": 1}, "personId": {"type": "string", "minLength": 1},
        "amount": {"type": "integer", "minimum": 1}, "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "paidAt": {"type": "string", "format": "date-time"}}}},
    {"name": "invoice.voided", "version": 1, "subject": "invoice", "dataSchema": {"type": "object"}}
  ],
  "subscribes": [{"type": "contacts.person.updated", "version": 1}]}`)
	r = mustRun(t, e, "apps", "diff", path)
	wantContains(t, "stdout", r.stdout, "billing: would change",
		"declarations added: billing.invoice.voided@1",
		"declarations changed: billing.invoice.paid@1",
		"subscriptions removed: billing:contacts.person.deleted@1",
		"breaking dataSchema changes", "/properties/amount/minimum: lower bound tightened (was minimum 0, now minimum 1)",
		"state changes:", "cancelled (subscription_removed)")

	out := decode[diffOutput](t, mustRun(t, e, "apps", "diff", "--json", path).stdout)
	if len(out.Apps) != 1 || out.Apps[0].Details == nil ||
		len(out.Apps[0].Details.DeclarationsAdded) != 1 || len(out.Apps[0].BreakingChanges) != 1 {
		t.Fatalf("diff --json = %+v", out)
	}
	raw, _ := json.Marshal(out)
	if !strings.Contains(string(raw), `"declarationsRetired":[]`) {
		t.Errorf("empty lists are not [] in %s", raw)
	}

	// Nothing changed: the audit trail, and an apply of the examples is
	// still a no-op.
	if got := mustRun(t, e, "audit", "--limit", "1000", "--json").stdout; got != auditBefore {
		t.Error("apps diff wrote to the audit trail")
	}
	r = mustRun(t, e, "apps", "apply", examplesDir())
	wantContains(t, "stdout", r.stdout, "billing: unchanged")

	// An invalid manifest exits 2.
	bad := writeFile(t, dir, "bad.json", `{"app": "Bad"}`)
	if r := run(t, e, "apps", "diff", bad); r.code != ExitInvalid || !strings.Contains(r.stderr, "starter apps diff: invalid manifests") {
		t.Errorf("diff of an invalid manifest: exit %d, %s", r.code, r.stderr)
	}
}

func TestDeprecatedVersion(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	raw, err := os.ReadFile(filepath.Join(examplesDir(), "contacts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["events"].([]any)[0].(map[string]any)["deprecated"] = true
	b, _ := json.Marshal(doc)
	path := writeFile(t, t.TempDir(), "contacts.json", string(b))
	r := mustRun(t, e, "apps", "diff", path)
	wantContains(t, "stdout", r.stdout, "declarations changed: contacts.person.updated@1")
	mustRun(t, e, "apps", "apply", path)

	r = mustRun(t, e, personUpdated("person-1", `{"id":"p1","name":"Ann"}`)...)
	wantContains(t, "stdout", r.stdout, "accepted: event ")
	wantContains(t, "stderr", r.stderr, "warning: contacts.person.updated@1 is deprecated")
	out := decode[acceptedJSON](t, mustRun(t, e, personUpdated("person-2", `{"id":"p2","name":"Bo"}`, "--json")...).stdout)
	if !out.Accepted || !out.Deprecated {
		t.Errorf("publish --json = %+v, want accepted and deprecated", out)
	}
	other := mustRun(t, e, "publish", "--app", "contacts", "--type", "contacts.person.deleted", "--version", "1",
		"--subject", "person-1", "--data", `{"id":"p1"}`, "--json")
	if decode[acceptedJSON](t, other.stdout).Deprecated || other.stderr != "" {
		t.Errorf("a current version is reported deprecated: %s %s", other.stdout, other.stderr)
	}

	file := writeFile(t, t.TempDir(), "events.ndjson",
		`{"app":"contacts","type":"contacts.person.updated","version":1,"subject":"person-3","data":{"id":"p3","name":"Cy"}}`+"\n"+
			`{"app":"contacts","type":"contacts.person.deleted","version":1,"subject":"person-3","data":{"id":"p3"}}`+"\n")
	r = mustRun(t, e, "publish", "--file", file)
	wantContains(t, "stderr", r.stderr, "warning: 1 event of deprecated versions accepted")
	sum := decode[publish.Summary](t, mustRun(t, e, "publish", "--file", file, "--json").stdout)
	if sum.Accepted != 2 || sum.Deprecated != 1 {
		t.Errorf("publish --file --json = %+v, want 2 accepted, 1 deprecated", sum)
	}

	r = mustRun(t, e, "apps", "show", "contacts")
	wantContains(t, "apps show", r.stdout, "deprecated")

	r = mustRun(t, e, "catalog")
	wantContains(t, "catalog", r.stdout, "deprecated versions and the subscribers still on them:",
		"contacts.person.updated@1: audit-log, billing")
	catalog := decode[[]store.CatalogEntry](t, mustRun(t, e, "catalog", "--json").stdout)
	for _, c := range catalog {
		if c.Deprecated != (c.Type == "contacts.person.updated") {
			t.Errorf("catalog %s@%d deprecated = %v", c.Type, c.Version, c.Deprecated)
		}
	}
}

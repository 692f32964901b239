package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"herald/store"
)

// TestCatalogShowsDescriptionSchemaFirstSeen: catalog gives each event's
// description, data schema and the time its declaration was first applied,
// in text and JSON; removing the app and applying it again keeps the time.
func TestCatalogShowsDescriptionSchemaFirstSeen(t *testing.T) {
	t.Parallel()
	before := time.Now().Add(-time.Minute)
	e := appliedEnv(t)
	find := func() store.CatalogEntry {
		t.Helper()
		for _, c := range decode[[]store.CatalogEntry](t, mustRun(t, e, "catalog", "--json").stdout) {
			if c.Type == "contacts.person.updated" && c.Version == 1 {
				return c
			}
		}
		t.Fatal("catalog --json has no contacts.person.updated@1")
		return store.CatalogEntry{}
	}
	c := find()
	var schema bytes.Buffer
	if err := json.Compact(&schema, c.DataSchema); err != nil {
		t.Fatalf("dataSchema %q is not JSON: %v", c.DataSchema, err)
	}
	if c.Description != "A person's contact details were created or changed." ||
		!strings.Contains(schema.String(), `"required":["id","name"]`) ||
		c.FirstSeen.Before(before) || c.FirstSeen.After(time.Now().Add(time.Minute)) {
		t.Fatalf("catalog --json entry: description %q, schema %s, first seen %v", c.Description, schema.String(), c.FirstSeen)
	}

	text := mustRun(t, e, "catalog").stdout
	wantContains(t, "catalog", text, "FIRST SEEN", formatTime(c.FirstSeen),
		"contacts.person.updated@1: Person updated\n    A person's contact details were created or changed.\n",
		`    data schema: {"type":"object","required":["id","name"],`)

	mustRun(t, e, "apps", "remove", "contacts")
	mustRun(t, e, "apps", "apply", examplesDir())
	if again := find(); !again.FirstSeen.Equal(c.FirstSeen) {
		t.Errorf("first seen after remove and apply: %v, want %v as before", again.FirstSeen, c.FirstSeen)
	}
}

// TestStatusRejectedPerApp: status gives the total of rejected events per
// app, the app with the most first, in text and JSON.
func TestStatusRejectedPerApp(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t).with("TEMPORAL_ADDRESS", "127.0.0.1:1").with("HERALD_WORKER_URL", "http://127.0.0.1:1")
	empty := decode[statusJSON](t, mustRun(t, e, "status", "--json").stdout)
	if empty.RejectedByApp == nil || len(empty.RejectedByApp) != 0 {
		t.Errorf("status --json before any rejection: rejectedByApp %#v, want []", empty.RejectedByApp)
	}
	publish := func(app, typ, data string) {
		t.Helper()
		if r := run(t, e, "publish", "--app", app, "--type", typ, "--version", "1", "--subject", "k", "--data", data); r.code != ExitInvalid {
			t.Fatalf("publish %s %s: exit %d, want a rejection (2)\n%s", app, data, r.code, r.stderr)
		}
	}
	publish("contacts", "contacts.person.updated", `{"id":"1"}`)
	publish("contacts", "contacts.person.updated", `not json`)
	publish("nobody", "nobody.thing.done", `{}`)
	mustRun(t, e, "publish", "--app", "contacts", "--type", "contacts.person.updated", "--version", "1",
		"--subject", "k", "--data", `{"id":"1","name":"Ada"}`)

	got := decode[statusJSON](t, mustRun(t, e, "status", "--json").stdout).RejectedByApp
	if len(got) != 2 || got[0].App != "contacts" || got[0].Total != 2 || got[1].App != "nobody" || got[1].Total != 1 ||
		got[0].Last.IsZero() {
		t.Fatalf("status --json rejectedByApp = %+v, want contacts 2, nobody 1", got)
	}
	text := mustRun(t, e, "status").stdout
	wantContains(t, "status", text, "Rejected events per app (over the event log's retention):")
	var rows []string
	for _, l := range strings.Split(text[strings.Index(text, "Rejected events per app"):], "\n")[2:4] {
		rows = append(rows, strings.Join(strings.Fields(l)[:2], " "))
	}
	if strings.Join(rows, ", ") != "contacts 2, nobody 1" {
		t.Errorf("status rows of rejected events per app: %q, want contacts 2, nobody 1\n%s", rows, text)
	}
}

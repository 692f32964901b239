package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"herald/manifest"
	"herald/store"
)

// withSchema returns e with another dataSchema.
func withSchema(e manifest.Event, schema string) manifest.Event {
	e.DataSchema = json.RawMessage(schema)
	return e
}

func TestApplyRefusesBreakingSchemaChange(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	v1 := withSchema(decl("person.updated", 1), `{"type":"object","properties":{"name":{"type":"string"}}}`)
	mustApply(t, s, contactsManifest(v1))

	breaking := withSchema(v1, `{"type":"object","required":["name"],"properties":{"name":{"type":"string","maxLength":50}}}`)
	m := contactsManifest(breaking)
	_, err := s.ApplyManifest(ctx, m, "alice")
	var be *store.BreakingChangeError
	if !errors.As(err, &be) {
		t.Fatalf("apply = %v, want a BreakingChangeError", err)
	}
	if be.App != "contacts" || len(be.Breaks) != 1 || be.Breaks[0].Declaration != "contacts.person.updated@1" ||
		len(be.Breaks[0].Changes) != 2 {
		t.Fatalf("error = %+v", be)
	}
	for _, part := range []string{"contacts.person.updated@1", "declare the changed schema as contacts.person.updated@2",
		`/required/0: new required property "name"`, "/properties/name/maxLength: maxLength tightened (was none, now 50)"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not contain %q", err, part)
		}
	}
	// Nothing was written: the stored schema is the old one and the hash
	// too, so applying v1 again is a no-op.
	res := mustApply(t, s, contactsManifest(v1))
	if !res.Unchanged {
		t.Errorf("re-applying the stored manifest changed something: %+v", res)
	}

	// A compatible change of the same declaration is applied.
	widened := withSchema(v1, `{"type":["object","null"],"properties":{"name":{"type":["string","null"]}}}`)
	if res := mustApply(t, s, contactsManifest(widened)); res.DeclarationsUpdated != 1 || len(res.BreakingChanges) != 0 {
		t.Errorf("compatible change: %+v", res)
	}
	// The breaking schema as a new version is fine.
	v2 := breaking
	v2.Version = 2
	if res := mustApply(t, s, contactsManifest(widened, v2)); res.DeclarationsAdded != 1 {
		t.Errorf("new version: %+v", res)
	}
}

func TestApplyAllowBreakingIsAudited(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	v1 := decl("person.updated", 1)
	mustApply(t, s, contactsManifest(v1))
	closed := withSchema(v1, `{"type":"object","additionalProperties":false}`)

	if _, err := s.ApplyManifestWith(ctx, contactsManifest(closed), store.ApplyOptions{Actor: "alice", AllowBreaking: true}); err == nil ||
		!strings.Contains(err.Error(), "needs a reason") {
		t.Fatalf("allow-breaking without a reason = %v", err)
	}
	res, err := s.ApplyManifestWith(ctx, contactsManifest(closed),
		store.ApplyOptions{Actor: "alice", AllowBreaking: true, Reason: "no publisher sends extra fields"})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeclarationsUpdated != 1 || len(res.BreakingChanges) != 1 ||
		res.BreakingChanges[0].Changes[0].Pointer != "/additionalProperties" {
		t.Fatalf("result = %+v", res)
	}
	rows := auditRows(t, s, store.ActionDeclarationBreakingChange, "contacts.person.updated@1")
	if len(rows) != 1 || rows[0].Actor != "alice" {
		t.Fatalf("breaking_change audit rows = %+v", rows)
	}
	var meta struct {
		App     string                  `json:"app"`
		Reason  string                  `json:"reason"`
		Changes []manifest.SchemaChange `json:"changes"`
	}
	if err := json.Unmarshal(rows[0].Metadata, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.App != "contacts" || meta.Reason != "no publisher sends extra fields" || len(meta.Changes) != 1 ||
		!strings.Contains(meta.Changes[0].Message, "additionalProperties closed") {
		t.Errorf("audit metadata = %+v", meta)
	}
	applied := auditRows(t, s, store.ActionAppApplied, "contacts")
	if last := applied[len(applied)-1]; !strings.Contains(string(last.Metadata), `"allowBreaking": true`) &&
		!strings.Contains(string(last.Metadata), `"allowBreaking":true`) {
		t.Errorf("app.applied metadata %s does not record the override", last.Metadata)
	}
}

func TestApplyCannotProveCompatible(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	v1 := decl("person.updated", 1)
	mustApply(t, s, contactsManifest(v1))
	_, err := s.ApplyManifest(context.Background(),
		contactsManifest(withSchema(v1, `{"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}]}`)), "alice")
	var be *store.BreakingChangeError
	if !errors.As(err, &be) || !be.Breaks[0].Changes[0].Unproven ||
		!strings.Contains(err.Error(), "/oneOf: cannot prove compatible") {
		t.Fatalf("apply = %v, want a refusal saying it cannot prove compatibility", err)
	}
}

func TestDiffManifestsChangesNothing(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.deleted", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1), subTo("contacts.person.deleted", 1)))
	auditBefore, err := s.ListAudit(ctx, store.AuditFilter{Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	statesBefore := states(t, s)

	contacts := contactsManifest(
		withSchema(decl("person.updated", 1), `{"type":"object","required":["name"]}`), // breaking
		decl("person.created", 1), // added; person.deleted retired
	)
	billing := billingManifest(subTo(personUpdated, 1), subTo("contacts.person.created", 1)) // one added, one removed
	results, err := s.DiffManifests(ctx, []*manifest.Manifest{contacts, billing})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results", len(results))
	}
	c, b := results[0], results[1]
	if c.Details == nil || !slices.Equal(c.Details.DeclarationsAdded, []string{"contacts.person.created@1"}) ||
		!slices.Equal(c.Details.DeclarationsChanged, []string{"contacts.person.updated@1"}) ||
		!slices.Equal(c.Details.DeclarationsRetired, []string{"contacts.person.deleted@1"}) {
		t.Errorf("contacts details = %+v", c.Details)
	}
	if len(c.BreakingChanges) != 1 || c.BreakingChanges[0].Declaration != "contacts.person.updated@1" {
		t.Errorf("contacts breaking changes = %+v", c.BreakingChanges)
	}
	if b.Details == nil || !slices.Equal(b.Details.SubscriptionsAdded, []string{"billing:contacts.person.created@1"}) ||
		!slices.Equal(b.Details.SubscriptionsCancelled, []string{"billing:contacts.person.deleted@1"}) {
		t.Errorf("billing details = %+v", b.Details)
	}
	// The new subscription of billing sees contacts' new declaration of
	// the same diff: it would become active.
	found := false
	for _, sc := range append(c.StateChanges, b.StateChanges...) {
		if sc.SubscriptionID == "billing:contacts.person.created@1" && sc.To == "active" {
			found = true
		}
	}
	if !found {
		t.Errorf("state changes %+v %+v do not show the new subscription becoming active", c.StateChanges, b.StateChanges)
	}

	auditAfter, err := s.ListAudit(ctx, store.AuditFilter{Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(auditAfter) != len(auditBefore) {
		t.Errorf("the diff wrote %d audit rows", len(auditAfter)-len(auditBefore))
	}
	if got := states(t, s); !mapsEqual(got, statesBefore) {
		t.Errorf("states changed: %v, were %v", got, statesBefore)
	}
	d, err := s.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range d {
		if decl.Type == "contacts.person.created" {
			t.Errorf("the diff declared %s", decl.Type)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestDeprecatedDeclaration(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1)))

	dep := decl("person.updated", 1)
	dep.Deprecated = true
	res := mustApply(t, s, contactsManifest(dep, decl("person.updated", 2)))
	if res.DeclarationsUpdated != 1 || res.DeclarationsAdded != 1 {
		t.Errorf("deprecating = %+v, want 1 updated, 1 added", res)
	}
	d, err := s.LookupDeclaration(ctx, personUpdated, 1)
	if err != nil || !d.Deprecated {
		t.Fatalf("LookupDeclaration = %+v, %v; want deprecated", d, err)
	}
	if states(t, s)[billingSub] != "active/" {
		t.Error("deprecating a version changed its subscription's state")
	}
	catalog, err := s.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range catalog {
		want := e.Version == 1
		if e.Type == personUpdated && e.Deprecated != want {
			t.Errorf("catalog %s@%d deprecated = %v", e.Type, e.Version, e.Deprecated)
		}
		if e.Type == personUpdated && e.Version == 1 && (len(e.Subscribers) != 1 || e.Subscribers[0].App != "billing") {
			t.Errorf("subscribers of the deprecated version = %+v", e.Subscribers)
		}
	}
	// Undeprecating is an update too.
	if res := mustApply(t, s, contactsManifest(decl("person.updated", 1), decl("person.updated", 2))); res.DeclarationsUpdated != 1 {
		t.Errorf("undeprecating = %+v", res)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/publish"
)

// deletedType is a second event type: contacts.person.deleted@1, to which
// only billing subscribes.
const deletedType = "contacts.person.deleted"

// addDeletedType declares contacts.person.deleted@1 and subscribes billing
// to it, beside contacts.person.updated@1.
func (h *herald) addDeletedType() {
	h.t.Helper()
	app, err := h.Svc.Store.GetApp(context.Background(), "billing")
	if err != nil {
		h.t.Fatal(err)
	}
	contacts := system.Manifest("contacts", app.Endpoint)
	contacts.Events = append(contacts.Events, manifest.Event{Name: "person.deleted", Version: 1, Subject: "person",
		DataSchema: json.RawMessage(`{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}`)})
	billing := system.Manifest("billing", app.Endpoint)
	billing.Subscribes = append(billing.Subscribes, manifest.Subscription{Type: deletedType, Version: 1})
	dir := system.WriteManifestDir(h.t, contacts, billing)
	mustRun(h.t, h.env, "apps", "apply", dir)
}

// TestDeliveriesTypeAndPaging lists keys by event type, and pages through
// one subscription's keys with --limit and --page-token: every key once,
// the last page without a token.
func TestDeliveriesTypeAndPaging(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.addDeletedType()
	updated := []string{"p-1", "p-2", "p-3", "p-4", "p-5"}
	h.publish(updated, 1)
	for _, k := range []string{"d-1", "d-2"} {
		if _, err := h.Publisher.Publish(context.Background(), publish.Request{App: "contacts", Type: deletedType, Version: 1,
			Subject: k, Data: json.RawMessage(`{"n":9}`)}); err != nil {
			t.Fatal(err)
		}
		h.waitArrivals("billing", k, 9)
	}
	deletedSub := "billing:" + deletedType + "@1"

	h.waitListed([]string{"d-1", "d-2"}, "--type", deletedType)
	h.waitListed(updated, "--type", "contacts.person.updated", "--subscription", billingSub)
	out := decode[deliveriesJSON](t, mustRun(t, h.env, "deliveries", "--type", deletedType, "--json").stdout)
	for _, k := range out.Keys {
		if k.Subscription != deletedSub || k.EventType != deletedType {
			t.Errorf("deliveries --type %s listed %+v", deletedType, k)
		}
	}
	if !strings.Contains(out.Query, `HeraldEventType = "`+deletedType+`"`) || out.More || out.NextPageToken != "" {
		t.Errorf("deliveries --type --json: query %q, more %v, token %q", out.Query, out.More, out.NextPageToken)
	}
	if got := h.listed("--type", "audit-log.nothing"); len(got) != 0 {
		t.Errorf("deliveries of a type without keys listed %v", got)
	}

	// Pages of two: 2, 2, 1; each key once; the last page has no token.
	args := []string{"deliveries", "--subscription", billingSub, "--limit", "2", "--json"}
	var seen []string
	var sizes []int
	token := ""
	for range 5 {
		a := args
		if token != "" {
			a = append(slices.Clone(args), "--page-token", token)
		}
		page := decode[deliveriesJSON](t, mustRun(t, h.env, a...).stdout)
		sizes = append(sizes, len(page.Keys))
		for _, k := range page.Keys {
			seen = append(seen, k.Subject)
		}
		if page.More != (page.NextPageToken != "") {
			t.Fatalf("page %d: more %v with token %q", len(sizes), page.More, page.NextPageToken)
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	slices.Sort(seen)
	if !slices.Equal(sizes, []int{2, 2, 1}) || !slices.Equal(seen, updated) {
		t.Errorf("pages of 2 over 5 keys: sizes %v, keys %v; want [2 2 1] and %v", sizes, seen, updated)
	}

	// The text names the command of the next page, which lists the rest.
	text := mustRun(t, h.env, "deliveries", "--subscription", billingSub, "--limit", "4").stdout
	wantContains(t, "deliveries --limit 4", text, "More keys match; the next page:",
		"starter deliveries --subscription "+billingSub+" --limit 4 --page-token ")
	_, next, _ := strings.Cut(text, "the next page:\n  ")
	next, _, _ = strings.Cut(next, "\n")
	rest := decode[deliveriesJSON](t, mustRun(t, h.env, append(strings.Fields(next)[1:], "--json")...).stdout)
	if len(rest.Keys) != 1 || rest.More {
		t.Errorf("the next page of 4 over 5 keys: %+v", rest)
	}

	for _, bad := range []string{"not a token!", "=="} {
		r := run(t, h.env, "deliveries", "--page-token", bad)
		if r.code != ExitInvalid || !strings.Contains(r.stderr, "is not a page token printed by starter deliveries") {
			t.Errorf("--page-token %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
}

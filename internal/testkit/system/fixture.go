package system

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"herald/manifest"
)

// The fixture manifests every system test works with (examples/manifests
// are the examples, tested on their own): contacts declares
// contacts.person.updated@1 with subject "person" and billing.invoice.paid@1
// is billing's; billing and audit-log subscribe to contacts.person.updated@1.
// Every app's endpoint is the one subscriber of the System.
const (
	// PersonUpdated is the event type the fixture publishes.
	PersonUpdated = "contacts.person.updated"
	// BillingSub and AuditLogSub are the fixture's subscriptions.
	BillingSub  = "billing:contacts.person.updated@1"
	AuditLogSub = "audit-log:contacts.person.updated@1"
)

// personSchema is the data of contacts.person.updated@1: a counter n (the
// recorder records it), and optionally a name and an id.
const personSchema = `{"type":"object","required":["n"],"properties":{"n":{"type":"integer"},"name":{"type":"string"},"id":{"type":"string"}}}`

const invoiceSchema = `{"type":"object","required":["invoiceId"],"properties":{"invoiceId":{"type":"string"}}}`

// Manifests are the fixture manifests with endpoint as every app's endpoint.
func Manifests(endpoint string) []*manifest.Manifest {
	return []*manifest.Manifest{
		{App: "contacts", Endpoint: endpoint, Events: []manifest.Event{
			{Name: "person.updated", Version: 1, Subject: "person", DataSchema: json.RawMessage(personSchema)},
		}},
		{App: "billing", Endpoint: endpoint,
			Events: []manifest.Event{
				{Name: "invoice.paid", Version: 1, Subject: "invoice", DataSchema: json.RawMessage(invoiceSchema)},
			},
			Subscribes: []manifest.Subscription{{Type: PersonUpdated, Version: 1}}},
		{App: "audit-log", Endpoint: endpoint, Subscribes: []manifest.Subscription{{Type: PersonUpdated, Version: 1}}},
	}
}

// WriteManifests writes the fixture manifests as <app>.json files into a
// fresh directory and returns it (for `starter apps apply DIR`).
func WriteManifests(t testing.TB, endpoint string) string {
	t.Helper()
	return WriteManifestDir(t, Manifests(endpoint)...)
}

// WriteManifestDir writes ms as <app>.json files into a fresh directory and
// returns it.
func WriteManifestDir(t testing.TB, ms ...*manifest.Manifest) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range ms {
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, m.App+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Manifest is the fixture manifest of app with endpoint (nil for an app
// not in the fixture).
func Manifest(app, endpoint string) *manifest.Manifest {
	for _, m := range Manifests(endpoint) {
		if m.App == app {
			return m
		}
	}
	return nil
}

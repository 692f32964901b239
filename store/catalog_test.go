package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"herald/manifest"
	"herald/store"
)

func TestCatalog(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1), withPlace(decl("person.moved", 1)), decl("person.gone", 1)))
	mustApply(t, s, billingManifest(subTo(personUpdated, 1), subTo("contacts.person.moved", 1), subTo("contacts.nothing", 1)))
	mustApply(t, s, mkManifest("audit-log", nil, subTo(personUpdated, 1), subTo("contacts.person.gone", 1)))
	mustApply(t, s, mkManifest("audit-log", nil, subTo(personUpdated, 1)))
	mustApply(t, s, contactsManifest(decl("person.updated", 1), withPlace(decl("person.moved", 1))))

	got, err := s.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.CatalogEntry{
		{Type: invoicePaid, Version: 1, App: "billing", Subject: "thing", Title: "Title of invoice.paid",
			Subscribers: []store.CatalogSubscriber{{SubscriptionID: contactsSub, App: "contacts", State: "active"}}},
		{Type: "contacts.person.gone", Version: 1, App: "contacts", Subject: "thing", Title: "Title of person.gone", Retired: true,
			Subscribers: []store.CatalogSubscriber{{SubscriptionID: "audit-log:contacts.person.gone@1", App: "audit-log",
				State: "cancelled", Reason: "subscription_removed"}}},
		{Type: "contacts.person.moved", Version: 1, App: "contacts", Subject: "thing", Title: "Title of person.moved", Place: true,
			Subscribers: []store.CatalogSubscriber{{SubscriptionID: "billing:contacts.person.moved@1", App: "billing",
				State: "blocked", Reason: "resource_events_unsupported"}}},
		{Type: personUpdated, Version: 1, App: "contacts", Subject: "thing", Title: "Title of person.updated",
			Subscribers: []store.CatalogSubscriber{
				{SubscriptionID: "audit-log:contacts.person.updated@1", App: "audit-log", State: "active"},
				{SubscriptionID: billingSub, App: "billing", State: "active"},
			}},
	}
	// Each entry has its declaration's data schema and first-seen time
	// (compared apart: the times are the database's).
	for i := range got {
		if string(got[i].DataSchema) != `{"type": "object"}` || got[i].FirstSeen.IsZero() {
			t.Errorf("%s@%d: dataSchema %s, first seen %v", got[i].Type, got[i].Version, got[i].DataSchema, got[i].FirstSeen)
		}
		got[i].DataSchema, got[i].FirstSeen = nil, time.Time{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("catalog =\n%+v\nwant\n%+v", got, want)
	}

	// A removed publisher's declarations show as retired.
	if _, err := s.RemoveApp(ctx, "billing", "bob"); err != nil {
		t.Fatal(err)
	}
	got, err = s.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Retired || got[0].Subscribers[0].State != "blocked" {
		t.Errorf("after removing billing: %+v", got[0])
	}
}

func TestCatalogEmpty(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	got, err := s.Catalog(context.Background())
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("catalog = %#v, %v; want an empty list", got, err)
	}
}

func TestListAppsAndSubscriptions(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	b := billingManifest(subTo(personUpdated, 1))
	b.DeliveryPath = "/hooks/herald"
	mustApply(t, s, b)
	if _, err := s.RemoveApp(ctx, "contacts", "bob"); err != nil {
		t.Fatal(err)
	}

	apps, err := s.ListApps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 2 || apps[0].ID != "billing" || apps[1].ID != "contacts" {
		t.Fatalf("apps = %+v", apps)
	}
	if apps[0].DeliveryPath != "/hooks/herald" || apps[0].RemovedAt != nil || apps[0].ContentHash != b.Hash() || apps[0].AppliedAt.IsZero() {
		t.Errorf("billing = %+v", apps[0])
	}
	if apps[1].RemovedAt == nil || apps[1].DeliveryPath != manifest.DefaultDeliveryPath {
		t.Errorf("contacts = %+v", apps[1])
	}

	tests := []struct {
		app  string
		want []string
	}{
		{"", []string{billingSub, contactsSub}},
		{"billing", []string{billingSub}},
		{"contacts", []string{contactsSub}},
		{"nobody", []string{}},
	}
	for _, tt := range tests {
		subs, err := s.ListSubscriptions(ctx, tt.app)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, sub := range subs {
			got = append(got, sub.ID)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ListSubscriptions(%q) = %v, want %v", tt.app, got, tt.want)
		}
	}

	sub, err := s.GetSubscription(ctx, contactsSub)
	if err != nil {
		t.Fatal(err)
	}
	if sub.App != "contacts" || sub.Type != invoicePaid || sub.Version != 1 || sub.State != "cancelled" ||
		sub.Reason != "subscription_removed" || sub.CreatedAt.IsZero() || sub.UpdatedAt.Before(sub.CreatedAt) {
		t.Errorf("subscription = %+v", sub)
	}
}

func TestDeliveryTarget(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	b := billingManifest(subTo(personUpdated, 1))
	b.Endpoint = "https://billing.internal:8443/"
	b.DeliveryPath = "/hooks/herald"
	mustApply(t, s, b)

	got, err := s.DeliveryTarget(ctx, billingSub)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Target{SubscriptionID: billingSub, Type: personUpdated, Version: 1, State: "active",
		App: "billing", Endpoint: "https://billing.internal:8443/", DeliveryPath: "/hooks/herald"}
	if got != want {
		t.Errorf("target = %+v, want %+v", got, want)
	}
	if u := got.URL(); u != "https://billing.internal:8443/hooks/herald" {
		t.Errorf("URL = %s", u)
	}

	if _, err := s.SetSubscriptionPaused(ctx, billingSub, true, "bob", ""); err != nil {
		t.Fatal(err)
	}
	got, err = s.DeliveryTarget(ctx, billingSub)
	if err != nil || got.State != "paused" || got.Reason != "paused_by_operator" {
		t.Errorf("paused target = %+v, %v", got, err)
	}
}

func TestTargetURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ endpoint, path, want string }{
		{"https://a.internal", manifest.DefaultDeliveryPath, "https://a.internal/api/_internal/events/v1/deliver"},
		{"https://a.internal/", "/x", "https://a.internal/x"},
		{"https://a.internal/base", "x", "https://a.internal/base/x"},
	}
	for _, tt := range tests {
		if got := (store.Target{Endpoint: tt.endpoint, DeliveryPath: tt.path}).URL(); got != tt.want {
			t.Errorf("URL(%q, %q) = %q, want %q", tt.endpoint, tt.path, got, tt.want)
		}
	}
}

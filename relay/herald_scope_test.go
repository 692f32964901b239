package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"herald/manifest"
	"herald/relay"
	"herald/store"
	"herald/workflows"
)

// Any app could subscribe to herald.key.failed and received every app's
// failures: their subject keys and their receivers' error bodies. Now an
// operational event goes only to the app whose subscription it is about
// (issue 27 item 7).
func TestOperationalEventsReachOnlyTheirOwnApp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, p := setup(t)
	if _, err := st.EnsureHeraldApp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*manifest.Manifest{
		{App: "billing", Endpoint: "http://billing.test", Subscribes: []manifest.Subscription{
			{Type: "contacts.person.updated", Version: 1}, {Type: store.TypeKeyFailed, Version: 1}}},
		{App: "crm", Endpoint: "http://crm.test", Subscribes: []manifest.Subscription{
			{Type: "contacts.person.updated", Version: 1}, {Type: store.TypeKeyFailed, Version: 1}}},
		{App: "watcher", Endpoint: "http://watcher.test", Subscribes: []manifest.Subscription{
			{Type: store.TypeKeyFailed, Version: 1}}},
	} {
		if _, err := st.ApplyManifest(ctx, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	publishN(t, p, "contacts.person.updated", "p1", 1)
	r := &relay.Relay{Store: st, Temporal: &fakeTemporal{}}
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// The key's event (the manifests' operational events come before it).
	var eventID string
	if err := st.Pool.QueryRow(ctx, `SELECT id::text FROM events WHERE type = 'contacts.person.updated' AND subject = 'p1'`).
		Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"billing:contacts.person.updated@1", "crm:contacts.person.updated@1"} {
		err := st.RecordWithAudit(ctx, sub, "p1", []store.OutcomeUpdate{
			{EventID: eventID, Status: store.EventFailed, Attempts: 3, Code: "attempts_exhausted",
				LastCode: "handler_failed", LastError: "secret of " + sub},
		}, []store.AuditEntry{{
			Action: store.ActionDeliveryFailed, Outcome: store.OutcomeFailed, TargetType: store.TargetDelivery,
			TargetID: "deliver:" + sub + ":p1", ErrorCode: "attempts_exhausted",
			Metadata: map[string]any{"seq": float64(1), "attempts": float64(3), "lastCode": "handler_failed",
				"error": "secret of " + sub, "eventId": eventID, "subscription": sub, "subject": "p1"},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}

	tmp := &fakeTemporal{}
	r = &relay.Relay{Store: st, Temporal: tmp}
	if _, err := r.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// Each herald.key.failed subscription's keys and the events they carry.
	got := map[string][]string{}
	for i, s := range tmp.signals {
		var sig workflows.EventSignal
		if err := json.Unmarshal(tmp.args[i], &sig); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(s.WorkflowID, store.TypeKeyFailed) {
			t.Fatalf("unexpected signal to %s", s.WorkflowID)
		}
		got[s.Params.SubscriberApp] = append(got[s.Params.SubscriberApp], s.Params.SubjectKey)
	}
	want := map[string][]string{
		"billing": {"billing:contacts.person.updated@1/p1"},
		"crm":     {"crm:contacts.person.updated@1/p1"},
	}
	if len(got) != len(want) || strings.Join(got["billing"], ",") != strings.Join(want["billing"], ",") ||
		strings.Join(got["crm"], ",") != strings.Join(want["crm"], ",") {
		t.Fatalf("herald.key.failed delivered per app:\n got %v\nwant %v (watcher subscribes to no failed key)", got, want)
	}
	// A redelivery window (starter events redeliver --since) lists the same.
	for sub, want := range map[string]string{
		"billing:" + store.TypeKeyFailed + "@1": "billing:contacts.person.updated@1/p1",
		"crm:" + store.TypeKeyFailed + "@1":     "crm:contacts.person.updated@1/p1",
		"watcher:" + store.TypeKeyFailed + "@1": "",
	} {
		keys, err := st.WindowEvents(ctx, sub, "", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range keys {
			got = append(got, k.Subject)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("redelivery window of %s: keys %v, want %q", sub, got, want)
		}
	}
	lag, err := st.RelayLag(ctx)
	if err != nil || lag.Undispatched != 0 {
		t.Fatalf("lag %+v %v: events for no subscriber must still be marked dispatched", lag, err)
	}
}

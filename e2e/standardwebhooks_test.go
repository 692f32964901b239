package e2e_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"herald/internal/swverify"
	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/publish"
	"herald/signing"
	"herald/store"
)

// TestStandardWebhooksSignatures: every delivery of the real worker carries
// webhook-id ("<source app>:<event id>"), webhook-timestamp and a v1a
// signature that a receiver written from the Standard Webhooks specification
// alone verifies with the key `starter keys export --standard-webhooks`
// prints.
func TestStandardWebhooksSignatures(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	ks, err := signing.LoadKeys(s.Cfg.SigningKey)
	if err != nil {
		t.Fatal(err)
	}
	var keys []ed25519.PublicKey
	for _, kid := range ks.Kids() {
		k, err := swverify.ParsePublicKey(signing.StandardWebhooksPublicKey(ks.PublicKeys()[kid]))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	var mu sync.Mutex
	var verified, failed []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev cloudEventID
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		defer mu.Unlock()
		if err := swverify.Verify(r.Header, body, keys, time.Now()); err != nil || r.Header.Get("webhook-id") != ev.webhookID() {
			failed = append(failed, ev.ID+": "+errText(err))
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		verified = append(verified, ev.ID)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	hooks := &manifest.Manifest{App: "hooks", Endpoint: srv.URL,
		Subscribes: []manifest.Subscription{{Type: "contacts.person.updated", Version: 1}}}
	if _, err := s.Svc.Store.ApplyManifest(context.Background(), hooks, "e2e"); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 3; n++ {
		s.Publish("person-sw", n)
	}
	testkit.Eventually(t, 30*time.Second, "three deliveries to the Standard Webhooks receiver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(verified)+len(failed) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 0 || len(verified) != 3 {
		t.Fatalf("verified %v, failed %v", verified, failed)
	}
}

func errText(err error) string {
	if err == nil {
		return "webhook-id is not <source app>:<event id>"
	}
	return err.Error()
}

// cloudEventID is the id and source of a delivered CloudEvent.
type cloudEventID struct {
	ID     string `json:"id"`
	Source string `json:"source"`
}

// webhookID is the webhook-id its deliveries must carry.
func (e cloudEventID) webhookID() string {
	return strings.TrimPrefix(e.Source, "app:") + ":" + e.ID
}

// TestWebhookIDsDifferAcrossApps: contacts and billing publish an event
// under the same id; a subscriber of both receives two deliveries whose
// webhook-ids differ ("contacts:<id>" and "billing:<id>"), each verifying
// with the stock Go library and its own secret, so a receiver that
// deduplicates on webhook-id, as Standard Webhooks asks, handles both.
// Herald-Event-Id stays the bare id; Herald-Event-Source names the app.
func TestWebhookIDsDifferAcrossApps(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	ctx := context.Background()
	box, err := signing.LoadSecretBox(testenv.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	type arrival struct{ webhookID, eventID, source, want, verdict string }
	var mu sync.Mutex
	var secret string
	var got []arrival
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev cloudEventID
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		defer mu.Unlock()
		verdict := "ok"
		wh, err := standardwebhooks.NewWebhook(secret)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		if err != nil {
			verdict = err.Error()
		}
		got = append(got, arrival{webhookID: r.Header.Get("webhook-id"), eventID: r.Header.Get("Herald-Event-Id"),
			source: r.Header.Get("Herald-Event-Source"), want: ev.webhookID(), verdict: verdict})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	hooks := &manifest.Manifest{App: "hooks", Endpoint: srv.URL, Subscribes: []manifest.Subscription{
		{Type: system.PersonUpdated, Version: 1}, {Type: "billing.invoice.paid", Version: 1}}}
	if _, err := s.Svc.Store.ApplyManifest(ctx, hooks, "e2e"); err != nil {
		t.Fatal(err)
	}
	sec, err := s.Svc.Store.EnsureAppSecrets(ctx, store.SecretRequest{App: "hooks", Box: box, New: signing.NewSecret, Actor: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	secret = sec.Current.Secret
	mu.Unlock()

	id := uuid.NewString()
	for _, req := range []publish.Request{
		{ID: id, App: "contacts", Type: system.PersonUpdated, Version: 1, Subject: "person-dup", Data: json.RawMessage(`{"n":1}`)},
		{ID: id, App: "billing", Type: "billing.invoice.paid", Version: 1, Subject: "invoice-dup", Data: json.RawMessage(`{"invoiceId":"i-1"}`)},
	} {
		if res, err := s.Publisher.Publish(ctx, req); err != nil || res.Duplicate || res.ID != id {
			t.Fatalf("publish %s under %s: %+v, %v", req.Type, id, res, err)
		}
	}
	testkit.Eventually(t, 30*time.Second, "both apps' events delivered to hooks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	ids := map[string]bool{}
	for _, a := range got {
		if a.verdict != "ok" || a.webhookID != a.want || a.eventID != id ||
			a.source != "app:"+strings.TrimSuffix(a.webhookID, ":"+id) {
			t.Errorf("delivery %+v: want webhook-id %q verifying, Herald-Event-Id %q and its source", a, a.want, id)
		}
		ids[a.webhookID] = true
	}
	if !ids["contacts:"+id] || !ids["billing:"+id] || len(ids) != 2 {
		t.Errorf("webhook-ids %v, want contacts:%s and billing:%s", ids, id, id)
	}
}

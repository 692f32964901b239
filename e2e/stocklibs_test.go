package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/signing"
	"herald/store"
)

// rotationRun drives one end-to-end run against a receiver: an app "hooks"
// subscribed at endpoint, three deliveries with its first secret, a
// rotation with an hour's overlap, three more. setSecrets tells the
// receiver which secrets must verify each delivery from then on; delivered
// waits for n verdicts and returns the failures.
type rotationRun struct {
	setSecrets func(secrets []string)
	delivered  func(n int) []string
}

func runRotation(t *testing.T, s *system.System, endpoint string, r rotationRun) {
	t.Helper()
	ctx := context.Background()
	hooks := &manifest.Manifest{App: "hooks", Endpoint: endpoint,
		Subscribes: []manifest.Subscription{{Type: "contacts.person.updated", Version: 1}}}
	if _, err := s.Svc.Store.ApplyManifest(ctx, hooks, "e2e"); err != nil {
		t.Fatal(err)
	}
	box, err := signing.LoadSecretBox(testenv.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	req := store.SecretRequest{App: "hooks", Box: box, New: signing.NewSecret, Actor: "e2e"}
	first, err := s.Svc.Store.EnsureAppSecrets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r.setSecrets([]string{first.Current.Secret})
	for n := 1; n <= 3; n++ {
		s.Publish("person-stock", n)
	}
	if failed := r.delivered(3); len(failed) != 0 {
		t.Fatalf("before the rotation: %v", failed)
	}
	rotated, err := s.Svc.Store.RotateAppSecret(ctx, store.RotateRequest{SecretRequest: req, Overlap: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// During the overlap every delivery must verify with the old secret
	// (receivers not yet updated) and with the new one (updated ones).
	r.setSecrets([]string{first.Current.Secret, rotated.Current.Secret})
	for n := 4; n <= 6; n++ {
		s.Publish("person-stock", n)
	}
	if failed := r.delivered(6); len(failed) != 0 {
		t.Fatalf("during the rotation: %v", failed)
	}
}

// TestStockGoLibraryVerifiesEveryDelivery: the official Go module of
// Standard Webhooks verifies every live delivery, before and during a
// rotation, and another subscriber's secret verifies none of them (a
// delivery cannot be replayed to another app).
func TestStockGoLibraryVerifiesEveryDelivery(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	box, err := signing.LoadSecretBox(testenv.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	// billing subscribes too (fixture manifests): its secret must not
	// verify hooks' deliveries.
	billing, err := s.Svc.Store.EnsureAppSecrets(context.Background(),
		store.SecretRequest{App: "billing", Box: box, New: signing.NewSecret, Actor: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := standardwebhooks.NewWebhook(billing.Current.Secret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var secrets []string
	var verdicts, failed []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev cloudEventID
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		defer mu.Unlock()
		verdicts = append(verdicts, ev.ID)
		for _, sec := range secrets {
			wh, err := standardwebhooks.NewWebhook(sec)
			if err == nil {
				err = wh.Verify(body, r.Header)
			}
			if err != nil {
				failed = append(failed, ev.ID+": "+err.Error())
				http.Error(w, "bad signature", http.StatusUnauthorized)
				return
			}
		}
		if foreign.Verify(body, r.Header) == nil {
			failed = append(failed, ev.ID+": verifies with another app's secret")
		}
		if r.Header.Get("webhook-id") != ev.webhookID() {
			failed = append(failed, ev.ID+": webhook-id is "+r.Header.Get("webhook-id"))
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	runRotation(t, s, srv.URL, rotationRun{
		setSecrets: func(s []string) { mu.Lock(); secrets = s; mu.Unlock() },
		delivered: func(n int) []string {
			testkit.Eventually(t, 30*time.Second, "deliveries to the stock Go receiver", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(verdicts) >= n
			})
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), failed...)
		},
	})
}

package e2e_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"herald/internal/swverify"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/signing"
)

// TestStandardWebhooksSignatures: every delivery of the real worker carries
// webhook-id (the event id), webhook-timestamp and a v1a signature that a
// receiver written from the Standard Webhooks specification alone verifies
// with the key `starter keys export --standard-webhooks` prints.
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
		var ev struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		defer mu.Unlock()
		if err := swverify.Verify(r.Header, body, keys, time.Now()); err != nil || r.Header.Get("webhook-id") != ev.ID {
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
		return "webhook-id is not the event id"
	}
	return err.Error()
}

package subscriber

import (
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"herald/signing"
)

func webhookHeaders(t *testing.T, secrets []string, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	var keys [][]byte
	for _, s := range secrets {
		k, err := signing.ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", signing.Timestamp(ts.Unix()))
	h.Set("webhook-signature", signing.SignSymmetric(keys, id, signing.Timestamp(ts.Unix()), body))
	return h
}

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := signing.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWebhookVerifier: v1 verifies with any listed secret (old or new
// during a rotation) and v1a with a key; another app's secret, a changed
// body, a stale timestamp and missing headers do not.
func TestWebhookVerifier(t *testing.T) {
	clock := newClock()
	old, cur, other := mustSecret(t), mustSecret(t), mustSecret(t)
	body := eventBody("e-1", "person-1")
	v := WebhookVerifier{Secrets: []string{cur, old}, Now: clock.Now}
	if err := v.Verify(webhookHeaders(t, []string{old}, "e-1", clock.Now(), body), body); err != nil {
		t.Errorf("old secret during the overlap: %v", err)
	}
	if err := v.Verify(webhookHeaders(t, []string{cur, old}, "e-1", clock.Now(), body), body); err != nil {
		t.Errorf("both: %v", err)
	}
	signer := newSigner(t, clock)
	wh, err := signer.SignWebhook("e-1", body)
	if err != nil {
		t.Fatal(err)
	}
	v1a := http.Header{}
	v1a.Set("webhook-id", wh.ID)
	v1a.Set("webhook-timestamp", wh.Timestamp)
	v1a.Set("webhook-signature", wh.Signature)
	if err := (WebhookVerifier{Keys: []ed25519.PublicKey{signer.PublicKey()}, Now: clock.Now}).Verify(v1a, body); err != nil {
		t.Errorf("v1a: %v", err)
	}
	for name, tc := range map[string]struct {
		h    http.Header
		body []byte
	}{
		"other app's secret": {webhookHeaders(t, []string{other}, "e-1", clock.Now(), body), body},
		"changed body":       {webhookHeaders(t, []string{cur}, "e-1", clock.Now(), body), eventBody("e-1", "person-2")},
		"stale":              {webhookHeaders(t, []string{cur}, "e-1", clock.Now().Add(-6*time.Minute), body), body},
		"future":             {webhookHeaders(t, []string{cur}, "e-1", clock.Now().Add(6*time.Minute), body), body},
		"no headers":         {http.Header{}, body},
		"v1a without keys":   {v1a, body},
	} {
		if err := v.Verify(tc.h, tc.body); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

// TestHandlerRequiresWebhookSignature: with WebhookSecrets, a delivery with
// a valid JWT but no valid v1 signature is refused 401.
func TestHandlerRequiresWebhookSignature(t *testing.T) {
	clock := newClock()
	signer := newSigner(t, clock)
	secret := mustSecret(t)
	var rec recorder
	h, err := New(Config{Audience: testAudience, StaticKey: signer.PublicKey(), Now: clock.Now,
		WebhookSecrets: []string{secret}}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	send := func(hdr http.Header, id string) *httptest.ResponseRecorder {
		body := eventBody(id, "person-1")
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+sign(t, signer, body, id, nil))
		for k, v := range hdr {
			req.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := send(webhookHeaders(t, []string{secret}, "e-1", clock.Now(), eventBody("e-1", "person-1")), "e-1"); w.Code != http.StatusNoContent {
		t.Fatalf("signed: %d %s", w.Code, w.Body)
	}
	w := send(webhookHeaders(t, []string{mustSecret(t)}, "e-2", clock.Now(), eventBody("e-2", "person-1")), "e-2")
	if got := responseCode(t, w); w.Code != http.StatusUnauthorized || got.Error != CodeWebhookSignatureInvalid {
		t.Fatalf("wrong secret: %d %+v", w.Code, got)
	}
	if rec.count() != 1 {
		t.Fatalf("handler saw %d events, want 1", rec.count())
	}
	if _, err := New(Config{Audience: testAudience, StaticKey: signer.PublicKey(), WebhookSecrets: []string{"secret"}}, rec.handle); err == nil {
		t.Fatal("a secret without whsec_ accepted")
	}
}

package signing_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"herald/internal/swverify"
	"herald/signing"
)

func TestSignWebhookVerifiesIndependently(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := signing.NewSigner(priv)
	now := time.Unix(1_780_000_000, 0)
	s.Now = func() time.Time { return now }
	body := []byte(`{"specversion":"1.0","id":"e1"}`)
	w, err := s.SignWebhook("e1", body)
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != "e1" || w.Timestamp != "1780000000" || !strings.HasPrefix(w.Signature, "v1a,") {
		t.Fatalf("headers %+v", w)
	}
	pub, err := swverify.ParsePublicKey(signing.StandardWebhooksPublicKey(s.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", w.ID)
	h.Set("webhook-timestamp", w.Timestamp)
	h.Set("webhook-signature", "v1,bm90LW91cnM= "+w.Signature) // another scheme beside it is ignored
	if err := swverify.Verify(h, body, []ed25519.PublicKey{pub}, now); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// Any change breaks it: the body, the id, the timestamp, the clock.
	if swverify.Verify(h, append(body, ' '), []ed25519.PublicKey{pub}, now) == nil {
		t.Fatal("a changed body verified")
	}
	h2 := h.Clone()
	h2.Set("webhook-id", "e2")
	if swverify.Verify(h2, body, []ed25519.PublicKey{pub}, now) == nil {
		t.Fatal("another id verified")
	}
	if swverify.Verify(h, body, []ed25519.PublicKey{pub}, now.Add(10*time.Minute)) == nil {
		t.Fatal("a stale timestamp verified")
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if swverify.Verify(h, body, []ed25519.PublicKey{other}, now) == nil {
		t.Fatal("another key verified")
	}
}

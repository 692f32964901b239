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

// TestWebhookID: the webhook-id names the source app and the event id, so
// two apps' events with one id differ; parts that would break the signed
// content ('.') or the form (':', spaces, control characters, empty) are
// refused.
func TestWebhookID(t *testing.T) {
	const id = "0b9b7d5e-4a52-4d5e-9c1a-6f1f3c2b1a00"
	a, err := signing.WebhookID("contacts", id)
	if err != nil || a != "contacts:"+id {
		t.Fatalf("WebhookID(contacts) = %q, %v", a, err)
	}
	b, err := signing.WebhookID("audit-log", id)
	if err != nil || b != "audit-log:"+id || a == b {
		t.Fatalf("WebhookID(audit-log) = %q, %v; want it to differ from %q", b, err, a)
	}
	for _, bad := range [][2]string{{"", id}, {"contacts", ""}, {"con.tacts", id}, {"contacts", id + ".1"},
		{"a:b", id}, {"contacts", "x y"}, {"contacts", "x\n"}, {"contacts\x7f", id}} {
		if got, err := signing.WebhookID(bad[0], bad[1]); err == nil {
			t.Errorf("WebhookID(%q, %q) = %q, want an error", bad[0], bad[1], got)
		}
	}
}

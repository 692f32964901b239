package signing_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"herald/signing"
)

// TestSignSymmetricVerifiesWithStockLibrary: each v1 entry verifies with the
// official Go library under its own secret, and a third secret verifies none.
func TestSignSymmetricVerifiesWithStockLibrary(t *testing.T) {
	a, b, other := newSecret(t), newSecret(t), newSecret(t)
	body := []byte(`{"id":"e1"}`)
	ts := time.Now()
	sig := signing.SignSymmetric([][]byte{key(t, a), key(t, b)}, "e1", signing.Timestamp(ts.Unix()), body)
	if n := strings.Count(sig, "v1,"); n != 2 {
		t.Fatalf("signature %q: %d v1 entries, want 2", sig, n)
	}
	h := http.Header{}
	h.Set("webhook-id", "e1")
	h.Set("webhook-timestamp", signing.Timestamp(ts.Unix()))
	h.Set("webhook-signature", sig)
	for _, s := range []string{a, b} {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("stock library rejects a v1 entry: %v", err)
		}
	}
	wh, _ := standardwebhooks.NewWebhook(other)
	if err := wh.Verify(body, h); err == nil {
		t.Error("another app's secret verifies the signature")
	}
	if err := wh.Verify([]byte(`{"id":"e2"}`), h); err == nil {
		t.Error("a changed body verifies")
	}
}

func TestNewSecretForm(t *testing.T) {
	s := newSecret(t)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if !strings.HasPrefix(s, "whsec_") || err != nil || len(raw) < 24 {
		t.Fatalf("secret %q: want whsec_ + base64 of at least 24 bytes", s)
	}
	if s == newSecret(t) {
		t.Fatal("two secrets are equal")
	}
	for _, bad := range []string{"", "whsec_", "whsec_!!", "abc", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 8))} {
		if _, err := signing.ParseSecret(bad); err == nil {
			t.Errorf("ParseSecret(%q) accepted", bad)
		}
	}
}

// TestSecretBox: sealed secrets open under the same key and app only.
func TestSecretBox(t *testing.T) {
	keyText := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	box, err := signing.LoadSecretBox(keyText)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := box.Seal("whsec_x", "billing")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "whsec_x") {
		t.Fatal("sealed text holds the secret")
	}
	if got, err := box.Open(sealed, "billing"); err != nil || got != "whsec_x" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := box.Open(sealed, "contacts"); err == nil {
		t.Error("a secret sealed for billing opens for contacts")
	}
	other, _ := signing.LoadSecretBox(base64.StdEncoding.EncodeToString([]byte("ffffffffffffffffffffffffffffffff")))
	if _, err := other.Open(sealed, "billing"); err == nil {
		t.Error("a secret opens under another key")
	}
	file := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(file, []byte(keyText+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := signing.LoadSecretBox("@" + file)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fromFile.Open(sealed, "billing"); err != nil || got != "whsec_x" {
		t.Fatalf("key from file: Open = %q, %v", got, err)
	}
	for _, bad := range []string{"", "  ", "short", base64.StdEncoding.EncodeToString(make([]byte, 16)), "@/nonexistent/key"} {
		if _, err := signing.LoadSecretBox(bad); err == nil || !strings.Contains(err.Error(), "HERALD_SECRET_KEY") {
			t.Errorf("LoadSecretBox(%q) = %v, want an error naming HERALD_SECRET_KEY", bad, err)
		}
	}
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := signing.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func key(t *testing.T, s string) []byte {
	t.Helper()
	k, err := signing.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestDeriveKey: a derived key is the same for the same secret key and
// purpose (every replica derives the console's session key alike), and
// differs for another purpose, another secret key, and from the key itself.
func TestDeriveKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, _ := signing.NewSecretBox(key)
	b, _ := signing.LoadSecretBox(base64.StdEncoding.EncodeToString(key))
	other, _ := signing.NewSecretBox([]byte("ffffffffffffffffffffffffffffffff"))
	k := a.DeriveKey("herald console sessions")
	if len(k) != 32 || !bytes.Equal(k, b.DeriveKey("herald console sessions")) {
		t.Fatalf("derived keys differ for the same key and purpose: %x", k)
	}
	for name, d := range map[string][]byte{"another purpose": a.DeriveKey("other"), "another key": other.DeriveKey("herald console sessions"), "the key": key} {
		if bytes.Equal(k, d) {
			t.Errorf("the derived key equals that of %s", name)
		}
	}
}

package subscriber

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CodeWebhookSignatureInvalid answers a delivery whose Standard Webhooks
// signature does not verify with Config.WebhookSecrets (401).
const CodeWebhookSignatureInvalid = "webhook_signature_invalid"

// DefaultWebhookTolerance is how far webhook-timestamp may be from now, as
// in the stock standardwebhooks libraries.
const DefaultWebhookTolerance = 5 * time.Minute

// WebhookVerifier checks the Standard Webhooks headers of a delivery
// (webhook-id, webhook-timestamp, webhook-signature): a "v1" entry (HMAC-SHA256
// with the app's whsec_ secret) verifying with one of Secrets, or a "v1a"
// entry (Ed25519) with one of Keys. Listing the old and the new secret
// during a rotation accepts deliveries signed with either. A receiver that
// can use a stock standardwebhooks library should; this one is for the
// receiver kit and tests.
type WebhookVerifier struct {
	// Secrets are the app's whsec_ secrets (`starter apps secret show`).
	Secrets []string
	// Keys are Herald's Ed25519 public keys, for v1a.
	Keys []ed25519.PublicKey
	// Tolerance bounds the timestamp's distance from now
	// (DefaultWebhookTolerance when zero).
	Tolerance time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Verify returns nil when one signature entry of h verifies body.
func (v WebhookVerifier) Verify(h http.Header, body []byte) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not Unix seconds", ts)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tol := orDefault(v.Tolerance, DefaultWebhookTolerance)
	if d := now().Sub(time.Unix(secs, 0)); d > tol || d < -tol {
		return fmt.Errorf("webhook-timestamp %s is %s from now, more than %s", ts, d.Round(time.Second), tol)
	}
	var hmacKeys [][]byte
	for _, s := range v.Secrets {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(k) == 0 {
			return errors.New("a configured webhook secret is not whsec_<base64>")
		}
		hmacKeys = append(hmacKeys, k)
	}
	signed := make([]byte, 0, len(id)+len(ts)+2+len(body))
	signed = append(append(append(append(append(signed, id...), '.'), ts...), '.'), body...)
	for _, entry := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		switch version {
		case "v1":
			for _, k := range hmacKeys {
				mac := hmac.New(sha256.New, k)
				mac.Write(signed)
				if hmac.Equal(mac.Sum(nil), raw) {
					return nil
				}
			}
		case "v1a":
			for _, k := range v.Keys {
				if len(k) == ed25519.PublicKeySize && ed25519.Verify(k, signed, raw) {
					return nil
				}
			}
		}
	}
	return errors.New("no webhook-signature entry verifies with the configured secrets or keys")
}

// verifyWebhook checks the v1 signature when Config.WebhookSecrets is set.
func (h *handler) verifyWebhook(hdr http.Header, body []byte) *failure {
	if h.webhook == nil {
		return nil
	}
	if err := h.webhook.Verify(hdr, body); err != nil {
		return unauthorized(CodeWebhookSignatureInvalid, "%v", err)
	}
	return nil
}

// newWebhookVerifier checks Config.WebhookSecrets; nil when there are none.
func newWebhookVerifier(secrets []string, now func() time.Time) (*WebhookVerifier, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	for _, sec := range secrets {
		rest, ok := strings.CutPrefix(sec, "whsec_")
		k, err := base64.StdEncoding.DecodeString(rest)
		if !ok || err != nil || len(k) < 24 {
			return nil, errors.New("subscriber: WebhookSecrets: each must be whsec_<base64 of at least 24 bytes>")
		}
	}
	return &WebhookVerifier{Secrets: append([]string(nil), secrets...), Now: now}, nil
}

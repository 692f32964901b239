package signing

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Standard Webhooks (standardwebhooks.com) asymmetric signatures, so that a
// receiver in any language can verify a delivery with a library it already
// has: the signed content is "<webhook-id>.<webhook-timestamp>.<body>", the
// signature "v1a,<base64 of the Ed25519 signature>", the public key
// "whpk_<base64 of its 32 bytes>". Herald signs with the same key as its JWT.
const (
	// StandardWebhooksVersion prefixes a signature in webhook-signature.
	StandardWebhooksVersion = "v1a"
	// StandardWebhooksPublicKeyPrefix prefixes a public key as receivers take it.
	StandardWebhooksPublicKeyPrefix = "whpk_"
)

// WebhookSignature is the headers of one delivery signed the Standard
// Webhooks way.
type WebhookSignature struct {
	ID        string // webhook-id: WebhookID of the event, the same on every attempt
	Timestamp string // webhook-timestamp: Unix seconds
	Signature string // webhook-signature: "v1a,<base64>"
}

// WebhookID is the webhook-id of every delivery of the event id published by
// app sourceApp: "<sourceApp>:<id>" (docs/design.md#the-http-contract-of-a-delivery).
// Event ids are unique per source app only (two apps may publish the same
// id), and receivers deduplicate on webhook-id, as Standard Webhooks asks:
// with the bare id, one app's event would pass for another's duplicate.
// Neither part may be empty or hold '.', which delimits the signed content,
// nor ':', space or a control character; an app id and a UUID never do.
func WebhookID(sourceApp, eventID string) (string, error) {
	for _, part := range []string{sourceApp, eventID} {
		if part == "" || strings.ContainsFunc(part, func(r rune) bool { return r <= ' ' || r == '.' || r == ':' || r == 0x7f }) {
			return "", fmt.Errorf("webhook id of event %q of app %q: want a non-empty app and id without '.', ':', spaces or control characters", eventID, sourceApp)
		}
	}
	return sourceApp + ":" + eventID, nil
}

// SignWebhook signs one delivery's body for the webhook-* headers, now; id
// is the webhook-id (WebhookID).
func (s *Signer) SignWebhook(id string, body []byte) (WebhookSignature, error) {
	if len(s.priv) != ed25519.PrivateKeySize {
		return WebhookSignature{}, errors.New("sign webhook: signer has no valid private key")
	}
	if id == "" {
		return WebhookSignature{}, errors.New("sign webhook: empty id")
	}
	ts := strconv.FormatInt(s.now().Unix(), 10)
	content := make([]byte, 0, len(id)+len(ts)+2+len(body))
	content = append(append(append(append(append(content, id...), '.'), ts...), '.'), body...)
	sig := ed25519.Sign(s.priv, content)
	return WebhookSignature{ID: id, Timestamp: ts,
		Signature: StandardWebhooksVersion + "," + base64.StdEncoding.EncodeToString(sig)}, nil
}

// StandardWebhooksPublicKey is pub in the whpk_ form receivers configure.
func StandardWebhooksPublicKey(pub ed25519.PublicKey) string {
	return StandardWebhooksPublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
}

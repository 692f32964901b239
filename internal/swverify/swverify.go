// Package swverify verifies Standard Webhooks asymmetric signatures as a
// receiver would, written from the specification alone (standardwebhooks.com:
// signed content "<webhook-id>.<webhook-timestamp>.<body>", signatures
// "v1a,<base64>" separated by spaces, public keys "whpk_<base64>"). Tests use
// it to check Herald's deliveries independently of Herald's signing code.
package swverify

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Tolerance is how far webhook-timestamp may be from now.
const Tolerance = 5 * time.Minute

// ParsePublicKey reads a "whpk_" public key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b64, ok := strings.CutPrefix(s, "whpk_")
	if !ok {
		return nil, errors.New("public key: want the whpk_ prefix")
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key: want base64 of %d bytes", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// Verify checks the webhook-* headers of a request with body against any
// of keys, at now.
func Verify(h http.Header, body []byte, keys []ed25519.PublicKey, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: %w", ts, err)
	}
	if d := now.Sub(time.Unix(secs, 0)); math.Abs(float64(d)) > float64(Tolerance) {
		return fmt.Errorf("webhook-timestamp %s is %v from now", ts, d)
	}
	signed := []byte(id + "." + ts + "." + string(body))
	for _, sig := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1a" {
			continue // other schemes (v1 is HMAC) are not ours to check
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if ed25519.Verify(k, signed, raw) {
				return nil
			}
		}
	}
	return errors.New("no v1a signature verifies with the given keys")
}

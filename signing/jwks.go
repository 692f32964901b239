package signing

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
)

// JWKSPath is where the worker serves the key set (docs/design.md#command-line).
const JWKSPath = "/.well-known/jwks.json"

// jwk is one public key in JWKS form (RFC 8037 for OKP keys).
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
}

// jwkSet is the JWKS document.
type jwkSet struct {
	Keys []jwk `json:"keys"`
}

func buildJWKS(keys []key) ([]byte, error) {
	set := jwkSet{Keys: make([]jwk, 0, len(keys))}
	for _, k := range keys {
		set.Keys = append(set.Keys, jwk{
			Kty: "OKP",
			Crv: "Ed25519",
			X:   base64.RawURLEncoding.EncodeToString(k.pub),
			Kid: k.kid,
			Use: "sig",
			Alg: Algorithm,
		})
	}
	out, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("encode jwks: %w", err)
	}
	return out, nil
}

// JWKS returns the public keys as a JSON Web Key Set, newest first.
func (ks *KeySet) JWKS() []byte {
	return append([]byte(nil), ks.jwks...)
}

// jwksMaxAge is the Cache-Control max-age of the JWKS, short so that receivers
// pick up a rotation soon (they also refetch on an unknown kid).
const jwksMaxAge = "public, max-age=300"

// JWKSHandler serves ks.JWKS() to GET and HEAD requests.
func JWKSHandler(ks *KeySet) http.Handler {
	body := ks.JWKS()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", jwksMaxAge)
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(body)
	})
}

package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// TokenPrefix starts every API token, so secret scanners and people can
// recognise one.
const TokenPrefix = "hrld_"

// tokenIDBytes and tokenSecretBytes size a token's parts: the id finds the
// stored row, the 32 random bytes of the secret are what makes it a secret.
const (
	tokenIDBytes     = 8
	tokenSecretBytes = 32
)

// tokenPattern is hrld_<16 hex digits>_<43 base64url characters>.
var tokenPattern = regexp.MustCompile(`^hrld_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$`)

// TokenNamePattern is what a token's name may look like.
var TokenNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// NewToken generates a token: its id (stored in clear), the token to hand to
// the app (shown once) and the hash to store.
func NewToken() (id, token string, hash []byte, err error) {
	var idb [tokenIDBytes]byte
	var secret [tokenSecretBytes]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", "", nil, fmt.Errorf("generate token: %w", err)
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", "", nil, fmt.Errorf("generate token: %w", err)
	}
	id = hex.EncodeToString(idb[:])
	token = TokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return id, token, HashToken(token), nil
}

// HashToken is what is stored of a token: its SHA-256. A token carries 256
// random bits, so a plain hash is enough (no password stretching needed).
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// tokenID returns the id part of a well-formed token.
func tokenID(token string) (string, bool) {
	m := tokenPattern.FindStringSubmatch(token)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// tokenMatches compares a presented token with a stored hash in constant time.
func tokenMatches(token string, hash []byte) bool {
	return subtle.ConstantTimeCompare(HashToken(token), hash) == 1
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

package signing

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Standard Webhooks symmetric signatures, the version every stock
// standardwebhooks library verifies: the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>", the signature
// "v1,<base64 of HMAC-SHA256>", keyed with the bytes of a "whsec_<base64>"
// secret. Each subscribing app has its own secret, so a delivery one
// subscriber received does not verify at another.
const (
	// SymmetricVersion prefixes an HMAC signature in webhook-signature.
	SymmetricVersion = "v1"
	// SecretPrefix prefixes a signing secret as receivers take it.
	SecretPrefix = "whsec_"
	// SecretBytes is the random bytes of a new secret.
	SecretBytes = 32
	// minSecretBytes is the shortest secret ParseSecret accepts.
	minSecretBytes = 24
)

// NewSecret returns a new random signing secret in its whsec_ form.
func NewSecret() (string, error) {
	b := make([]byte, SecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new signing secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ParseSecret returns the HMAC key of a whsec_ secret.
func ParseSecret(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, errors.New("signing secret: want whsec_<base64>")
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, errors.New("signing secret: not valid base64 after whsec_")
	}
	if len(key) < minSecretBytes {
		return nil, fmt.Errorf("signing secret: %d bytes, want at least %d", len(key), minSecretBytes)
	}
	return key, nil
}

// SignSymmetric returns the "v1,<base64>" entries of webhook-signature for
// id, ts (Unix seconds) and body, one per key, separated by spaces.
func SignSymmetric(keys [][]byte, id, ts string, body []byte) string {
	var b strings.Builder
	for i, k := range keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(SymmetricVersion + ",")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// Timestamp is t's webhook-timestamp form, Unix seconds.
func Timestamp(unix int64) string { return strconv.FormatInt(unix, 10) }

// SecretBox encrypts signing secrets at rest with AES-256-GCM under the key
// of HERALD_SECRET_KEY.
type SecretBox struct {
	aead cipher.AEAD
	// derive is the key HMAC'd to derive other keys (DeriveKey): never the
	// encryption key itself.
	derive []byte
}

// ErrNoSecretKey is returned when no secret encryption key is configured.
var ErrNoSecretKey = errors.New("HERALD_SECRET_KEY is not set: the key that encrypts signing secrets at rest " +
	"(base64 of 32 bytes, or @FILE holding it; generate one with: head -c32 /dev/urandom | base64)")

// LoadSecretBox reads the key of HERALD_SECRET_KEY: base64 of 32 bytes, or
// "@" and the path of a file holding that text.
func LoadSecretBox(v string) (*SecretBox, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, ErrNoSecretKey
	}
	if path, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("HERALD_SECRET_KEY: %w", err)
		}
		v = strings.TrimSpace(string(b))
	}
	key, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(key) != 32 {
		return nil, errors.New("HERALD_SECRET_KEY: want base64 of exactly 32 bytes (head -c32 /dev/urandom | base64)")
	}
	return NewSecretBox(key)
}

// NewSecretBox returns a box sealing with key (32 bytes).
func NewSecretBox(key []byte) (*SecretBox, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("herald derived keys v1"))
	return &SecretBox{aead: aead, derive: mac.Sum(nil)}, nil
}

// DeriveKey is a 32-byte key for purpose, derived from the secret key
// (HMAC-SHA256), so that a feature needing a key shared by every replica
// (the console's sessions) needs no variable of its own, and reveals
// nothing of the encryption key.
func (b *SecretBox) DeriveKey(purpose string) []byte {
	mac := hmac.New(sha256.New, b.derive)
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}

// Seal encrypts secret; ad binds the ciphertext to its owner (the app id),
// so a sealed secret copied to another app's row does not open.
func (b *SecretBox) Seal(secret, ad string) ([]byte, error) {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	return b.aead.Seal(nonce, nonce, []byte(secret), []byte(ad)), nil
}

// Open decrypts what Seal returned for the same ad.
func (b *SecretBox) Open(sealed []byte, ad string) (string, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("open secret: too short")
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], []byte(ad))
	if err != nil {
		return "", errors.New("open secret: wrong HERALD_SECRET_KEY or damaged secret")
	}
	return string(plain), nil
}

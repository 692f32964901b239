package signing

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// DefaultIssuer is the iss claim when DeliveryClaims.Issuer is empty.
const DefaultIssuer = "herald"

// MaxTTL is the longest (and the default) lifetime of a delivery token.
const MaxTTL = 5 * time.Minute

// Algorithm is the JWS algorithm of every delivery token.
const Algorithm = "EdDSA"

// DeliveryClaims describe one delivery attempt to sign.
type DeliveryClaims struct {
	// Issuer is the iss claim; DefaultIssuer when empty.
	Issuer string
	// Audience is the aud claim, "app:<subscriber>".
	Audience string
	// Subject is the sub claim, the subscription id.
	Subject string
	// EventID is the id of the delivered event.
	EventID string
	// Attempt is the attempt number, from 1.
	Attempt int
	// BodySHA256 is BodyHash of the exact request body.
	BodySHA256 string
	// TTL is the token lifetime; MaxTTL when zero, and never more than MaxTTL.
	TTL time.Duration
}

// BodyHash returns the unpadded base64url SHA-256 of body, the body_sha256 claim.
func BodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Signer signs delivery tokens with one Ed25519 private key.
type Signer struct {
	kid  string
	priv ed25519.PrivateKey

	// Now is the clock; time.Now when nil. Tests set it.
	Now func() time.Time
}

// NewSigner returns a signer for priv; its kid is KeyID of the public key.
func NewSigner(priv ed25519.PrivateKey) *Signer {
	pub, _ := priv.Public().(ed25519.PublicKey)
	return &Signer{kid: KeyID(pub), priv: priv}
}

// Kid returns the id of the signing key, the kid header of its tokens.
func (s *Signer) Kid() string { return s.kid }

// PublicKey returns the public half of the signing key.
func (s *Signer) PublicKey() ed25519.PublicKey {
	pub, _ := s.priv.Public().(ed25519.PublicKey)
	return pub
}

func (s *Signer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// SignDelivery returns a compact JWS for one delivery attempt: header alg
// EdDSA, typ JWT and kid; claims iss, aud, sub, iat, exp (iat + TTL), jti (a
// random UUID, new on every call), event_id, attempt and body_sha256.
func (s *Signer) SignDelivery(c DeliveryClaims) (string, error) {
	if len(s.priv) != ed25519.PrivateKeySize {
		return "", errors.New("sign delivery: signer has no valid private key")
	}
	if err := c.validate(); err != nil {
		return "", fmt.Errorf("sign delivery: %w", err)
	}
	issuer := c.Issuer
	if issuer == "" {
		issuer = DefaultIssuer
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = MaxTTL
	}
	// Whole seconds, as NumericDate encodes them, so exp - iat is exactly ttl
	// (rounded down) and never more than MaxTTL.
	iat := s.now().Truncate(time.Second)
	exp := iat.Add(ttl).Truncate(time.Second)

	claims := jwt.MapClaims{
		"iss":         issuer,
		"aud":         c.Audience,
		"sub":         c.Subject,
		"iat":         iat.Unix(),
		"exp":         exp.Unix(),
		"jti":         uuid.NewString(),
		"event_id":    c.EventID,
		"attempt":     c.Attempt,
		"body_sha256": c.BodySHA256,
	}
	token := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	token.Header["kid"] = s.kid
	signed, err := token.SignedString(s.priv)
	if err != nil {
		return "", fmt.Errorf("sign delivery: %w", err)
	}
	return signed, nil
}

// validate checks the claims a receiver relies on.
func (c DeliveryClaims) validate() error {
	switch {
	case c.Audience == "":
		return errors.New("audience is required")
	case c.Subject == "":
		return errors.New("subject is required")
	case c.EventID == "":
		return errors.New("event id is required")
	case c.Attempt < 1:
		return fmt.Errorf("attempt %d: must be at least 1", c.Attempt)
	case c.BodySHA256 == "":
		return errors.New("body hash is required")
	case c.TTL < 0:
		return fmt.Errorf("ttl %s: must not be negative", c.TTL)
	case c.TTL > MaxTTL:
		return fmt.Errorf("ttl %s: must not exceed %s", c.TTL, MaxTTL)
	}
	return nil
}

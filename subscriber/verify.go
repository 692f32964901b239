package subscriber

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// claims are the claims of a Herald delivery token (docs/design.md#the-http-contract-of-a-delivery).
type claims struct {
	jwt.RegisteredClaims
	EventID    string `json:"event_id"`
	Attempt    int    `json:"attempt"`
	BodySHA256 string `json:"body_sha256"`
}

// delivery is what a verified token tells about the delivery.
type delivery struct {
	claims
	audience string // the configured audience the token matched
}

var (
	errKidMissing = errors.New("token header has no kid")
	errKidUnknown = errors.New("unknown kid")
)

// verify checks the token of a delivery against its body, in the order the
// package documentation lists.
func (h *handler) verify(ctx context.Context, authorization string, body []byte) (*delivery, *failure) {
	raw, ok := bearerToken(authorization)
	if !ok {
		return nil, unauthorized(CodeTokenMissing, "Authorization: Bearer token missing")
	}

	var (
		c      claims
		keyErr error // the key func's own error, clearer than the parser's wrapping
	)
	tok, err := h.parser.ParseWithClaims(raw, &c, func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		if kid == "" {
			keyErr = errKidMissing
			return nil, keyErr
		}
		key, err := h.keys.key(ctx, kid)
		keyErr = err
		return key, err
	})
	if err != nil {
		return nil, classifyParseError(tok, err, keyErr)
	}
	audience, f := h.verifyClaims(&c, body)
	if f != nil {
		return nil, f
	}
	return &delivery{claims: c, audience: audience}, nil
}

// bearerToken extracts the token of an "Authorization: Bearer" header.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// classifyParseError maps an error of the JWT parser to a failure. The parser
// checks, in order: structure, algorithm, kid (through the key func, whose
// error is keyErr) and signature.
func classifyParseError(tok *jwt.Token, err, keyErr error) *failure {
	alg := ""
	if tok != nil {
		alg, _ = tok.Header["alg"].(string)
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauthorized(CodeTokenInvalid, "%w", err)
	case alg != "EdDSA":
		return unauthorized(CodeAlgNotAllowed, "algorithm %q not allowed, want EdDSA", alg)
	case errors.Is(keyErr, errKidMissing):
		return unauthorized(CodeKidMissing, "%w", keyErr)
	case keyErr != nil:
		return unauthorized(CodeKidUnknown, "%w", keyErr)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return unauthorized(CodeSignatureInvalid, "%w", err)
	default:
		return unauthorized(CodeTokenInvalid, "%w", err)
	}
}

// verifyClaims checks the claims of a token whose signature is valid and
// returns the configured audience the token is for.
func (h *handler) verifyClaims(c *claims, body []byte) (string, *failure) {
	now := h.now()
	if c.ExpiresAt == nil {
		return "", unauthorized(CodeTokenInvalid, "token has no exp claim")
	}
	if now.After(c.ExpiresAt.Add(h.leeway)) {
		return "", unauthorized(CodeTokenExpired, "token expired at %s", c.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if c.IssuedAt == nil {
		return "", unauthorized(CodeTokenInvalid, "token has no iat claim")
	}
	if c.IssuedAt.After(now.Add(h.leeway)) {
		return "", unauthorized(CodeTokenNotYetValid, "token issued in the future, at %s", c.IssuedAt.UTC().Format(time.RFC3339))
	}
	if c.NotBefore != nil && c.NotBefore.After(now.Add(h.leeway)) {
		return "", unauthorized(CodeTokenNotYetValid, "token not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	if life := c.ExpiresAt.Sub(c.IssuedAt.Time); life > MaxTokenLifetime {
		return "", unauthorized(CodeTokenInvalid, "token lifetime %s exceeds %s", life, MaxTokenLifetime)
	}
	audience := h.matchAudience(c.Audience)
	if audience == "" {
		return "", unauthorized(CodeAudienceMismatch, "token audience %q is not %s", []string(c.Audience), strings.Join(h.audiences, " or "))
	}
	if c.Issuer != h.issuer {
		return "", unauthorized(CodeIssuerMismatch, "token issuer %q is not %q", c.Issuer, h.issuer)
	}
	if c.Subject == "" {
		return "", unauthorized(CodeTokenInvalid, "token has no sub claim")
	}
	if c.BodySHA256 == "" {
		return "", unauthorized(CodeBodyMismatch, "token has no body_sha256 claim")
	}
	sum := sha256.Sum256(body)
	want := base64.RawURLEncoding.EncodeToString(sum[:])
	if subtle.ConstantTimeCompare([]byte(c.BodySHA256), []byte(want)) != 1 {
		return "", unauthorized(CodeBodyMismatch, "body_sha256 does not match the received body")
	}
	if c.ID == "" {
		return "", unauthorized(CodeTokenInvalid, "token has no jti claim")
	}
	// Remember the id until the token can no longer pass the exp check.
	if !h.replay.add(c.ID, c.ExpiresAt.Add(h.leeway), now) {
		return "", unauthorized(CodeReplayed, "token id %q already used", c.ID)
	}
	return audience, nil
}

// matchAudience returns the first configured audience the token names, or "".
func (h *handler) matchAudience(got jwt.ClaimStrings) string {
	for _, want := range h.audiences {
		for _, g := range got {
			if g == want {
				return want
			}
		}
	}
	return ""
}

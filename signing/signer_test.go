package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

func newTestSigner(t *testing.T, now time.Time) *Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSigner(priv)
	s.Now = func() time.Time { return now }
	return s
}

// deliveryTokenClaims mirrors what a receiver decodes.
type deliveryTokenClaims struct {
	jwt.RegisteredClaims
	EventID    string `json:"event_id"`
	Attempt    int    `json:"attempt"`
	BodySHA256 string `json:"body_sha256"`
}

func TestSignDeliveryRoundTrip(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 500_000_000, time.UTC)
	body := []byte(`{"specversion":"1.0","id":"e1"}`)

	tests := []struct {
		name       string
		claims     DeliveryClaims
		wantIssuer string
		wantTTL    time.Duration
	}{
		{
			name: "defaults",
			claims: DeliveryClaims{Audience: "app:billing", Subject: "billing:contacts.person.updated@1",
				EventID: "0b8a3c1e-5c7e-4a43-9d55-3a4f3f1f9b10", Attempt: 1, BodySHA256: BodyHash(body)},
			wantIssuer: "herald",
			wantTTL:    5 * time.Minute,
		},
		{
			name: "explicit issuer and ttl",
			claims: DeliveryClaims{Issuer: "herald-eu", Audience: "app:audit-log", Subject: "audit-log:billing.invoice.paid@2",
				EventID: "e-2", Attempt: 7, BodySHA256: BodyHash(body), TTL: 90 * time.Second},
			wantIssuer: "herald-eu",
			wantTTL:    90 * time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSigner(t, now)
			raw, err := s.SignDelivery(tc.claims)
			if err != nil {
				t.Fatalf("SignDelivery: %v", err)
			}

			var got deliveryTokenClaims
			tok, err := jwt.ParseWithClaims(raw, &got, func(tok *jwt.Token) (any, error) {
				return s.PublicKey(), nil
			}, jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithTimeFunc(func() time.Time { return now }),
				jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithAudience(tc.claims.Audience),
				jwt.WithIssuer(tc.wantIssuer), jwt.WithStrictDecoding())
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			if tok.Header["alg"] != "EdDSA" || tok.Header["typ"] != "JWT" || tok.Header["kid"] != s.Kid() {
				t.Errorf("header %v, want alg EdDSA, typ JWT, kid %s", tok.Header, s.Kid())
			}
			if got.Subject != tc.claims.Subject || got.EventID != tc.claims.EventID ||
				got.Attempt != tc.claims.Attempt || got.BodySHA256 != tc.claims.BodySHA256 {
				t.Errorf("claims %+v do not match %+v", got, tc.claims)
			}
			if len(got.Audience) != 1 || got.Audience[0] != tc.claims.Audience {
				t.Errorf("aud %v, want %q", got.Audience, tc.claims.Audience)
			}
			if got.IssuedAt == nil || got.ExpiresAt == nil {
				t.Fatal("iat or exp missing")
			}
			if !got.IssuedAt.Equal(now.Truncate(time.Second)) {
				t.Errorf("iat %v, want %v", got.IssuedAt.Time, now.Truncate(time.Second))
			}
			ttl := got.ExpiresAt.Sub(got.IssuedAt.Time)
			if ttl != tc.wantTTL {
				t.Errorf("exp - iat = %v, want %v", ttl, tc.wantTTL)
			}
			if ttl > MaxTTL {
				t.Errorf("exp - iat = %v exceeds %v", ttl, MaxTTL)
			}
			if _, err := uuid.Parse(got.ID); err != nil {
				t.Errorf("jti %q is not a UUID: %v", got.ID, err)
			}

			// The aud claim is a plain string, as non-Go receivers expect.
			payload := strings.Split(raw, ".")[1]
			var p jwt.Parser
			dec, err := p.DecodeSegment(payload)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(dec), `"aud":"`+tc.claims.Audience+`"`) {
				t.Errorf("payload %s: aud is not a plain string", dec)
			}
		})
	}
}

func TestSignDeliveryUniqueJTI(t *testing.T) {
	s := newTestSigner(t, time.Now())
	c := DeliveryClaims{Audience: "app:a", Subject: "a:b.c@1", EventID: "e", Attempt: 1, BodySHA256: BodyHash(nil)}
	seen := make(map[string]bool)
	for range 200 {
		raw, err := s.SignDelivery(c)
		if err != nil {
			t.Fatal(err)
		}
		var got deliveryTokenClaims
		if _, _, err := jwt.NewParser().ParseUnverified(raw, &got); err != nil {
			t.Fatal(err)
		}
		if got.ID == "" || seen[got.ID] {
			t.Fatalf("jti %q empty or repeated", got.ID)
		}
		seen[got.ID] = true
	}
}

func TestSignDeliveryRejectsBadClaims(t *testing.T) {
	valid := DeliveryClaims{Audience: "app:a", Subject: "a:b.c@1", EventID: "e", Attempt: 1, BodySHA256: BodyHash(nil)}
	tests := []struct {
		name   string
		mutate func(*DeliveryClaims)
		errHas string
	}{
		{"no audience", func(c *DeliveryClaims) { c.Audience = "" }, "audience"},
		{"no subject", func(c *DeliveryClaims) { c.Subject = "" }, "subject"},
		{"no event id", func(c *DeliveryClaims) { c.EventID = "" }, "event id"},
		{"attempt zero", func(c *DeliveryClaims) { c.Attempt = 0 }, "attempt"},
		{"no body hash", func(c *DeliveryClaims) { c.BodySHA256 = "" }, "body hash"},
		{"ttl above max", func(c *DeliveryClaims) { c.TTL = MaxTTL + time.Second }, "must not exceed"},
		{"negative ttl", func(c *DeliveryClaims) { c.TTL = -time.Second }, "negative"},
	}
	s := newTestSigner(t, time.Now())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			tc.mutate(&c)
			raw, err := s.SignDelivery(c)
			if err == nil {
				t.Fatalf("SignDelivery succeeded: %s", raw)
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error %q does not mention %q", err, tc.errHas)
			}
		})
	}
	if _, err := (&Signer{}).SignDelivery(valid); err == nil {
		t.Error("zero Signer signed a token")
	}
}

func TestBodyHash(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{"", "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"},
		{"abc", "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"},
	}
	for _, tc := range tests {
		if got := BodyHash([]byte(tc.body)); got != tc.want {
			t.Errorf("BodyHash(%q) = %s, want %s", tc.body, got, tc.want)
		}
	}
}

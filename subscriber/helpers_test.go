package subscriber

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"herald/signing"
)

// t0 is the fake "now" of the tests.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// sleep stands in for waiting: it moves the clock.
func (c *fakeClock) sleep(_ context.Context, d time.Duration) error {
	c.Advance(d)
	return nil
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testKeys holds the private key of every signer newSigner made, by kid, for
// tests that build tokens by hand.
var testKeys sync.Map

// newSigner returns a signer with a fresh key on clock.
func newSigner(t testing.TB, clock *fakeClock) *signing.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := signing.NewSigner(priv)
	s.Now = clock.Now
	testKeys.Store(s.Kid(), priv)
	return s
}

// privateKeyOf returns the private key of a signer made by newSigner.
func privateKeyOf(t testing.TB, s *signing.Signer) ed25519.PrivateKey {
	t.Helper()
	k, ok := testKeys.Load(s.Kid())
	if !ok {
		t.Fatalf("no private key recorded for kid %s", s.Kid())
	}
	return k.(ed25519.PrivateKey)
}

const (
	testAudience     = "app:billing"
	testSubscription = "billing:contacts.person.updated@1"
)

// eventBody is a CloudEvent as Herald delivers it.
func eventBody(id, subject string) []byte {
	return fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":"app:contacts","type":"contacts.person.updated",`+
		`"subject":%q,"time":"2025-03-01T11:59:58.123Z","datacontenttype":"application/json","dataversion":1,`+
		`"data":{"name":"Ada"}}`, id, subject)
}

// sign returns a delivery token for body from s, as Herald would send it.
func sign(t testing.TB, s *signing.Signer, body []byte, eventID string, mutate func(*signing.DeliveryClaims)) string {
	t.Helper()
	c := signing.DeliveryClaims{
		Audience:   testAudience,
		Subject:    testSubscription,
		EventID:    eventID,
		Attempt:    1,
		BodySHA256: signing.BodyHash(body),
	}
	if mutate != nil {
		mutate(&c)
	}
	tok, err := s.SignDelivery(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claimsFor is the claim set of a valid delivery of body at now, for tokens
// the tests build by hand.
func claimsFor(now time.Time, body []byte, eventID string) jwt.MapClaims {
	return jwt.MapClaims{
		"iss":         "herald",
		"aud":         testAudience,
		"sub":         testSubscription,
		"iat":         now.Unix(),
		"exp":         now.Add(5 * time.Minute).Unix(),
		"jti":         uuid.NewString(),
		"event_id":    eventID,
		"attempt":     1,
		"body_sha256": signing.BodyHash(body),
	}
}

// signRaw signs claims with priv under header kid (none when empty).
func signRaw(t testing.TB, priv ed25519.PrivateKey, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unsignedToken builds a token with the given header and claims and no signature.
func unsignedToken(t testing.TB, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(header) + "." + enc(claims) + "."
}

// recorder collects the events a Handler receives.
type recorder struct {
	mu     sync.Mutex
	events []Event
	result func(Event) error
}

func (r *recorder) handle(_ context.Context, ev Event) error {
	r.mu.Lock()
	r.events = append(r.events, ev)
	result := r.result
	r.mu.Unlock()
	if result != nil {
		return result(ev)
	}
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// post sends a delivery to h and returns the response.
func post(h http.Handler, token string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/api/_internal/events/v1/deliver", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// responseCode decodes the "error" field of an error response.
func responseCode(t testing.TB, rec *httptest.ResponseRecorder) errorBody {
	t.Helper()
	if rec.Code == http.StatusNoContent {
		return errorBody{}
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("error response Content-Type %q, want application/json", ct)
	}
	var b errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("error response is not JSON: %v: %q", err, rec.Body.String())
	}
	if b.Message == "" {
		t.Errorf("error response %q has no message", rec.Body.String())
	}
	return b
}

// jwksServer serves a JWKS whose keys can change, over TLS on loopback, and counts
// its hits.
type jwksServer struct {
	*httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	keys   map[string]ed25519.PublicKey
	status int
}

func newJWKSServer(t testing.TB, signers ...*signing.Signer) *jwksServer {
	t.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.setKeys(signers...)
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.status != http.StatusOK {
			http.Error(w, "unavailable", s.status)
			return
		}
		var doc struct {
			Keys []map[string]string `json:"keys"`
		}
		for kid, k := range s.keys {
			doc.Keys = append(doc.Keys, map[string]string{"kty": "OKP", "crv": "Ed25519",
				"x": base64.RawURLEncoding.EncodeToString(k), "kid": kid, "use": "sig", "alg": "EdDSA"})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setKeys(signers ...*signing.Signer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = make(map[string]ed25519.PublicKey)
	for _, sg := range signers {
		s.keys[sg.Kid()] = sg.PublicKey()
	}
}

func (s *jwksServer) setStatus(code int) {
	s.mu.Lock()
	s.status = code
	s.mu.Unlock()
}

func (s *jwksServer) url() string { return s.URL + signing.JWKSPath }

package subscriber

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"herald/signing"
)

func TestVerification(t *testing.T) {
	const eventID = "5f0c6a51-3a8e-4d1e-9b0c-7d2a4f9c1e01"
	body := eventBody(eventID, "person-42")

	type tcase struct {
		name string
		// request builds the token and body to send.
		request    func(t *testing.T, signer, stranger *signing.Signer, now time.Time) (token string, body []byte)
		method     string // POST when empty
		wantStatus int
		wantCode   string // "" for success
	}
	withClaims := func(mutate func(c jwt.MapClaims)) func(*testing.T, *signing.Signer, *signing.Signer, time.Time) (string, []byte) {
		return func(t *testing.T, s, _ *signing.Signer, now time.Time) (string, []byte) {
			c := claimsFor(now, body, eventID)
			mutate(c)
			return signRaw(t, privateKeyOf(t, s), s.Kid(), c), body
		}
	}
	tests := []tcase{
		{
			name: "valid token from the signing package",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				return sign(t, s, body, eventID, nil), body
			},
			wantStatus: http.StatusNoContent,
		},
		{
			name:       "valid hand-built token",
			request:    withClaims(func(jwt.MapClaims) {}),
			wantStatus: http.StatusNoContent,
		},
		{
			name:       "aud as an array naming this receiver",
			request:    withClaims(func(c jwt.MapClaims) { c["aud"] = []string{"app:other", testAudience} }),
			wantStatus: http.StatusNoContent,
		},
		{
			name:       "GET",
			method:     http.MethodGet,
			request:    withClaims(func(jwt.MapClaims) {}),
			wantStatus: http.StatusMethodNotAllowed, wantCode: CodeMethodNotAllowed,
		},
		{
			name: "body larger than MaxBodyBytes",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				big := eventBody(eventID, strings.Repeat("x", 5000))
				return sign(t, s, big, eventID, nil), big
			},
			wantStatus: http.StatusRequestEntityTooLarge, wantCode: CodeBodyTooLarge,
		},
		{
			name: "no Authorization header",
			request: func(*testing.T, *signing.Signer, *signing.Signer, time.Time) (string, []byte) {
				return "", body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenMissing,
		},
		{
			name: "garbage token",
			request: func(*testing.T, *signing.Signer, *signing.Signer, time.Time) (string, []byte) {
				return "not-a-jwt", body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenInvalid,
		},
		{
			name: "alg none",
			request: func(t *testing.T, s, _ *signing.Signer, now time.Time) (string, []byte) {
				return unsignedToken(t, map[string]any{"alg": "none", "typ": "JWT", "kid": s.Kid()}, claimsFor(now, body, eventID)), body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeAlgNotAllowed,
		},
		{
			name: "HS256 with the public key as the secret",
			request: func(t *testing.T, s, _ *signing.Signer, now time.Time) (string, []byte) {
				tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsFor(now, body, eventID))
				tok.Header["kid"] = s.Kid()
				raw, err := tok.SignedString([]byte(s.PublicKey()))
				if err != nil {
					t.Fatal(err)
				}
				return raw, body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeAlgNotAllowed,
		},
		{
			name: "no kid",
			request: func(t *testing.T, s, _ *signing.Signer, now time.Time) (string, []byte) {
				return signRaw(t, privateKeyOf(t, s), "", claimsFor(now, body, eventID)), body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeKidMissing,
		},
		{
			name: "unknown kid",
			request: func(t *testing.T, _, stranger *signing.Signer, _ time.Time) (string, []byte) {
				return sign(t, stranger, body, eventID, nil), body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeKidUnknown,
		},
		{
			name: "wrong key under a known kid",
			request: func(t *testing.T, s, stranger *signing.Signer, now time.Time) (string, []byte) {
				return signRaw(t, privateKeyOf(t, stranger), s.Kid(), claimsFor(now, body, eventID)), body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeSignatureInvalid,
		},
		{
			name: "signature of another token",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				a := strings.Split(sign(t, s, body, eventID, nil), ".")
				b := strings.Split(sign(t, s, body, eventID, func(c *signing.DeliveryClaims) { c.Attempt = 2 }), ".")
				return a[0] + "." + b[1] + "." + a[2], body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeSignatureInvalid,
		},
		{
			name: "expired beyond leeway",
			request: withClaims(func(c jwt.MapClaims) {
				c["iat"] = t0.Add(-5 * time.Minute).Unix()
				c["exp"] = t0.Add(-31 * time.Second).Unix()
			}),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenExpired,
		},
		{
			name: "expired within leeway",
			request: withClaims(func(c jwt.MapClaims) {
				c["iat"] = t0.Add(-4 * time.Minute).Unix()
				c["exp"] = t0.Add(-29 * time.Second).Unix()
			}),
			wantStatus: http.StatusNoContent,
		},
		{
			name:       "no exp",
			request:    withClaims(func(c jwt.MapClaims) { delete(c, "exp") }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenInvalid,
		},
		{
			name: "issued in the future beyond leeway",
			request: withClaims(func(c jwt.MapClaims) {
				c["iat"] = t0.Add(2 * time.Minute).Unix()
				c["exp"] = t0.Add(6 * time.Minute).Unix()
			}),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenNotYetValid,
		},
		{
			name:       "issued in the future within leeway",
			request:    withClaims(func(c jwt.MapClaims) { c["iat"] = t0.Add(20 * time.Second).Unix() }),
			wantStatus: http.StatusNoContent,
		},
		{
			name:       "nbf in the future",
			request:    withClaims(func(c jwt.MapClaims) { c["nbf"] = t0.Add(time.Minute).Unix() }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenNotYetValid,
		},
		{
			name:       "no iat",
			request:    withClaims(func(c jwt.MapClaims) { delete(c, "iat") }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenInvalid,
		},
		{
			name:       "lifetime above five minutes",
			request:    withClaims(func(c jwt.MapClaims) { c["exp"] = t0.Add(time.Hour).Unix() }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenInvalid,
		},
		{
			name: "wrong audience",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				return sign(t, s, body, eventID, func(c *signing.DeliveryClaims) { c.Audience = "app:contacts" }), body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeAudienceMismatch,
		},
		{
			name:       "no audience",
			request:    withClaims(func(c jwt.MapClaims) { delete(c, "aud") }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeAudienceMismatch,
		},
		{
			name: "wrong issuer",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				return sign(t, s, body, eventID, func(c *signing.DeliveryClaims) { c.Issuer = "mallory" }), body
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeIssuerMismatch,
		},
		{
			name: "tampered body",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				tok := sign(t, s, body, eventID, nil)
				return tok, []byte(strings.Replace(string(body), "Ada", "Eve", 1))
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeBodyMismatch,
		},
		{
			name: "body with a trailing newline",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				return sign(t, s, body, eventID, nil), append(append([]byte(nil), body...), '\n')
			},
			wantStatus: http.StatusUnauthorized, wantCode: CodeBodyMismatch,
		},
		{
			name:       "no body_sha256",
			request:    withClaims(func(c jwt.MapClaims) { delete(c, "body_sha256") }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeBodyMismatch,
		},
		{
			name:       "no jti",
			request:    withClaims(func(c jwt.MapClaims) { delete(c, "jti") }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenInvalid,
		},
		{
			name:       "no sub",
			request:    withClaims(func(c jwt.MapClaims) { delete(c, "sub") }),
			wantStatus: http.StatusUnauthorized, wantCode: CodeTokenInvalid,
		},
		{
			name: "body not a CloudEvent",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				b := []byte(`{"hello":"world"}`)
				return sign(t, s, b, eventID, nil), b
			},
			wantStatus: http.StatusBadRequest, wantCode: CodeEventInvalid,
		},
		{
			name: "event id differs from the token's",
			request: func(t *testing.T, s, _ *signing.Signer, _ time.Time) (string, []byte) {
				return sign(t, s, body, "another-id", nil), body
			},
			wantStatus: http.StatusBadRequest, wantCode: CodeEventInvalid,
		},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			signer, stranger := newSigner(t, clock), newSigner(t, clock)
			var rec recorder
			var failures []Failure
			h, err := New(Config{
				Audience:     testAudience,
				StaticKeys:   map[string]ed25519.PublicKey{signer.Kid(): signer.PublicKey()},
				Now:          clock.Now,
				MaxBodyBytes: 4096,
				OnFailure:    func(_ *http.Request, f Failure) { failures = append(failures, f) },
			}, rec.handle)
			if err != nil {
				t.Fatal(err)
			}
			token, reqBody := tc.request(t, signer, stranger, clock.Now())

			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req := httptest.NewRequest(method, "/deliver", strings.NewReader(string(reqBody)))
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp := httptest.NewRecorder()
			h.ServeHTTP(resp, req)

			if resp.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.Code, tc.wantStatus, resp.Body.String())
			}
			got := responseCode(t, resp)
			if got.Error != tc.wantCode {
				t.Errorf("code %q (%s), want %q", got.Error, got.Message, tc.wantCode)
			}
			if tc.wantCode == "" {
				if rec.count() != 1 {
					t.Fatalf("handler called %d times, want once", rec.count())
				}
				ev := rec.events[0]
				if ev.ID != eventID || ev.EventID != eventID || ev.Subscription != testSubscription ||
					ev.Attempt != 1 || ev.Audience != testAudience {
					t.Errorf("event metadata %+v", ev)
				}
				if len(failures) != 0 {
					t.Errorf("OnFailure called for a success: %+v", failures)
				}
				return
			}
			if rec.count() != 0 {
				t.Errorf("handler called for a refused delivery")
			}
			if len(failures) != 1 || failures[0].Code != tc.wantCode || failures[0].Status != tc.wantStatus {
				t.Errorf("OnFailure got %+v, want one %s failure", failures, tc.wantCode)
			}
			if tc.wantStatus == http.StatusUnauthorized && resp.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

func TestDeliveredEvent(t *testing.T) {
	clock := newClock()
	signer := newSigner(t, clock)
	var rec recorder
	h, err := New(Config{Audience: testAudience, StaticKey: signer.PublicKey(), Now: clock.Now}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	body := eventBody("e-1", "person-7")
	resp := post(h, sign(t, signer, body, "e-1", func(c *signing.DeliveryClaims) { c.Attempt = 3 }), body)
	if resp.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", resp.Code, resp.Body)
	}
	if resp.Body.Len() != 0 {
		t.Errorf("204 with a body %q", resp.Body)
	}
	want := Event{
		SpecVersion: "1.0", ID: "e-1", Source: "app:contacts", Type: "contacts.person.updated",
		Subject: "person-7", Time: time.Date(2025, 3, 1, 11, 59, 58, 123_000_000, time.UTC),
		DataContentType: "application/json", DataVersion: 1, Data: json.RawMessage(`{"name":"Ada"}`),
		Subscription: testSubscription, Attempt: 3, EventID: "e-1", Audience: testAudience,
	}
	got := rec.events[0]
	if !got.Time.Equal(want.Time) {
		t.Errorf("Time %v, want %v", got.Time, want.Time)
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("event\n got %+v\nwant %+v", got, want)
	}
	var data struct{ Name string }
	if err := got.DecodeData(&data); err != nil || data.Name != "Ada" {
		t.Errorf("DecodeData: %v, %+v", err, data)
	}
}

func TestReplay(t *testing.T) {
	clock := newClock()
	signer := newSigner(t, clock)
	var rec recorder
	h, err := New(Config{Audience: testAudience, StaticKey: signer.PublicKey(), Now: clock.Now}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	body := eventBody("e-1", "k")
	token := sign(t, signer, body, "e-1", nil)

	steps := []struct {
		name    string
		token   string
		advance time.Duration
		want    string
	}{
		{"first use", token, 0, ""},
		{"same token again", token, 0, CodeReplayed},
		{"same token a minute later", token, time.Minute, CodeReplayed},
		{"fresh token for the same event", sign(t, signer, body, "e-1", nil), 0, ""},
		{"first token after it expired", token, 5 * time.Minute, CodeTokenExpired},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		resp := post(h, st.token, body)
		if got := responseCode(t, resp).Error; got != st.want {
			t.Errorf("%s: code %q (status %d), want %q", st.name, got, resp.Code, st.want)
		}
	}
	if rec.count() != 2 {
		t.Errorf("handler called %d times, want 2", rec.count())
	}
}

func TestMultipleAudiences(t *testing.T) {
	clock := newClock()
	signer := newSigner(t, clock)
	var rec recorder
	h, err := New(Config{
		Audiences: []string{"app:contacts", "app:billing", "app:audit-log"},
		StaticKey: signer.PublicKey(),
		Now:       clock.Now,
	}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		aud  string
		want string
	}{
		{"app:audit-log", ""},
		{"app:billing", ""},
		{"app:shipping", CodeAudienceMismatch},
	}
	for _, tc := range tests {
		body := eventBody("e-"+tc.aud, "k")
		resp := post(h, sign(t, signer, body, "e-"+tc.aud, func(c *signing.DeliveryClaims) { c.Audience = tc.aud }), body)
		if got := responseCode(t, resp).Error; got != tc.want {
			t.Errorf("aud %s: code %q, want %q", tc.aud, got, tc.want)
			continue
		}
		if tc.want == "" {
			if ev := rec.events[rec.count()-1]; ev.Audience != tc.aud {
				t.Errorf("aud %s: Event.Audience %q", tc.aud, ev.Audience)
			}
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cfg    Config
		h      Handler
		errHas string
	}{
		{"nil handler", Config{Audience: testAudience, StaticKey: pub}, nil, "handler is nil"},
		{"no audience", Config{StaticKey: pub}, okHandler, "audience is required"},
		{"audience without app: prefix", Config{Audience: "billing", StaticKey: pub}, okHandler, `"billing"`},
		{"bad extra audience", Config{Audience: testAudience, Audiences: []string{"app:Bad"}, StaticKey: pub}, okHandler, "app:Bad"},
		{"no key source", Config{Audience: testAudience}, okHandler, "exactly one"},
		{"two key sources", Config{Audience: testAudience, StaticKey: pub, JWKSURL: "http://127.0.0.1/jwks"}, okHandler, "exactly one"},
		{"short static key", Config{Audience: testAudience, StaticKey: pub[:10]}, okHandler, "10 bytes"},
		{"empty static keys", Config{Audience: testAudience, StaticKeys: map[string]ed25519.PublicKey{}}, okHandler, "empty"},
		{"static keys with empty kid", Config{Audience: testAudience, StaticKeys: map[string]ed25519.PublicKey{"": pub}}, okHandler, "empty kid"},
		{"relative JWKS URL", Config{Audience: testAudience, JWKSURL: "/jwks.json"}, okHandler, "absolute"},
		{"negative leeway", Config{Audience: testAudience, StaticKey: pub, Leeway: -time.Second}, okHandler, "negative"},
		{"negative replay cache", Config{Audience: testAudience, StaticKey: pub, ReplayCacheSize: -1}, okHandler, "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := New(tc.cfg, tc.h)
			if err == nil {
				t.Fatalf("New succeeded: %T", h)
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error %q does not mention %q", err, tc.errHas)
			}
		})
	}
}

func okHandler(context.Context, Event) error { return nil }

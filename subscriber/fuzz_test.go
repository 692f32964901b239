package subscriber

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"herald/signing"
)

// FuzzVerifyToken sends arbitrary tokens and bodies. The receiver must never
// panic, must answer every refusal with a JSON error, and must call the
// Handler only for a token this test signed, with the body it was signed for.
func FuzzVerifyToken(f *testing.F) {
	clock := newClock()
	signer := newSigner(f, clock)
	stranger := newSigner(f, clock)
	keys := map[string]ed25519.PublicKey{signer.Kid(): signer.PublicKey()}

	valid := make(map[string][]byte) // token → the body it was signed for
	for i, subject := range []string{"person-1", "person-2", "ü-ünïcode"} {
		id := "e-" + subject
		body := eventBody(id, subject)
		tok := sign(f, signer, body, id, func(c *signing.DeliveryClaims) { c.Attempt = i + 1 })
		valid[tok] = body
		f.Add(tok, body)
		f.Add(tok, body[:len(body)-1])                                                            // truncated body
		f.Add(tok[:len(tok)-2], body)                                                             // truncated signature
		f.Add(strings.Replace(tok, ".", "..", 1), body)                                           // extra segment
		f.Add(sign(f, stranger, body, id, nil), body)                                             // unknown kid
		f.Add(signRaw(f, privateKeyOf(f, stranger), signer.Kid(), claimsFor(t0, body, id)), body) // wrong key
	}
	body := eventBody("e-x", "k")
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsFor(t0, body, "e-x"))
	hs.Header["kid"] = signer.Kid()
	hsTok, err := hs.SignedString([]byte(signer.PublicKey()))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hsTok, body)
	f.Add(unsignedToken(f, map[string]any{"alg": "none", "kid": signer.Kid()}, claimsFor(t0, body, "e-x")), body)
	for _, garbage := range []string{"", " ", "a.b.c", "...", "eyJ.eyJ.eyJ", "Bearer x", "\x00\xff", strings.Repeat("A", 5000)} {
		f.Add(garbage, body)
		f.Add(garbage, []byte{})
	}

	// newReceiver returns a receiver with a fresh replay cache and a flag
	// set when its Handler runs.
	newReceiver := func(tb testing.TB) (http.Handler, *bool) {
		called := new(bool)
		h, err := New(Config{
			Audience:     testAudience,
			StaticKeys:   keys,
			Now:          clock.Now,
			MaxBodyBytes: 64 << 10,
		}, func(context.Context, Event) error {
			*called = true
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
		return h, called
	}
	// The valid seeds must pass, or the target proves little.
	for tok, body := range valid {
		h, called := newReceiver(f)
		if resp := post(h, tok, body); resp.Code != http.StatusNoContent || !*called {
			f.Fatalf("valid seed refused: %d %s", resp.Code, resp.Body)
		}
	}

	f.Fuzz(func(t *testing.T, token string, body []byte) {
		h, calledPtr := newReceiver(t)
		req := httptest.NewRequest(http.MethodPost, "/deliver", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+token)
		resp := httptest.NewRecorder()
		h.ServeHTTP(resp, req) // a panic fails the fuzz run

		if called := *calledPtr; called {
			want, ok := valid[token]
			if !ok {
				t.Fatalf("handler called for a token this test did not sign: %q", token)
			}
			if string(want) != string(body) {
				t.Fatalf("handler called with a body the token was not signed for: %q", body)
			}
			if resp.Code != http.StatusNoContent {
				t.Fatalf("handler succeeded but status %d", resp.Code)
			}
			return
		}
		if resp.Code < 400 {
			t.Fatalf("status %d without calling the handler", resp.Code)
		}
		var eb errorBody
		if err := json.Unmarshal(resp.Body.Bytes(), &eb); err != nil || eb.Error == "" {
			t.Fatalf("refusal %d without a JSON error body: %q", resp.Code, resp.Body.String())
		}
	})
}

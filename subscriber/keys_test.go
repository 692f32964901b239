package subscriber

import (
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/signing"
)

// jwksReceiver returns a handler that fetches keys from srv.
func jwksReceiver(t *testing.T, srv *jwksServer, clock *fakeClock, rec *recorder) http.Handler {
	t.Helper()
	h, err := New(Config{Audience: testAudience, JWKSURL: srv.url(), Now: clock.Now, HTTPClient: srv.Client(),
		sleep: clock.sleep}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// step is one delivery and what it must produce.
type step struct {
	name     string
	advance  time.Duration // clock move before the delivery
	before   func()        // server change before the delivery
	signer   *signing.Signer
	wantCode string
	wantHits int64 // JWKS requests so far
}

func runSteps(t *testing.T, h http.Handler, srv *jwksServer, clock *fakeClock, steps []step) {
	t.Helper()
	for i, st := range steps {
		clock.Advance(st.advance)
		if st.before != nil {
			st.before()
		}
		id := "e-" + strings.ReplaceAll(st.name, " ", "-")
		body := eventBody(id, "k")
		resp := post(h, sign(t, st.signer, body, id, nil), body)
		got := responseCode(t, resp)
		if got.Error != st.wantCode {
			t.Errorf("step %d (%s): code %q (%s), want %q", i, st.name, got.Error, got.Message, st.wantCode)
		}
		if hits := srv.hits.Load(); hits != st.wantHits {
			t.Errorf("step %d (%s): %d JWKS requests, want %d", i, st.name, hits, st.wantHits)
		}
	}
}

func TestJWKSUnknownKidRefresh(t *testing.T) {
	clock := newClock()
	a, b := newSigner(t, clock), newSigner(t, clock)
	srv := newJWKSServer(t, a)
	var rec recorder
	h := jwksReceiver(t, srv, clock, &rec)

	runSteps(t, h, srv, clock, []step{
		{name: "first delivery fetches the keys", signer: a, wantHits: 1},
		{name: "known kid uses the cache", signer: a, wantHits: 1},
		{name: "unknown kid refetches once", advance: 11 * time.Second, signer: b, wantCode: CodeKidUnknown, wantHits: 2},
		// Within the interval an unknown kid waits for it, then refetches.
		{name: "unknown kid again waits out the interval", advance: 9 * time.Second, signer: b, wantCode: CodeKidUnknown, wantHits: 3},
		{name: "key published: found after the wait", before: func() { srv.setKeys(a, b) }, signer: b, wantHits: 4},
		{name: "new key cached", advance: 2 * time.Second, signer: b, wantHits: 4},
		{name: "old key still known", signer: a, wantHits: 4},
	})
	if rec.count() != 5 {
		t.Errorf("handler called %d times, want 5", rec.count())
	}
}

func TestJWKSRefreshFloodIsRateLimited(t *testing.T) {
	clock := newClock()
	a := newSigner(t, clock)
	srv := newJWKSServer(t, a)
	var rec recorder
	h := jwksReceiver(t, srv, clock, &rec)

	const n = 50
	strangers := make([]*signing.Signer, n)
	for i := range strangers {
		strangers[i] = newSigner(t, clock)
	}
	body := eventBody("e", "k")
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = sign(t, strangers[i], body, "e", nil)
	}
	var wg sync.WaitGroup
	resps := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		wg.Go(func() { resps[i] = post(h, tokens[i], body) })
	}
	wg.Wait()
	for i, resp := range resps {
		if c := responseCode(t, resp).Error; c != CodeKidUnknown {
			t.Errorf("request %d: code %q, want %s", i, c, CodeKidUnknown)
		}
	}
	// Waiters move the fake clock; the bound is one fetch per interval.
	elapsed := clock.Now().Sub(t0)
	if hits, limit := srv.hits.Load(), 1+int64(elapsed/JWKSRefreshInterval); hits > limit || hits < 1 {
		t.Errorf("%d unknown kids caused %d JWKS requests in %v, want at most %d", n, hits, elapsed, limit)
	}
	if rec.count() != 0 {
		t.Errorf("handler called %d times", rec.count())
	}
}

func TestJWKSRotation(t *testing.T) {
	t.Run("dropped key fails once an unknown kid refreshes the cache", func(t *testing.T) {
		clock := newClock()
		oldKey, newKey, newest := newSigner(t, clock), newSigner(t, clock), newSigner(t, clock)
		srv := newJWKSServer(t, oldKey, newKey)
		var rec recorder
		h := jwksReceiver(t, srv, clock, &rec)
		runSteps(t, h, srv, clock, []step{
			{name: "old key verifies", signer: oldKey, wantHits: 1},
			{name: "new key verifies", signer: newKey, wantHits: 1},
			{name: "old key dropped, cache still has it", before: func() { srv.setKeys(newKey, newest) }, signer: oldKey, wantHits: 1},
			{name: "newest key refreshes the cache", advance: 11 * time.Second, signer: newest, wantHits: 2},
			{name: "old key now unknown", signer: oldKey, wantCode: CodeKidUnknown, wantHits: 3},
			{name: "new key still verifies", signer: newKey, wantHits: 3},
		})
	})
	t.Run("dropped key fails once the cache is older than JWKSMaxAge", func(t *testing.T) {
		clock := newClock()
		oldKey, newKey := newSigner(t, clock), newSigner(t, clock)
		srv := newJWKSServer(t, oldKey, newKey)
		var rec recorder
		h := jwksReceiver(t, srv, clock, &rec)
		runSteps(t, h, srv, clock, []step{
			{name: "old key verifies", signer: oldKey, wantHits: 1},
			{name: "old key dropped, cache still has it", before: func() { srv.setKeys(newKey) },
				advance: DefaultJWKSMaxAge - time.Second, signer: oldKey, wantHits: 1},
			{name: "stale cache refetched, old key unknown", advance: time.Second, signer: oldKey, wantCode: CodeKidUnknown, wantHits: 2},
			{name: "new key verifies", signer: newKey, wantHits: 2},
		})
	})
	t.Run("failed refresh keeps the cached keys", func(t *testing.T) {
		clock := newClock()
		a, b := newSigner(t, clock), newSigner(t, clock)
		srv := newJWKSServer(t, a)
		var rec recorder
		h := jwksReceiver(t, srv, clock, &rec)
		runSteps(t, h, srv, clock, []step{
			{name: "a verifies", signer: a, wantHits: 1},
			{name: "JWKS down, stale cache still serves a", before: func() { srv.setStatus(http.StatusServiceUnavailable) },
				advance: DefaultJWKSMaxAge, signer: a, wantHits: 2},
			{name: "unknown kid while down", advance: 11 * time.Second, signer: b, wantCode: CodeKidUnknown, wantHits: 3},
		})
	})
}

func TestJWKSFirstFetchFails(t *testing.T) {
	clock := newClock()
	a := newSigner(t, clock)
	srv := newJWKSServer(t, a)
	srv.setStatus(http.StatusInternalServerError)
	var rec recorder
	h := jwksReceiver(t, srv, clock, &rec)

	body := eventBody("e", "k")
	resp := post(h, sign(t, a, body, "e", nil), body)
	got := responseCode(t, resp)
	if got.Error != CodeKidUnknown || !strings.Contains(got.Message, "status 500") {
		t.Errorf("got %+v, want kid_unknown naming the JWKS status", got)
	}
	srv.setStatus(http.StatusOK)
	clock.Advance(JWKSRefreshInterval)
	body = eventBody("e2", "k")
	if resp := post(h, sign(t, a, body, "e2", nil), body); resp.Code != http.StatusNoContent {
		t.Errorf("after the JWKS recovered: status %d: %s", resp.Code, resp.Body)
	}
}

func TestParseJWKS(t *testing.T) {
	pub := make(ed25519.PublicKey, ed25519.PublicKeySize)
	for i := range pub {
		pub[i] = byte(i)
	}
	x := base64.RawURLEncoding.EncodeToString(pub)
	tests := []struct {
		name     string
		doc      string
		wantKids []string
		errHas   string
	}{
		{"full key", `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"a","use":"sig","alg":"EdDSA"}]}`, []string{"a"}, ""},
		{"minimal key", `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"a"}]}`, []string{"a"}, ""},
		{"padded x", `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `=","kid":"a"}]}`, []string{"a"}, ""},
		{"other keys skipped", `{"keys":[
			{"kty":"RSA","n":"abc","e":"AQAB","kid":"rsa"},
			{"kty":"OKP","crv":"X25519","x":"` + x + `","kid":"x25519"},
			{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"enc","use":"enc"},
			{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"hs","alg":"HS256"},
			{"kty":"OKP","crv":"Ed25519","x":"` + x + `"},
			{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"short"},
			{"kty":"OKP","crv":"Ed25519","x":"!!","kid":"bad"},
			{"kty":7},
			{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"good"}]}`, []string{"good"}, ""},
		{"no usable key", `{"keys":[{"kty":"RSA","kid":"rsa"}]}`, nil, "no Ed25519"},
		{"empty", `{"keys":[]}`, nil, "no Ed25519"},
		{"not JSON", `<html>`, nil, "parse jwks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := ParseJWKS([]byte(tc.doc))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != len(tc.wantKids) {
				t.Fatalf("got kids %v, want %v", keys, tc.wantKids)
			}
			for _, kid := range tc.wantKids {
				if !keys[kid].Equal(pub) {
					t.Errorf("kid %s: wrong or missing key", kid)
				}
			}
		})
	}
}

// The JWKS the worker publishes (signing.KeySet) is what this package reads.
func TestParseJWKSOfSigningKeySet(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if _, err := signing.GenerateKey(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "unused.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ks, err := signing.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseJWKS(ks.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	want := ks.PublicKeys()
	if len(got) != len(want) {
		t.Fatalf("parsed %d keys, want %d", len(got), len(want))
	}
	for kid, k := range want {
		if !got[kid].Equal(k) {
			t.Errorf("kid %s differs", kid)
		}
	}
}

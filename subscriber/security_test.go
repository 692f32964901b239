package subscriber

import (
	"context"
	"crypto/ed25519"
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

func TestJWKSURLMustBeHTTPS(t *testing.T) {
	ok := func(context.Context, Event) error { return nil }
	tests := []struct {
		url           string
		allowLoopback bool
		wantErr       string // "" when accepted
	}{
		{"https://herald.example/.well-known/jwks.json", false, ""},
		{"http://herald.example/.well-known/jwks.json", false, "want https"},
		{"http://127.0.0.1:8088/.well-known/jwks.json", false, "want https"},
		{"http://127.0.0.1:8088/.well-known/jwks.json", true, ""},
		{"http://127.0.0.2/.well-known/jwks.json", true, ""},
		{"http://[::1]:8088/.well-known/jwks.json", true, ""},
		{"http://localhost:8088/.well-known/jwks.json", true, ""},
		{"http://herald-worker:8088/.well-known/jwks.json", true, "only for a loopback host"},
		{"http://10.0.0.1/.well-known/jwks.json", true, "only for a loopback host"},
		{"ftp://herald.example/jwks", false, "absolute https URL"},
	}
	for _, tt := range tests {
		_, err := New(Config{Audience: testAudience, JWKSURL: tt.url, AllowLoopbackHTTP: tt.allowLoopback}, ok)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("New(JWKSURL %s, AllowLoopbackHTTP %v) = %v, want %q", tt.url, tt.allowLoopback, err, tt.wantErr)
		}
	}
}

// A JWKS URL that redirected to an attacker's key set made the receiver
// accept a delivery the attacker signed.
func TestJWKSRedirectToAnotherHostRefused(t *testing.T) {
	clock := newClock()
	attacker := newSigner(t, clock)
	evil := newJWKSServer(t, attacker)
	genuine := newSigner(t, clock)
	good := newJWKSServer(t, genuine)
	// Both test servers listen on loopback, on different ports: different hosts.
	redirector := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/elsewhere":
			http.Redirect(w, r, evil.url(), http.StatusFound)
		case "/moved":
			http.Redirect(w, r, "/here", http.StatusMovedPermanently)
		case "/here":
			good.Config.Handler.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(redirector.Close)

	receiver := func(path string) http.Handler {
		h, err := New(Config{Audience: testAudience, JWKSURL: redirector.URL + path, Now: clock.Now,
			HTTPClient: redirector.Client(), sleep: clock.sleep}, (&recorder{}).handle)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	body := eventBody("e-forged", "k")
	resp := post(receiver("/elsewhere"), sign(t, attacker, body, "e-forged", nil), body)
	if got := responseCode(t, resp); resp.Code != http.StatusUnauthorized || got.Error != CodeKidUnknown {
		t.Fatalf("forged delivery through a cross-host redirect: %d %+v, want 401 kid_unknown", resp.Code, got)
	}
	if evil.hits.Load() != 0 {
		t.Errorf("the attacker's key set was fetched %d times", evil.hits.Load())
	}

	// A redirect within the same host is followed.
	body = eventBody("e-genuine", "k")
	if resp := post(receiver("/moved"), sign(t, genuine, body, "e-genuine", nil), body); resp.Code != http.StatusNoContent {
		t.Fatalf("delivery through a same-host redirect: %d %s", resp.Code, resp.Body)
	}
}

func TestRedirectPolicyRefusesDowngrade(t *testing.T) {
	base, _ := http.NewRequest(http.MethodGet, "https://herald.example/jwks", nil)
	check := sameOriginRedirects(base.URL, nil)
	for target, wantErr := range map[string]bool{
		"https://herald.example/other":      false,
		"http://herald.example/jwks":        true, // downgrade to plain http
		"https://herald.example:8443/jwks":  true,
		"https://evil.example/jwks":         true,
		"https://HERALD.example/jwks?x=1":   false,
		"https://herald.example.evil/jwks ": true,
	} {
		req, err := http.NewRequest(http.MethodGet, strings.TrimSpace(target), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(req, []*http.Request{base}); (err != nil) != wantErr {
			t.Errorf("redirect to %s: %v, want error %v", target, err, wantErr)
		}
	}
}

// Keys pinned in a file: the <kid>.pub.pem files of `starter keys generate`
// concatenated, or a saved JWKS document.
func TestKeysFile(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if _, err := signing.GenerateKey(dir); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := signing.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	pubs, _ := filepath.Glob(filepath.Join(dir, "*"+signing.PublicKeySuffix))
	var pem []byte
	for _, p := range pubs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	files := map[string][]byte{"keys.pem": pem, "jwks.json": ks.JWKS()}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			keys, err := ReadKeysFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 2 || !keys[ks.Signer().Kid()].Equal(ks.Signer().PublicKey()) {
				t.Fatalf("ReadKeysFile = %d keys, want both with Herald's kids", len(keys))
			}
			rec := &recorder{}
			h, err := New(Config{Audience: testAudience, KeysFile: path}, rec.handle)
			if err != nil {
				t.Fatal(err)
			}
			body := eventBody("e-1", "k")
			if resp := post(h, sign(t, ks.Signer(), body, "e-1", nil), body); resp.Code != http.StatusNoContent {
				t.Fatalf("delivery verified with a pinned key: %d %s", resp.Code, resp.Body)
			}
			other := newSigner(t, newClock())
			body = eventBody("e-2", "k")
			if got := responseCode(t, post(h, sign(t, other, body, "e-2", nil), body)); got.Error != CodeKidUnknown {
				t.Errorf("delivery signed by an unpinned key: %+v, want kid_unknown", got)
			}
		})
	}

	privs, _ := filepath.Glob(filepath.Join(dir, "*.pem"))
	for _, p := range privs {
		if strings.HasSuffix(p, signing.PublicKeySuffix) {
			continue
		}
		if _, err := ReadKeysFile(p); err == nil || !strings.Contains(err.Error(), "never put a private key here") {
			t.Errorf("ReadKeysFile(private key) = %v, want a refusal", err)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad")
	_ = os.WriteFile(bad, []byte("hello"), 0o644)
	if _, err := ReadKeysFile(bad); err == nil {
		t.Error("ReadKeysFile accepted a file without keys")
	}
	if _, err := New(Config{Audience: testAudience, KeysFile: bad}, (&recorder{}).handle); err == nil {
		t.Error("New accepted an unreadable KeysFile")
	}
}

func TestKeyIDMatchesSigning(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if keyID(pub) != signing.KeyID(pub) {
		t.Errorf("keyID = %s, signing.KeyID = %s", keyID(pub), signing.KeyID(pub))
	}
}

// A flood of unknown kids held every request up to JWKSRefreshInterval; now
// only MaxKidWaitsPerSource deliveries from one address wait, and the rest
// are answered at once.
func TestUnknownKidWaitsBoundedPerSource(t *testing.T) {
	clock := newClock()
	known := newSigner(t, clock)
	srv := newJWKSServer(t, known)
	release := make(chan struct{})
	var sleeping sync.WaitGroup
	sleeping.Add(1)
	var once sync.Once
	h, err := New(Config{Audience: testAudience, JWKSURL: srv.url(), Now: clock.Now, HTTPClient: srv.Client(),
		sleep: func(ctx context.Context, d time.Duration) error {
			once.Do(sleeping.Done)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}, (&recorder{}).handle)
	if err != nil {
		t.Fatal(err)
	}
	// The first unknown kid fetches at once; the next ones must wait.
	stranger := newSigner(t, clock)
	body := eventBody("e-0", "k")
	if got := responseCode(t, post(h, sign(t, stranger, body, "e-0", nil), body)); got.Error != CodeKidUnknown {
		t.Fatalf("first unknown kid: %+v", got)
	}

	const extra = 4
	results := make(chan errorBody, MaxKidWaitsPerSource+extra)
	for i := range MaxKidWaitsPerSource + extra {
		go func() {
			s := newSigner(t, clock)
			id := "e-flood-" + string(rune('a'+i))
			b := eventBody(id, "k")
			results <- responseCode(t, post(h, sign(t, s, b, id, nil), b))
		}()
	}
	sleeping.Wait()
	timeout := time.After(5 * time.Second)
	for range extra {
		select {
		case got := <-results:
			if got.Error != CodeKidUnknown || !strings.Contains(got.Message, "too many deliveries") {
				t.Errorf("refused waiter: %+v, want kid_unknown for too many waits", got)
			}
		case <-timeout:
			t.Fatalf("deliveries over the bound of %d waiters were held too", MaxKidWaitsPerSource)
		}
	}
	close(release)
	for range MaxKidWaitsPerSource {
		if got := <-results; got.Error != CodeKidUnknown {
			t.Errorf("waiter: %+v, want kid_unknown", got)
		}
	}
}

func TestWaitGateBoundsInTotal(t *testing.T) {
	g := newWaitGate(2, 3)
	var releases []func()
	for _, src := range []string{"a", "a", "b"} {
		r, err := g.enter(src)
		if err != nil {
			t.Fatalf("enter(%s): %v", src, err)
		}
		releases = append(releases, r)
	}
	if _, err := g.enter("c"); err != errTooManyWaits {
		t.Errorf("fourth waiter in total: %v, want errTooManyWaits", err)
	}
	releases[2]()
	if _, err := g.enter("a"); err != errTooManyWaits {
		t.Errorf("third waiter from one source: %v, want errTooManyWaits", err)
	}
	r, err := g.enter("c")
	if err != nil {
		t.Fatalf("waiter after a release: %v", err)
	}
	r()
	releases[0]()
	releases[1]()
	if g.n != 0 || len(g.bySource) != 0 {
		t.Errorf("gate not empty after every release: n=%d, %v", g.n, g.bySource)
	}
}

package subscriber

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"herald/signing"
)

// A delivery signed with a known key must not wait behind an unknown kid's
// key refresh: neither behind its rate-limit sleep nor behind its JWKS fetch
// (issue 27 item 9; a genuine delivery waited 7.9 s behind one).
func TestKnownKidDoesNotWaitBehindUnknownKid(t *testing.T) {
	const quick = 2 * time.Second // far below JWKSRefreshInterval and the fetch timeout

	// deliver posts a delivery signed by s in the background.
	deliver := func(h http.Handler, s *signing.Signer, id string) <-chan *httptest.ResponseRecorder {
		body := eventBody(id, "k")
		token := sign(t, s, body, id, nil)
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- post(h, token, body) }()
		return done
	}
	mustAnswerQuickly := func(t *testing.T, done <-chan *httptest.ResponseRecorder) {
		t.Helper()
		select {
		case resp := <-done:
			if resp.Code != http.StatusNoContent {
				t.Fatalf("genuine delivery: status %d: %s", resp.Code, resp.Body)
			}
		case <-time.After(quick):
			t.Fatalf("genuine delivery still waiting after %v behind an unknown kid", quick)
		}
	}

	t.Run("behind the rate-limit sleep", func(t *testing.T) {
		clock := newClock()
		a, stranger := newSigner(t, clock), newSigner(t, clock)
		srv := newJWKSServer(t, a)
		sleeping := make(chan struct{}, 1)
		release := make(chan struct{})
		defer close(release)
		h, err := New(Config{Audience: testAudience, JWKSURL: srv.url(), Now: clock.Now, HTTPClient: srv.Client(),
			sleep: func(ctx context.Context, d time.Duration) error {
				sleeping <- struct{}{}
				select {
				case <-release:
					clock.Advance(d)
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}}, (&recorder{}).handle)
		if err != nil {
			t.Fatal(err)
		}
		mustAnswerQuickly(t, deliver(h, a, "e1")) // first fetch
		// The cache goes stale and its refetch fails: a's key is known but
		// stale, and the last fetch attempt is recent.
		clock.Advance(DefaultJWKSMaxAge)
		srv.setStatus(http.StatusServiceUnavailable)
		mustAnswerQuickly(t, deliver(h, a, "e2"))
		// An unknown kid now sleeps until the next fetch is allowed...
		unknown := deliver(h, stranger, "e3")
		<-sleeping
		// ...while a genuine delivery is served by the stale key at once.
		mustAnswerQuickly(t, deliver(h, a, "e4"))
		release <- struct{}{}
		if c := responseCode(t, <-unknown).Error; c != CodeKidUnknown {
			t.Errorf("unknown kid: code %q, want %s", c, CodeKidUnknown)
		}
	})

	t.Run("behind a hanging JWKS fetch", func(t *testing.T) {
		clock := newClock()
		a, stranger := newSigner(t, clock), newSigner(t, clock)
		inner := newJWKSServer(t, a)
		var hanging atomic.Bool
		var hung atomic.Int64
		release := make(chan struct{})
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hanging.Load() {
				hung.Add(1)
				select {
				case <-release:
				case <-r.Context().Done():
				}
				http.Error(w, "gave up", http.StatusServiceUnavailable)
				return
			}
			inner.Config.Handler.ServeHTTP(w, r)
		}))
		defer srv.Close()
		defer close(release)
		h, err := New(Config{Audience: testAudience, JWKSURL: srv.URL + signing.JWKSPath, Now: clock.Now,
			HTTPClient: srv.Client(), sleep: clock.sleep}, (&recorder{}).handle)
		if err != nil {
			t.Fatal(err)
		}
		mustAnswerQuickly(t, deliver(h, a, "e1")) // first fetch
		clock.Advance(DefaultJWKSMaxAge)          // stale, and a refetch is allowed
		hanging.Store(true)
		unknown := deliver(h, stranger, "e2")
		deadline := time.Now().Add(quick)
		for hung.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the unknown kid did not start a fetch")
			}
			time.Sleep(5 * time.Millisecond)
		}
		mustAnswerQuickly(t, deliver(h, a, "e3"))
		release <- struct{}{}
		if c := responseCode(t, <-unknown).Error; c != CodeKidUnknown {
			t.Errorf("unknown kid: code %q, want %s", c, CodeKidUnknown)
		}
	})
}

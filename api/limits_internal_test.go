package api

import (
	"crypto/sha256"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"herald/store"
)

// TestFailureLimiterBounded: however many addresses fail, the limiter
// tracks at most maxTrackedAddresses, and an address refills at its rate.
func TestFailureLimiterBounded(t *testing.T) {
	t.Parallel()
	l := newFailureLimiter(2, time.Second)
	now := time.Unix(1_000_000, 0)
	for i := range maxTrackedAddresses + 5000 {
		if wait := l.take(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), now); wait != 0 {
			t.Fatalf("address %d throttled at its first failure", i)
		}
	}
	if n := len(l.buckets); n > maxTrackedAddresses {
		t.Fatalf("%d addresses tracked, want at most %d", n, maxTrackedAddresses)
	}
	l.take("a", now)
	l.take("a", now)
	if wait := l.take("a", now); wait != time.Second {
		t.Fatalf("after the burst: wait %v, want 1s", wait)
	}
	if wait := l.take("a", now.Add(500*time.Millisecond)); wait != 500*time.Millisecond {
		t.Fatalf("half refilled: wait %v, want 500ms", wait)
	}
	if wait := l.take("a", now.Add(time.Second)); wait != 0 {
		t.Fatalf("refilled: wait %v", wait)
	}
	l.refund("a", now.Add(time.Second))
	if wait := l.take("a", now.Add(time.Second)); wait != 0 {
		t.Fatalf("refunded: wait %v", wait)
	}
	if got := retryAfter(1500 * time.Millisecond); got != "2" {
		t.Fatalf("Retry-After %s, want 2", got)
	}
}

func TestTokenCacheBounded(t *testing.T) {
	t.Parallel()
	c := newTokenCache(time.Second)
	now := time.Unix(1_000_000, 0)
	for i := range maxCachedTokens + 5000 {
		c.put(sha256.Sum256(fmt.Appendf(nil, "t%d", i)), store.TokenCredential{}, false, now)
	}
	if n := len(c.entries); n > maxCachedTokens {
		t.Fatalf("%d tokens cached, want at most %d", n, maxCachedTokens)
	}
	key := sha256.Sum256([]byte("live"))
	c.put(key, store.TokenCredential{ID: "x"}, true, now)
	if e, ok := c.get(key, now.Add(999*time.Millisecond)); !ok || !e.found || e.cred.ID != "x" {
		t.Fatalf("within the TTL: %+v %v", e, ok)
	}
	if _, ok := c.get(key, now.Add(time.Second)); ok {
		t.Fatal("an expired lookup was reused")
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.7:1234":             "192.0.2.7",
		"[::ffff:192.0.2.7]:1":       "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2::ffff]:1":     "2001:db8:1:2::/64",
		"@":                          "@",
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.RemoteAddr = addr
		if got := clientKey(r); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

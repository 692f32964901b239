package api

import (
	"context"
	"crypto/sha256"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"herald/store"
)

// Defaults of the API's abuse limits (docs/design.md#the-publishing-api).
const (
	// DefaultAuthFailureBurst is how many failed authentications one client
	// address may make in a row before it is throttled.
	DefaultAuthFailureBurst = 10
	// DefaultAuthFailureRefill is how often a throttled address regains one
	// failed authentication.
	DefaultAuthFailureRefill = time.Second
	// DefaultTokenCacheTTL is how long a token lookup, found or not, is
	// reused: a revoked token keeps working on a worker for at most this long.
	DefaultTokenCacheTTL = 5 * time.Second
	// DefaultTokenConcurrency caps the requests in flight per token.
	DefaultTokenConcurrency = 8
	// LockTimeout bounds how long a statement of the API waits for a
	// lock (the lock_timeout of the API's pool; the service opens it with
	// store.Options.LockTimeout): a key's lock is held by whatever
	// transaction published the key, an app's own PublishTx for as long as
	// the app keeps it open, and a request waiting for it holds one of
	// the API's few connections. A publish of the API takes a key's lock
	// for milliseconds, so a wait this long means a long transaction;
	// the request is answered 503 lock_timeout and may be sent again.
	LockTimeout = 5 * time.Second
	// AppWait is how long a request waits for one of its app's slots
	// (HERALD_API_APP_CONCURRENCY) before it is answered 429 app_busy: a
	// burst of an app's requests queues for it, holding no connection of
	// the API's pool; an app whose requests hold their slots (they wait for
	// a lock its own transaction holds) is answered soon.
	AppWait = 2 * time.Second
	// maxTrackedAddresses and maxCachedTokens bound the memory of the
	// failure buckets and the token cache whatever an attacker sends.
	maxTrackedAddresses = 10000
	maxCachedTokens     = 10000
	// evictionSample is how many entries a full map looks at to pick one to
	// drop.
	evictionSample = 8
)

// clientKey is the address a request's failures are counted under: the IP
// of the connection's peer (a proxy in front of the API is one peer for all
// its clients; X-Forwarded-For is not trusted), an IPv6 address by its /64,
// which one host usually owns whole.
func clientKey(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	addr := ap.Addr().Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// failureLimiter is a token bucket of failed authentications per client
// address: burst failures, then one more per refill interval. An address
// whose bucket is full again is as good as untracked, so a full map drops
// such entries first, else any.
type failureLimiter struct {
	mu      sync.Mutex
	burst   float64
	refill  time.Duration
	buckets map[string]bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newFailureLimiter(burst int, refill time.Duration) *failureLimiter {
	return &failureLimiter{burst: float64(burst), refill: refill, buckets: map[string]bucket{}}
}

// level is b's tokens at now.
func (l *failureLimiter) level(b bucket, now time.Time) float64 {
	return math.Min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.refill))
}

// take spends one failure of key ahead of an authentication that may fail,
// so that concurrent guesses cannot all pass the check at once. It returns
// 0 when key may try, else how long until it may.
func (l *failureLimiter) take(key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	tokens := l.burst
	if b, ok := l.buckets[key]; ok {
		tokens = l.level(b, now)
	}
	if tokens < 1 {
		return time.Duration((1 - tokens) * float64(l.refill))
	}
	if _, ok := l.buckets[key]; !ok && len(l.buckets) >= maxTrackedAddresses {
		l.evict(now)
	}
	l.buckets[key] = bucket{tokens: tokens - 1, at: now}
	return 0
}

// refund gives back what take spent: the authentication succeeded, or
// failed through no fault of the client.
func (l *failureLimiter) refund(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.buckets[key]; ok {
		l.buckets[key] = bucket{tokens: math.Min(l.burst, l.level(b, now)+1), at: now}
	}
}

// evict drops one entry among a few: a refilled one when there is one.
func (l *failureLimiter) evict(now time.Time) {
	victim, seen := "", 0
	for k, b := range l.buckets {
		if victim == "" || l.level(b, now) >= l.burst {
			victim = k
		}
		if seen++; seen == evictionSample || l.level(b, now) >= l.burst {
			break
		}
	}
	delete(l.buckets, victim)
}

// retryAfter is the Retry-After value of a wait: whole seconds, at least 1.
func retryAfter(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}

// tokenCache keeps token lookups, found and not found, for a short time,
// keyed by the presented token's SHA-256 (never the token itself).
type tokenCache struct {
	mu      sync.Mutex
	ttl     time.Duration
	entries map[[sha256.Size]byte]cached
}

type cached struct {
	cred    store.TokenCredential
	found   bool
	expires time.Time
}

func newTokenCache(ttl time.Duration) *tokenCache {
	return &tokenCache{ttl: ttl, entries: map[[sha256.Size]byte]cached{}}
}

// get returns the live lookup of key, if any.
func (c *tokenCache) get(key [sha256.Size]byte, now time.Time) (cached, bool) {
	if c.ttl <= 0 {
		return cached{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		return cached{}, false
	}
	return e, true
}

// put keeps a lookup's result until the TTL passes.
func (c *tokenCache) put(key [sha256.Size]byte, cred store.TokenCredential, found bool, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= maxCachedTokens {
		var victim [sha256.Size]byte
		seen := 0
		for k, e := range c.entries {
			victim = k
			if seen++; seen == evictionSample || !now.Before(e.expires) {
				break
			}
		}
		delete(c.entries, victim)
	}
	c.entries[key] = cached{cred: cred, found: found, expires: now.Add(c.ttl)}
}

// inFlight counts the requests each token (or app) has in flight, up to a
// cap.
type inFlight struct {
	mu  sync.Mutex
	max int
	n   map[string]int
}

func newInFlight(limit int) *inFlight { return &inFlight{max: limit, n: map[string]int{}} }

// acquire takes one of token's slots (or the app's), or reports that all
// are taken.
func (f *inFlight) acquire(token string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[token] >= f.max {
		return false
	}
	f.n[token]++
	return true
}

// release gives a slot back; a token with none in flight leaves the map.
func (f *inFlight) release(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[token]--; f.n[token] <= 0 {
		delete(f.n, token)
	}
}

// appSlots caps the requests each app has in flight; a request over the
// cap waits for a slot. An app's slots are kept for the worker's life:
// apps are few, and only an authenticated token's app gets any.
type appSlots struct {
	mu    sync.Mutex
	max   int
	slots map[string]chan struct{}
}

func newAppSlots(limit int) *appSlots {
	return &appSlots{max: limit, slots: map[string]chan struct{}{}}
}

func (a *appSlots) of(app string) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := a.slots[app]
	if ch == nil {
		ch = make(chan struct{}, a.max)
		a.slots[app] = ch
	}
	return ch
}

// acquire takes one of app's slots, waiting up to wait for one; false when
// none came, or the client went away.
func (a *appSlots) acquire(ctx context.Context, app string, wait time.Duration) bool {
	ch := a.of(app)
	select {
	case ch <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case ch <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	case <-t.C:
		return false
	}
}

// release gives back one of app's slots.
func (a *appSlots) release(app string) { <-a.of(app) }

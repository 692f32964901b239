package subscriber

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// keySource finds the public key of a kid. An error wraps errKidUnknown.
type keySource interface {
	key(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// singleKey is Config.StaticKey: it verifies tokens whatever their kid.
type singleKey ed25519.PublicKey

func (k singleKey) key(context.Context, string) (ed25519.PublicKey, error) {
	return ed25519.PublicKey(k), nil
}

// staticKeys is Config.StaticKeys.
type staticKeys map[string]ed25519.PublicKey

func (m staticKeys) key(_ context.Context, kid string) (ed25519.PublicKey, error) {
	if k, ok := m[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w %q", errKidUnknown, kid)
}

// maxJWKSBytes bounds a JWKS response.
const maxJWKSBytes = 1 << 20

// remoteKeys is Config.JWKSURL: keys fetched from a JWKS URL and cached.
// The cache is refetched on an unknown kid and when older than maxAge, but
// never more than once per JWKSRefreshInterval; a failed fetch keeps the keys
// already cached. No lock is held while a caller sleeps or a fetch waits on
// the network, and a known kid never waits for another caller's fetch or
// rate-limit sleep: an unknown kid cannot hold up a genuine delivery.
type remoteKeys struct {
	url    string
	client *http.Client
	now    func() time.Time
	maxAge time.Duration
	sleep  func(ctx context.Context, d time.Duration) error

	mu          sync.Mutex
	keys        map[string]ed25519.PublicKey
	fetchedAt   time.Time  // of the keys
	lastAttempt time.Time  // of the last fetch, failed or not
	attempts    int        // fetches started so far
	inflight    *fetchCall // the fetch under way, if any

	waits *waitGate // deliveries with an unknown kid waiting for a fetch
}

func newRemoteKeys(url string, client *http.Client, now func() time.Time, maxAge time.Duration) *remoteKeys {
	return &remoteKeys{url: url, client: client, now: now, maxAge: maxAge, sleep: sleepFor,
		waits: newWaitGate(MaxKidWaitsPerSource, MaxKidWaits)}
}

// Bounds on the deliveries that wait for a JWKS fetch because their kid is
// unknown. Each may wait up to JWKSRefreshInterval; without a bound a flood
// of made-up kids would hold every request that long. Beyond the bounds a
// delivery is answered kid_unknown at once (Herald retries it).
const (
	// MaxKidWaitsPerSource bounds the waiting deliveries from one remote
	// address.
	MaxKidWaitsPerSource = 16
	// MaxKidWaits bounds the waiting deliveries in total.
	MaxKidWaits = 128
)

// errTooManyWaits refuses a delivery over the wait bounds.
var errTooManyWaits = errors.New("too many deliveries are already waiting for a key refresh")

// waitGate counts waiting deliveries per source and in total.
type waitGate struct {
	perSource, total int

	mu       sync.Mutex
	n        int
	bySource map[string]int
}

func newWaitGate(perSource, total int) *waitGate {
	return &waitGate{perSource: perSource, total: total, bySource: map[string]int{}}
}

// enter admits one more waiter from source, or refuses it with
// errTooManyWaits; release undoes an admission.
func (g *waitGate) enter(source string) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n >= g.total || g.bySource[source] >= g.perSource {
		return nil, errTooManyWaits
	}
	g.n++
	g.bySource[source]++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.n--
		if g.bySource[source]--; g.bySource[source] <= 0 {
			delete(g.bySource, source)
		}
	}, nil
}

type sourceKey struct{}

// withSource records the delivery's remote address (without its port) in
// ctx for the wait bounds.
func withSource(ctx context.Context, remoteAddr string) context.Context {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	return context.WithValue(ctx, sourceKey{}, host)
}

func sourceOf(ctx context.Context) string {
	s, _ := ctx.Value(sourceKey{}).(string)
	return s
}

func (s *remoteKeys) key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	k, ok, fresh := s.cached(kid)
	if ok && fresh {
		return k, nil
	}
	if !ok {
		// An unknown kid may wait up to JWKSRefreshInterval for the next
		// fetch; bound how many deliveries do so at once.
		release, err := s.waits.enter(sourceOf(ctx))
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", errKidUnknown, kid, err)
		}
		defer release()
	}
	refreshErr := s.refresh(ctx, kid, ok)
	if k, ok, _ := s.cached(kid); ok {
		return k, nil
	}
	if refreshErr != nil {
		return nil, fmt.Errorf("%w %q: %w", errKidUnknown, kid, refreshErr)
	}
	return nil, fmt.Errorf("%w %q", errKidUnknown, kid)
}

// cached looks kid up in the cache and tells whether the cache is fresh.
func (s *remoteKeys) cached(kid string) (k ed25519.PublicKey, ok, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cachedLocked(kid)
}

func (s *remoteKeys) cachedLocked(kid string) (k ed25519.PublicKey, ok, fresh bool) {
	k, ok = s.keys[kid]
	fresh = s.keys != nil && s.now().Sub(s.fetchedAt) < s.maxAge
	return k, ok, fresh
}

// errRefreshLimited is returned by refresh when another fetch already ran
// while this caller waited, or when a known kid would have to wait.
var errRefreshLimited = errors.New("key set fetched less than " + JWKSRefreshInterval.String() + " ago")

// fetchCall is one JWKS fetch; done closes when it ends.
type fetchCall struct {
	done chan struct{}
}

// refresh refetches the key set, at most once per JWKSRefreshInterval.
// A caller with an unknown kid that finds the last fetch too recent waits for
// the interval to pass rather than failing: right after Herald starts signing
// with a new key, a delivery waits a few seconds instead of being refused, so
// a key rotation fails no delivery. Concurrent callers share one fetch; one
// that finds a fetch made while it waited does not fetch again, so a flood of
// unknown kids costs at most one fetch per interval.
//
// A caller whose kid is known (cached but stale) never waits for the
// interval nor for another caller's fetch: its stale key serves meanwhile.
// The lock guards only the bookkeeping; nobody sleeps or fetches holding it.
func (s *remoteKeys) refresh(ctx context.Context, kid string, known bool) error {
	s.mu.Lock()
	seen := s.attempts // fetches started before this caller came
	slept := false
	for {
		if _, ok, fresh := s.cachedLocked(kid); ok && fresh {
			s.mu.Unlock()
			return nil // fetched while this caller waited
		}
		if c := s.inflight; c != nil {
			s.mu.Unlock()
			if known {
				return errRefreshLimited
			}
			select {
			case <-c.done:
				s.mu.Lock()
				continue
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", errRefreshLimited, ctx.Err())
			}
		}
		if s.attempts > seen {
			s.mu.Unlock()
			return errRefreshLimited // a fetch started after this caller came has ended
		}
		if !slept && !s.lastAttempt.IsZero() {
			if wait := JWKSRefreshInterval - s.now().Sub(s.lastAttempt); wait > 0 {
				s.mu.Unlock()
				if known {
					return errRefreshLimited
				}
				if err := s.sleep(ctx, wait); err != nil {
					return fmt.Errorf("%w: %w", errRefreshLimited, err)
				}
				slept = true
				s.mu.Lock()
				continue
			}
		}
		now := s.now()
		c := &fetchCall{done: make(chan struct{})}
		s.inflight, s.lastAttempt = c, now
		s.attempts++
		s.mu.Unlock()
		return s.runFetch(ctx, c, now)
	}
}

// runFetch performs the fetch c, started at now, and publishes its result.
func (s *remoteKeys) runFetch(ctx context.Context, c *fetchCall, now time.Time) error {
	// The fetch serves every waiting request: a client that goes away must
	// not cancel it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksFetchTimeout)
	defer cancel()
	keys, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.keys, s.fetchedAt = keys, now
	}
	s.inflight = nil
	close(c.done)
	return err
}

// sleepFor waits d or until ctx ends.
func sleepFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s *remoteKeys) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch jwks: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJWKSBytes))
		return nil, fmt.Errorf("fetch jwks: status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch jwks: %w", err)
	}
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("fetch jwks: response larger than %d bytes", maxJWKSBytes)
	}
	keys, err := ParseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("fetch jwks: %w", err)
	}
	return keys, nil
}

// jwk holds the JWK members this package reads.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
}

// ParseJWKS reads the Ed25519 signing keys of a JSON Web Key Set, by kid.
// Keys of other types or uses, without a kid, or malformed are skipped; a set
// without any Ed25519 key is an error. The first key of a kid wins.
func ParseJWKS(data []byte) (map[string]ed25519.PublicKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse jwks: %w", err)
	}
	keys := make(map[string]ed25519.PublicKey)
	for _, raw := range doc.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			continue
		}
		if k.Kty != "OKP" || k.Crv != "Ed25519" || k.Kid == "" ||
			(k.Use != "" && k.Use != "sig") || (k.Alg != "" && k.Alg != "EdDSA") {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(k.X, "="))
		if err != nil || len(x) != ed25519.PublicKeySize {
			continue
		}
		if _, dup := keys[k.Kid]; !dup {
			keys[k.Kid] = ed25519.PublicKey(x)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("parse jwks: no Ed25519 signing key")
	}
	return keys, nil
}

// maxKeysFileBytes bounds a pinned keys file.
const maxKeysFileBytes = 1 << 20

// ReadKeysFile reads pinned public keys, by kid, from a file: either a JWKS
// document (see ParseJWKS) or one or more PEM "PUBLIC KEY" blocks holding
// Ed25519 keys, whose kid is derived from the key exactly as Herald derives
// it (so <kid>.pub.pem files written by `starter keys generate` can be
// concatenated as they are).
func ReadKeysFile(path string) (map[string]ed25519.PublicKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeysFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("keys file %s: %w", path, err)
	}
	if len(data) > maxKeysFileBytes {
		return nil, fmt.Errorf("keys file %s: larger than %d bytes", path, maxKeysFileBytes)
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		keys, err := ParseJWKS(trimmed)
		if err != nil {
			return nil, fmt.Errorf("keys file %s: %w", path, err)
		}
		return keys, nil
	}
	keys, err := parsePublicKeysPEM(data)
	if err != nil {
		return nil, fmt.Errorf("keys file %s: %w", path, err)
	}
	return keys, nil
}

// parsePublicKeysPEM reads every PEM block of data; each must be a PKIX
// "PUBLIC KEY" holding an Ed25519 key.
func parsePublicKeysPEM(data []byte) (map[string]ed25519.PublicKey, error) {
	keys := make(map[string]ed25519.PublicKey)
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %d is %q, want \"PUBLIC KEY\" (never put a private key here)", n, block.Type)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		k, ok := pub.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("PEM block %d: %T, want an Ed25519 key", n, pub)
		}
		keys[keyID(k)] = k
	}
	if len(bytes.TrimSpace(data)) > 0 {
		return nil, errors.New("not a JWKS document or PEM public keys: unreadable data after the last PEM block")
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys: want a JWKS document or PEM \"PUBLIC KEY\" blocks")
	}
	return keys, nil
}

// keyID is Herald's kid of a public key (signing.KeyID): the unpadded
// base64url form of the first 12 bytes of its SHA-256. It is repeated here so
// that receivers need not import Herald's signing package.
func keyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

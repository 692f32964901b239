package subscriber

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
// already cached.
type remoteKeys struct {
	url    string
	client *http.Client
	now    func() time.Time
	maxAge time.Duration
	sleep  func(ctx context.Context, d time.Duration) error

	mu        sync.RWMutex
	keys      map[string]ed25519.PublicKey
	fetchedAt time.Time // of the keys

	fetchMu     sync.Mutex // one fetch at a time; guards lastAttempt
	lastAttempt time.Time
}

func newRemoteKeys(url string, client *http.Client, now func() time.Time, maxAge time.Duration) *remoteKeys {
	return &remoteKeys{url: url, client: client, now: now, maxAge: maxAge, sleep: sleepFor}
}

func (s *remoteKeys) key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	if k, ok, fresh := s.cached(kid); ok && fresh {
		return k, nil
	}
	refreshErr := s.refresh(ctx, kid)
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok = s.keys[kid]
	fresh = s.keys != nil && s.now().Sub(s.fetchedAt) < s.maxAge
	return k, ok, fresh
}

// errRefreshLimited is returned by refresh when another fetch already ran
// while this caller waited for its turn.
var errRefreshLimited = errors.New("key set fetched less than " + JWKSRefreshInterval.String() + " ago")

// refresh refetches the key set, at most once per JWKSRefreshInterval.
// A caller that finds the last fetch too recent waits for the interval to
// pass rather than failing: right after Herald starts signing with a new key,
// a delivery waits a few seconds instead of being refused, so a key rotation
// fails no delivery. Callers queue for one fetch at a time; one that finds a
// fetch made while it waited does not fetch again, so a flood of unknown kids
// costs at most one fetch per interval.
func (s *remoteKeys) refresh(ctx context.Context, kid string) error {
	started := s.now()
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	_, known, fresh := s.cached(kid)
	if known && fresh {
		return nil // fetched while this caller queued
	}
	if !s.lastAttempt.IsZero() {
		if s.lastAttempt.After(started) {
			return errRefreshLimited
		}
		if wait := JWKSRefreshInterval - s.now().Sub(s.lastAttempt); wait > 0 {
			if known {
				return errRefreshLimited // a stale but known key serves meanwhile
			}
			if err := s.sleep(ctx, wait); err != nil {
				return fmt.Errorf("%w: %w", errRefreshLimited, err)
			}
		}
	}
	now := s.now()
	s.lastAttempt = now

	// The fetch serves every waiting request: a client that goes away must
	// not cancel it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksFetchTimeout)
	defer cancel()
	keys, err := s.fetch(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.keys = keys
	s.fetchedAt = now
	s.mu.Unlock()
	return nil
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

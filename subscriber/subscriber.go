// Package subscriber is the receiving side of Herald deliveries (docs/design.md#receiver-kit): an
// http.Handler that verifies each delivery's JWT, decodes its CloudEvent and
// hands it to a Handler, then maps the Handler's result to the status Herald
// classifies (2xx delivered, 422 terminal, 5xx retried).
//
// Verification happens in this order; every failure is answered with a JSON
// body {"error":"<code>","message":"..."} and never reaches the Handler:
//
//   - method must be POST (405 method_not_allowed);
//   - body at most Config.MaxBodyBytes (413 body_too_large);
//   - Authorization: Bearer token present (401 token_missing);
//   - algorithm EdDSA only, so "none" and HS256 are refused (401 alg_not_allowed,
//     or token_invalid for a token that does not parse);
//   - kid header present (401 kid_missing) and known, after at most one JWKS
//     refresh (401 kid_unknown; at most MaxKidWaitsPerSource deliveries from
//     one address and MaxKidWaits in all wait for a refresh, the others are
//     refused at once);
//   - Ed25519 signature (401 signature_invalid);
//   - exp not past, with leeway (401 token_expired);
//   - iat (and nbf, if any) not in the future beyond leeway (401 token_not_yet_valid);
//   - aud one of the configured audiences (401 audience_mismatch);
//   - iss as configured (401 issuer_mismatch);
//   - body_sha256 equal to the SHA-256 of the received bytes (401 body_mismatch);
//   - jti not seen before within its lifetime (401 replayed);
//   - body a CloudEvents 1.0 JSON document whose id is the token's event_id
//     (400 event_invalid).
//
// A token without exp, iat, sub or jti, or living longer than
// MaxTokenLifetime, is refused as token_invalid.
//
// Keys come from an https JWKS URL (redirects only within its host; plain
// http only for loopback with Config.AllowLoopbackHTTP), from a pinned keys
// file (Config.KeysFile) or from keys given in the Config.
package subscriber

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Handler processes one verified event. Return nil when the event is handled
// (answered 204); Reject(err) when the event can never be handled, e.g. its
// data does not fit what the receiver expects (422, Herald stops retrying);
// Retry(after, err) to ask Herald to come back later (503 with Retry-After);
// WithStatus(code, err) for another status; any other error answers 500 and
// Herald retries on its schedule. Error text is sent back to Herald and shown
// to operators, so it must not hold secrets. A panic is recovered and answered
// 500.
type Handler func(ctx context.Context, ev Event) error

// Defaults of Config.
const (
	DefaultIssuer          = "herald"
	DefaultLeeway          = 30 * time.Second
	DefaultMaxBodyBytes    = 320 << 10 // Herald's 256 KiB event limit plus headroom
	DefaultReplayCacheSize = 100_000
	DefaultJWKSMaxAge      = 10 * time.Minute
	// JWKSRefreshInterval is the least time between two JWKS fetches of one
	// handler, so that a flood of unknown kids cannot hammer the JWKS URL.
	JWKSRefreshInterval = 10 * time.Second
	// MaxTokenLifetime is the longest exp - iat accepted; Herald signs tokens
	// for at most 5 minutes.
	MaxTokenLifetime = 5 * time.Minute
	// jwksFetchTimeout bounds one JWKS fetch.
	jwksFetchTimeout = 10 * time.Second
)

// Config configures New.
type Config struct {
	// Audience is the aud this receiver accepts, "app:<id>". Audiences adds
	// more, for one process that receives for several apps; at least one of
	// the two is required. Event.Audience tells which one a delivery was for.
	Audience  string
	Audiences []string

	// Issuer is the expected iss; DefaultIssuer when empty.
	Issuer string

	// Exactly one key source is required: JWKSURL (Herald's
	// /.well-known/jwks.json, fetched on first use, refetched on an unknown
	// kid and when older than JWKSMaxAge), KeysFile (keys pinned in a file),
	// StaticKeys (kid → key) or StaticKey (one key, whatever the token's kid).
	//
	// Whoever can answer the JWKS fetch decides which deliveries are
	// genuine, so JWKSURL must be https://; a redirect is followed only to
	// the same scheme, host and port. An http:// URL is accepted only for a
	// loopback host (127.0.0.0/8, ::1, localhost) and only with
	// AllowLoopbackHTTP, for development.
	JWKSURL           string
	AllowLoopbackHTTP bool
	// KeysFile names a file of pinned public keys, read once by New: a JWKS
	// document (a saved copy of Herald's /.well-known/jwks.json) or PEM
	// "PUBLIC KEY" blocks (the <kid>.pub.pem files of `starter keys
	// generate`, one or several). See ReadKeysFile.
	KeysFile   string
	StaticKeys map[string]ed25519.PublicKey
	StaticKey  ed25519.PublicKey

	// JWKSMaxAge is how long fetched keys are trusted before the next
	// delivery refetches them (DefaultJWKSMaxAge when zero). If that fetch
	// fails, the cached keys stay in use.
	JWKSMaxAge time.Duration

	// Leeway is the clock skew tolerated on exp and iat (DefaultLeeway when zero).
	Leeway time.Duration

	// MaxBodyBytes bounds the request body (DefaultMaxBodyBytes when zero).
	MaxBodyBytes int64

	// HTTPClient fetches the JWKS; a client with a 10 s timeout when nil.
	// New uses a copy whose redirect policy refuses other hosts.
	HTTPClient *http.Client

	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// ReplayCacheSize bounds the number of remembered token ids
	// (DefaultReplayCacheSize when zero). Ids are forgotten when their token
	// expires; when the cache is full, the id expiring soonest goes first.
	ReplayCacheSize int

	// WebhookSecrets, when set, also requires a Standard Webhooks v1
	// signature verifying with one of these whsec_ secrets (`starter apps
	// secret show`; list the old and the new one during a rotation), after
	// the JWT (401 webhook_signature_invalid).
	WebhookSecrets []string

	// OnFailure, when set, is called for every delivery not answered 2xx,
	// e.g. to log it. It must not block.
	OnFailure func(r *http.Request, f Failure)

	// sleep replaces the real wait for the JWKS refresh interval in tests
	// that drive a fake clock.
	sleep func(ctx context.Context, d time.Duration) error
}

// Failure describes a delivery that was not answered 2xx.
type Failure struct {
	Status  int
	Code    string // one of the Code* constants
	Message string // as sent in the response body
	Err     error  // the handler's error, or the verification error
	// Event is the delivered event when verification passed, else nil.
	Event *Event
}

// appAudience is the form of an audience: "app:" and an app id (docs/design.md#identifiers).
var appAudience = regexp.MustCompile(`^app:[a-z][a-z0-9-]{0,79}$`)

// handler is the http.Handler returned by New.
type handler struct {
	handle    Handler
	audiences []string
	issuer    string
	leeway    time.Duration
	maxBody   int64
	now       func() time.Time
	keys      keySource
	replay    *replayCache
	parser    *jwt.Parser
	onFailure func(*http.Request, Failure)
	webhook   *WebhookVerifier // nil unless Config.WebhookSecrets
}

// New returns an http.Handler that verifies Herald deliveries and passes their
// events to h. Mount it at the app's delivery path
// (/api/_internal/events/v1/deliver unless its manifest says otherwise).
func New(cfg Config, h Handler) (http.Handler, error) {
	if h == nil {
		return nil, errors.New("new subscriber: handler is nil")
	}
	audiences, err := cfg.audiences()
	if err != nil {
		return nil, fmt.Errorf("new subscriber: %w", err)
	}
	if cfg.Leeway < 0 || cfg.MaxBodyBytes < 0 || cfg.ReplayCacheSize < 0 || cfg.JWKSMaxAge < 0 {
		return nil, errors.New("new subscriber: Leeway, MaxBodyBytes, ReplayCacheSize and JWKSMaxAge must not be negative")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	keys, err := cfg.keySource(now)
	if err != nil {
		return nil, fmt.Errorf("new subscriber: %w", err)
	}
	webhook, err := newWebhookVerifier(cfg.WebhookSecrets, now)
	if err != nil {
		return nil, err
	}
	return &handler{
		webhook:   webhook,
		handle:    h,
		audiences: audiences,
		issuer:    orDefault(cfg.Issuer, DefaultIssuer),
		leeway:    orDefault(cfg.Leeway, DefaultLeeway),
		maxBody:   orDefault(cfg.MaxBodyBytes, DefaultMaxBodyBytes),
		now:       now,
		keys:      keys,
		replay:    newReplayCache(orDefault(cfg.ReplayCacheSize, DefaultReplayCacheSize)),
		// Claims are checked by verifyClaims, in the documented order and
		// with precise codes; the parser only checks structure, alg and
		// signature. Strict decoding makes every token have one encoding.
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{"EdDSA"}),
			jwt.WithoutClaimsValidation(),
			jwt.WithStrictDecoding(),
		),
		onFailure: cfg.OnFailure,
	}, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// audiences returns Audience and Audiences, checked and without duplicates.
func (cfg Config) audiences() ([]string, error) {
	var out []string
	seen := make(map[string]bool)
	for _, a := range append([]string{cfg.Audience}, cfg.Audiences...) {
		if a == "" || seen[a] {
			continue
		}
		if !appAudience.MatchString(a) {
			return nil, fmt.Errorf("audience %q: want app:<app-id>", a)
		}
		seen[a] = true
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("audience is required (app:<app-id>)")
	}
	return out, nil
}

// keySource builds the one configured key source.
func (cfg Config) keySource(now func() time.Time) (keySource, error) {
	n := 0
	for _, set := range []bool{cfg.JWKSURL != "", cfg.KeysFile != "", cfg.StaticKeys != nil, cfg.StaticKey != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("set exactly one of JWKSURL, KeysFile, StaticKeys and StaticKey")
	}
	switch {
	case cfg.StaticKey != nil:
		if len(cfg.StaticKey) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("static key: %d bytes, want %d", len(cfg.StaticKey), ed25519.PublicKeySize)
		}
		return singleKey(append(ed25519.PublicKey(nil), cfg.StaticKey...)), nil
	case cfg.StaticKeys != nil:
		return copyStaticKeys(cfg.StaticKeys)
	case cfg.KeysFile != "":
		keys, err := ReadKeysFile(cfg.KeysFile)
		if err != nil {
			return nil, err
		}
		return copyStaticKeys(keys)
	default:
		u, err := checkJWKSURL(cfg.JWKSURL, cfg.AllowLoopbackHTTP)
		if err != nil {
			return nil, err
		}
		client := &http.Client{Timeout: jwksFetchTimeout}
		if cfg.HTTPClient != nil {
			c := *cfg.HTTPClient
			client = &c
		}
		client.CheckRedirect = sameOriginRedirects(u, client.CheckRedirect)
		rk := newRemoteKeys(cfg.JWKSURL, client, now, orDefault(cfg.JWKSMaxAge, DefaultJWKSMaxAge))
		if cfg.sleep != nil {
			rk.sleep = cfg.sleep
		}
		return rk, nil
	}
}

func copyStaticKeys(in map[string]ed25519.PublicKey) (staticKeys, error) {
	if len(in) == 0 {
		return nil, errors.New("static keys: empty")
	}
	keys := make(staticKeys, len(in))
	for kid, k := range in {
		if kid == "" {
			return nil, errors.New("static keys: empty kid")
		}
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("static key %q: %d bytes, want %d", kid, len(k), ed25519.PublicKeySize)
		}
		keys[kid] = append(ed25519.PublicKey(nil), k...)
	}
	return keys, nil
}

// checkJWKSURL accepts an absolute https URL, or an http URL of a loopback
// host when allowLoopbackHTTP is set.
func checkJWKSURL(raw string, allowLoopbackHTTP bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("jwks url %q: want an absolute https URL", raw)
	}
	if u.Scheme == "https" {
		return u, nil
	}
	if !allowLoopbackHTTP {
		return nil, fmt.Errorf("jwks url %q: want https: keys fetched over plain http can be replaced by anyone on the way "+
			"(for a loopback URL in development, set AllowLoopbackHTTP)", raw)
	}
	if !isLoopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("jwks url %q: plain http is allowed only for a loopback host (127.0.0.0/8, ::1, localhost)", raw)
	}
	return u, nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxJWKSRedirects bounds the redirects of one JWKS fetch.
const maxJWKSRedirects = 3

// sameOriginRedirects is a redirect policy that follows a redirect only to
// the scheme, host and port of the JWKS URL, then applies next (the given
// client's own policy) if any.
func sameOriginRedirects(base *url.URL, next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != base.Scheme || !strings.EqualFold(req.URL.Host, base.Host) {
			return fmt.Errorf("jwks redirect to %s://%s refused: only the JWKS URL's own host is trusted", req.URL.Scheme, req.URL.Host)
		}
		if len(via) >= maxJWKSRedirects {
			return fmt.Errorf("jwks: more than %d redirects", maxJWKSRedirects)
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
}

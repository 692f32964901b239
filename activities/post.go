package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"herald/internal/tracing"
	"herald/netguard"
	"herald/signing"
	"herald/store"
)

// Limits and defaults of one delivery attempt (docs/design.md#the-http-contract-of-a-delivery).
const (
	// DefaultPostTimeout bounds an attempt when PostRequest.Timeout is zero.
	DefaultPostTimeout = 30 * time.Second
	// DefaultMaxResponseBytes is how much of a response body Poster reads
	// when Poster.MaxResponseBytes is zero.
	DefaultMaxResponseBytes = 64 << 10
	// MaxRetryAfter caps the delay a subscriber may ask for with Retry-After.
	MaxRetryAfter = time.Hour
	// maxErrorText is the longest error text kept, in characters.
	maxErrorText = 1000
)

// Claims are the per-attempt claims of a delivery token. Issuer and TTL may
// be left empty for the signer's defaults.
type Claims struct {
	Issuer   string
	Audience string // "app:<subscriber>"
	Subject  string // the subscription id
	EventID  string
	Attempt  int
	// BodySHA256 is the base64url (unpadded) SHA-256 of the exact body bytes.
	BodySHA256 string
	TTL        time.Duration
}

// TokenSigner signs the bearer token of one delivery attempt.
type TokenSigner interface {
	SignDelivery(c Claims) (string, error)
}

// WebhookHeaders are the Standard Webhooks headers of one delivery attempt.
type WebhookHeaders struct {
	ID, Timestamp, Signature string
}

// WebhookSigner signs a delivery the Standard Webhooks way (webhook-id,
// webhook-timestamp, webhook-signature), beside the JWT.
type WebhookSigner interface {
	SignWebhook(id string, body []byte) (WebhookHeaders, error)
}

// SymmetricSigner signs a delivery with the subscribing app's own secrets:
// the "v1,<base64 HMAC>" entries of webhook-signature, one per valid secret.
// It reads the secrets at POST time, so they never enter workflow history.
// secretID is the app's current secret as the attempt's Deliver execution
// read it (PostRequest.SecretID): a signer may sign with secrets it read a
// moment before only while they are those.
type SymmetricSigner interface {
	SignSymmetric(ctx context.Context, app string, secretID int64, id, timestamp string, body []byte) (string, error)
}

// Poster makes the HTTP part of a delivery attempt: one signed POST and the
// classification of its outcome. It does not depend on Temporal.
type Poster struct {
	// Client sends the requests. It should come from netguard.NewHTTPClient
	// so that every connection passes the address guard; when nil, a shared
	// guarded client with no allow-list is used. Redirects are never
	// followed, whatever the client's CheckRedirect says.
	Client *http.Client
	// Signer signs each attempt's bearer token.
	Signer TokenSigner
	// Webhook, when set, also signs each attempt with the Standard Webhooks
	// headers.
	Webhook WebhookSigner
	// Symmetric, when set, adds the subscribing app's v1 (HMAC-SHA256)
	// signatures to webhook-signature, before the v1a one.
	Symmetric SymmetricSigner
	// MaxResponseBytes is how much of a response body is read at most
	// (default DefaultMaxResponseBytes); the rest is never read.
	MaxResponseBytes int64
}

// PostRequest is one delivery attempt.
type PostRequest struct {
	// URL is the subscriber's endpoint plus its delivery path.
	URL string
	// Body is the CloudEvent JSON, sent byte for byte.
	Body           []byte
	SubscriptionID string
	SubscriberApp  string
	// SourceApp is the app that published the event: with EventID it names
	// the event (ids are unique per source app) and makes the webhook-id.
	SourceApp string
	EventID   string
	Attempt   int
	// Timeout bounds the attempt (default DefaultPostTimeout).
	Timeout time.Duration
	// TraceContext is the event's stored W3C trace context: the parent of
	// the attempt's "POST" span, whose traceparent the request carries.
	TraceContext store.TraceContext
	// SecretID is the subscriber app's current signing secret when the
	// execution read its batch (store.Batch.SecretID; 0: unknown).
	SecretID int64
}

// PostResult is the outcome of one delivery attempt.
type PostResult struct {
	// Code is one of the Code* constants, or "" when the event was delivered.
	Code string
	// Status is the HTTP status, 0 when no response was received.
	Status int
	// Message describes a failure: at most 1,000 characters of valid UTF-8.
	Message string
	// RetryAfter is the subscriber's requested delay (throttled only), at
	// most MaxRetryAfter.
	RetryAfter time.Duration
	// Duration is how long the attempt took.
	Duration time.Duration
}

// Delivered reports whether the subscriber accepted the event (2xx).
func (r PostResult) Delivered() bool { return r.Code == "" }

// defaultClient is used by a Poster without a Client: guarded, nothing
// allow-listed.
var defaultClient = sync.OnceValue(func() *http.Client {
	return netguard.NewHTTPClient(netguard.New(nil), netguard.ClientOptions{})
})

// Post makes one delivery attempt and classifies its outcome. It never
// returns without a result: failures of Herald's own (such as a token that
// cannot be signed, or ctx ending) are reported as subscriber_unreachable,
// the code under which an attempt is not counted, since the subscriber was
// not at fault.
func (p *Poster) Post(ctx context.Context, r PostRequest) PostResult {
	start := time.Now()
	ctx, span := startPostSpan(ctx, r)
	res := p.post(ctx, r)
	res.Duration = time.Since(start)
	res.Message = truncate(res.Message, maxErrorText)
	endPostSpan(span, res)
	return res
}

func (p *Poster) post(ctx context.Context, r PostRequest) PostResult {
	u, err := url.Parse(r.URL)
	if err != nil {
		return PostResult{Code: CodeEndpointForbidden, Message: fmt.Sprintf("invalid endpoint URL: %v", err)}
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return PostResult{Code: CodeEndpointForbidden,
			Message: fmt.Sprintf("invalid endpoint URL %q: want an absolute http or https URL", r.URL)}
	}
	if p.Signer == nil {
		return PostResult{Code: CodeSubscriberUnreachable, Message: "not sent: no token signer configured"}
	}
	token, err := p.Signer.SignDelivery(Claims{
		Audience:   "app:" + r.SubscriberApp,
		Subject:    r.SubscriptionID,
		EventID:    r.EventID,
		Attempt:    r.Attempt,
		BodySHA256: bodySHA256(r.Body),
	})
	if err != nil {
		return PostResult{Code: CodeSubscriberUnreachable, Message: fmt.Sprintf("not sent: sign delivery token: %v", err)}
	}

	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultPostTimeout
	}
	attemptCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var tr connTrace
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(attemptCtx, tr.hooks()),
		http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return PostResult{Code: CodeEndpointForbidden, Message: fmt.Sprintf("invalid endpoint URL: %v", err)}
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Herald-Subscription", r.SubscriptionID)
	req.Header.Set("Herald-Attempt", strconv.Itoa(r.Attempt))
	req.Header.Set("Herald-Event-Id", r.EventID)
	if r.SourceApp != "" {
		req.Header.Set("Herald-Event-Source", "app:"+r.SourceApp)
	}
	req.Header.Set("User-Agent", "Herald")
	// traceparent of the attempt's span; nothing when it has no valid trace
	// context. Its tracestate only when incoming trace context is trusted
	// (HERALD_TRUST_INCOMING_TRACE): otherwise it may be a publisher's, which
	// is not for every subscriber to receive.
	w3c.Inject(ctx, propagation.HeaderCarrier(req.Header))
	if !tracing.TrustIncoming() {
		req.Header.Del("tracestate")
	}
	if err := p.signWebhook(ctx, req.Header, r); err != nil {
		return PostResult{Code: CodeSubscriberUnreachable, Message: fmt.Sprintf("not sent: %v", err)}
	}

	client := p.client()
	resp, err := client.Do(req)
	if err != nil {
		return classifyError(ctx, attemptCtx, timeout, err, &tr)
	}
	defer resp.Body.Close()
	// Read at most the limit, never the rest: Close then drops the
	// connection instead of draining an unbounded body.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, p.maxResponseBytes()))
	return classifyResponse(resp, body, time.Now())
}

// signWebhook sets the Standard Webhooks headers: webhook-id
// ("<source app>:<event id>", signing.WebhookID), webhook-timestamp and
// webhook-signature with the app's v1 entries and the v1a one, as
// configured. Nothing is set when neither is.
func (p *Poster) signWebhook(ctx context.Context, h http.Header, r PostRequest) error {
	if p.Webhook == nil && p.Symmetric == nil {
		return nil
	}
	id, err := signing.WebhookID(r.SourceApp, r.EventID)
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	var sigs []string
	if p.Webhook != nil {
		wh, err := p.Webhook.SignWebhook(id, r.Body)
		if err != nil {
			return fmt.Errorf("sign webhook headers: %w", err)
		}
		id, ts = wh.ID, wh.Timestamp
		sigs = append(sigs, wh.Signature)
	}
	if p.Symmetric != nil {
		v1, err := p.Symmetric.SignSymmetric(ctx, r.SubscriberApp, r.SecretID, id, ts, r.Body)
		if err != nil {
			return fmt.Errorf("sign webhook with the secrets of %s: %w", r.SubscriberApp, err)
		}
		sigs = append([]string{v1}, sigs...)
	}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", strings.Join(sigs, " "))
	return nil
}

// client returns a copy of the Poster's client that never follows redirects.
func (p *Poster) client() *http.Client {
	base := p.Client
	if base == nil {
		base = defaultClient()
	}
	c := *base
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func (p *Poster) maxResponseBytes() int64 {
	if p.MaxResponseBytes > 0 {
		return p.MaxResponseBytes
	}
	return DefaultMaxResponseBytes
}

// bodySHA256 is the body_sha256 claim: base64url, unpadded, of the SHA-256
// of the exact body bytes.
func bodySHA256(body []byte) string {
	sum := sha256.Sum256(body)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// connTrace records how far a request got, to tell "nothing reached the
// subscriber" from a connection lost after it was established.
type connTrace struct {
	connected atomic.Bool // a TCP connection was established
	gotConn   atomic.Bool // a usable connection (TLS done, or reused) was obtained
	wrote     atomic.Bool // the whole request was written
}

func (t *connTrace) hooks() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				t.connected.Store(true)
			}
		},
		GotConn: func(httptrace.GotConnInfo) { t.gotConn.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				t.wrote.Store(true)
			}
		},
	}
}

// classifyError turns a failed round trip into a result. parent is the
// caller's context, attempt the one bounded by the attempt's timeout.
func classifyError(parent, attempt context.Context, timeout time.Duration, err error, tr *connTrace) PostResult {
	var forbidden *netguard.ForbiddenError
	if errors.As(err, &forbidden) {
		return PostResult{Code: CodeEndpointForbidden, Message: forbidden.Error()}
	}
	detail := errorDetail(err)
	if parent.Err() != nil {
		// Herald gave up (activity cancelled, worker stopping): not the
		// subscriber's fault, so the attempt must not count.
		return PostResult{Code: CodeSubscriberUnreachable, Message: "attempt abandoned: " + detail}
	}
	timedOut := attempt.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err)

	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.As(err, &dnsErr):
		return PostResult{Code: CodeSubscriberUnreachable, Message: "DNS lookup failed: " + detail}
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return PostResult{Code: CodeSubscriberUnreachable, Message: "cannot connect: " + detail}
	case !tr.connected.Load() && !tr.gotConn.Load():
		if timedOut {
			return PostResult{Code: CodeSubscriberUnreachable, Message: fmt.Sprintf("no connection within %s: %s", timeout, detail)}
		}
		return PostResult{Code: CodeSubscriberUnreachable, Message: "cannot connect: " + detail}
	case timedOut:
		return PostResult{Code: CodeHandlerTimeout, Message: fmt.Sprintf("no response within %s: %s", timeout, detail)}
	case !tr.gotConn.Load():
		// Connected, but the TLS handshake failed: a misconfigured endpoint,
		// counted like any other handler failure.
		return PostResult{Code: CodeHandlerFailed, Message: "TLS handshake failed: " + detail}
	case tr.wrote.Load():
		return PostResult{Code: CodeConnectionLost, Message: "connection lost after sending the request: " + detail}
	default:
		return PostResult{Code: CodeConnectionLost, Message: "connection lost while sending the request: " + detail}
	}
}

// errorDetail is the error text without the url.Error's method and URL.
func errorDetail(err error) string {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err.Error()
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// classifyResponse maps an HTTP response to a result (docs/design.md#the-http-contract-of-a-delivery).
func classifyResponse(resp *http.Response, body []byte, now time.Time) PostResult {
	res := PostResult{Status: resp.StatusCode}
	code := resp.StatusCode
	switch {
	case code >= 200 && code <= 299:
		return res
	case code == http.StatusUnprocessableEntity:
		res.Code = CodeSchemaMismatch
		res.Message = statusMessage(resp, "", body)
	case code == http.StatusGone:
		res.Code = CodeSubscriptionUnavailable
		res.Message = statusMessage(resp, "", body)
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			res.Code = CodeThrottled
			res.RetryAfter = d
			res.Message = statusMessage(resp, fmt.Sprintf("retry after %s", d), body)
		} else {
			res.Code = CodeHandlerFailed
			res.Message = statusMessage(resp, "no valid Retry-After", body)
		}
	case code >= 300 && code <= 399:
		res.Code = CodeHandlerFailed
		note := "redirects are not followed"
		if loc := resp.Header.Get("Location"); loc != "" {
			note += "; Location: " + loc
		}
		res.Message = statusMessage(resp, note, body)
	default:
		res.Code = CodeHandlerFailed
		res.Message = statusMessage(resp, "", body)
	}
	return res
}

// statusMessage is "HTTP <status> (<note>): <start of the body>".
func statusMessage(resp *http.Response, note string, body []byte) string {
	var b strings.Builder
	b.WriteString("HTTP ")
	if resp.Status != "" {
		b.WriteString(resp.Status)
	} else {
		b.WriteString(strconv.Itoa(resp.StatusCode))
	}
	if note != "" {
		fmt.Fprintf(&b, " (%s)", note)
	}
	// Only the first part can be kept; avoid converting 64 KiB to text.
	const peek = 4 * maxErrorText
	if len(body) > peek {
		body = body[:peek]
	}
	if text := strings.TrimSpace(string(body)); text != "" {
		b.WriteString(": ")
		b.WriteString(text)
	}
	return b.String()
}

// parseRetryAfter reads a Retry-After value, delta-seconds or HTTP-date,
// as a delay from now, capped at MaxRetryAfter; a date in the past is no
// delay. ok is false when the value is missing or invalid.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(MaxRetryAfter/time.Second) {
			// All digits, so the only possible error is a value too large.
			return MaxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}

// truncate makes s storable error text: valid UTF-8 without NUL bytes
// (PostgreSQL text accepts neither) and at most n characters, cut at a rune
// boundary with an ellipsis marking the cut.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	kept := 0
	for i := range s {
		if kept == n-1 {
			return s[:i] + "…"
		}
		kept++
	}
	return s
}

package activities_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"herald/activities"
	"herald/internal/testkit"
	"herald/netguard"
)

// Every server in these tests listens on loopback; nothing else is dialled.

type fakeSigner struct {
	mu     sync.Mutex
	claims []activities.Claims
	err    error
}

func (s *fakeSigner) SignDelivery(c activities.Claims) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append(s.claims, c)
	if s.err != nil {
		return "", s.err
	}
	return "tok-" + strconv.Itoa(c.Attempt), nil
}

func (s *fakeSigner) calls() []activities.Claims {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]activities.Claims(nil), s.claims...)
}

func loopbackGuard(t *testing.T) *netguard.Guard {
	t.Helper()
	allow, err := netguard.ParseAllowList("127.0.0.0/8, ::1/128")
	if err != nil {
		t.Fatal(err)
	}
	return netguard.New(allow)
}

// newPoster returns a Poster whose client may reach loopback.
func newPoster(t *testing.T) (*activities.Poster, *fakeSigner) {
	t.Helper()
	signer := &fakeSigner{}
	return &activities.Poster{
		Client: netguard.NewHTTPClient(loopbackGuard(t), netguard.ClientOptions{}),
		Signer: signer,
	}, signer
}

func server(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func request(url string) activities.PostRequest {
	return activities.PostRequest{
		URL:            url,
		Body:           []byte(`{"specversion":"1.0","id":"e-1"}`),
		SubscriptionID: "billing:contacts.person.updated@1",
		SubscriberApp:  "billing",
		SourceApp:      "contacts",
		EventID:        "e-1",
		Attempt:        1,
		Timeout:        5 * time.Second,
	}
}

func sha256b64url(b []byte) string {
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func TestPostSendsSignedRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path string
		header       http.Header
		body         []byte
	}
	got := make(chan seen, 1)
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	})
	p, signer := newPoster(t)
	// Exact bytes, including non-canonical whitespace and a trailing newline,
	// must be sent and hashed as they are.
	body := []byte("{ \"specversion\": \"1.0\",\n  \"id\": \"e-7\", \"data\": {\"name\": \"Zoë\"} }\n")
	req := activities.PostRequest{
		URL: srv.URL + "/hooks/herald", Body: body,
		SubscriptionID: "billing:contacts.person.updated@1", SubscriberApp: "billing",
		SourceApp: "contacts", EventID: "e-7", Attempt: 3, Timeout: 5 * time.Second,
	}
	res := p.Post(context.Background(), req)
	if !res.Delivered() || res.Code != "" || res.Status != http.StatusNoContent || res.Message != "" {
		t.Fatalf("result = %+v, want delivered with 204", res)
	}
	if res.Duration <= 0 {
		t.Errorf("Duration = %v, want > 0", res.Duration)
	}
	s := <-got
	if s.method != http.MethodPost || s.path != "/hooks/herald" {
		t.Errorf("request = %s %s, want POST /hooks/herald", s.method, s.path)
	}
	if !bytes.Equal(s.body, body) {
		t.Errorf("body = %q, want %q", s.body, body)
	}
	for name, want := range map[string]string{
		"Content-Type":        "application/cloudevents+json",
		"Authorization":       "Bearer tok-3",
		"Herald-Subscription": "billing:contacts.person.updated@1",
		"Herald-Attempt":      "3",
		"Herald-Event-Id":     "e-7",
		"Herald-Event-Source": "app:contacts",
		"User-Agent":          "Herald",
	} {
		if v := s.header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	calls := signer.calls()
	if len(calls) != 1 {
		t.Fatalf("signer called %d times, want 1", len(calls))
	}
	want := activities.Claims{
		Audience: "app:billing", Subject: "billing:contacts.person.updated@1",
		EventID: "e-7", Attempt: 3, BodySHA256: sha256b64url(body),
	}
	if calls[0] != want {
		t.Errorf("claims = %+v, want %+v", calls[0], want)
	}
}

func TestPostBodyHashOfEmptyBody(t *testing.T) {
	t.Parallel()
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {})
	p, signer := newPoster(t)
	req := request(srv.URL)
	req.Body = nil
	if res := p.Post(context.Background(), req); !res.Delivered() {
		t.Fatalf("result = %+v", res)
	}
	// SHA-256 of no bytes, base64url without padding.
	if got := signer.calls()[0].BodySHA256; got != "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU" {
		t.Errorf("BodySHA256 = %q", got)
	}
}

func TestPostClassifiesResponses(t *testing.T) {
	t.Parallel()
	httpDate := func(d time.Duration) func() string {
		return func() string { return time.Now().Add(d).UTC().Format(http.TimeFormat) }
	}
	fixed := func(s string) func() string { return func() string { return s } }
	tests := []struct {
		name       string
		status     int
		retryAfter func() string
		location   string
		body       string
		code       string
		minRetry   time.Duration
		maxRetry   time.Duration
		message    []string
	}{
		{name: "200", status: 200, code: ""},
		{name: "201", status: 201, code: ""},
		{name: "202 with body", status: 202, body: "queued", code: ""},
		{name: "204", status: 204, code: ""},
		{name: "299", status: 299, code: ""},
		{name: "422", status: 422, body: "field name: required", code: activities.CodeSchemaMismatch,
			message: []string{"HTTP 422", "field name: required"}},
		{name: "410", status: 410, code: activities.CodeSubscriptionUnavailable, message: []string{"HTTP 410"}},
		{name: "429 seconds", status: 429, retryAfter: fixed("120"), code: activities.CodeThrottled,
			minRetry: 2 * time.Minute, maxRetry: 2 * time.Minute, message: []string{"HTTP 429", "retry after 2m0s"}},
		{name: "503 seconds", status: 503, retryAfter: fixed(" 30 "), code: activities.CodeThrottled,
			minRetry: 30 * time.Second, maxRetry: 30 * time.Second},
		{name: "429 zero", status: 429, retryAfter: fixed("0"), code: activities.CodeThrottled},
		{name: "503 seconds capped", status: 503, retryAfter: fixed("7200"), code: activities.CodeThrottled,
			minRetry: time.Hour, maxRetry: time.Hour},
		{name: "429 overflowing seconds capped", status: 429, retryAfter: fixed("99999999999999999999999"),
			code: activities.CodeThrottled, minRetry: time.Hour, maxRetry: time.Hour},
		{name: "429 date", status: 429, retryAfter: httpDate(2 * time.Minute), code: activities.CodeThrottled,
			minRetry: 2*time.Minute - 5*time.Second, maxRetry: 2 * time.Minute},
		{name: "503 date capped", status: 503, retryAfter: httpDate(3 * time.Hour), code: activities.CodeThrottled,
			minRetry: time.Hour, maxRetry: time.Hour},
		{name: "429 date in the past", status: 429, retryAfter: httpDate(-time.Hour), code: activities.CodeThrottled},
		{name: "429 without Retry-After", status: 429, code: activities.CodeHandlerFailed,
			message: []string{"HTTP 429", "no valid Retry-After"}},
		{name: "503 without Retry-After", status: 503, body: "down", code: activities.CodeHandlerFailed,
			message: []string{"HTTP 503", "down"}},
		{name: "503 bad Retry-After", status: 503, retryAfter: fixed("soon"), code: activities.CodeHandlerFailed},
		{name: "429 negative Retry-After", status: 429, retryAfter: fixed("-5"), code: activities.CodeHandlerFailed},
		{name: "429 fractional Retry-After", status: 429, retryAfter: fixed("1.5"), code: activities.CodeHandlerFailed},
		{name: "500", status: 500, body: "boom", code: activities.CodeHandlerFailed, message: []string{"HTTP 500", "boom"}},
		{name: "400", status: 400, code: activities.CodeHandlerFailed, message: []string{"HTTP 400"}},
		{name: "401", status: 401, code: activities.CodeHandlerFailed},
		{name: "404", status: 404, code: activities.CodeHandlerFailed},
		{name: "409", status: 409, code: activities.CodeHandlerFailed},
		{name: "502 with Retry-After", status: 502, retryAfter: fixed("10"), code: activities.CodeHandlerFailed},
		{name: "301", status: 301, location: "/moved", code: activities.CodeHandlerFailed,
			message: []string{"HTTP 301", "redirects are not followed", "/moved"}},
		{name: "302", status: 302, location: "/target", code: activities.CodeHandlerFailed},
		{name: "307", status: 307, location: "/target", code: activities.CodeHandlerFailed},
		{name: "308", status: 308, location: "/target", code: activities.CodeHandlerFailed},
		{name: "304", status: 304, code: activities.CodeHandlerFailed},
	}
	p, _ := newPoster(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != nil {
					w.Header().Set("Retry-After", tt.retryAfter())
				}
				if tt.location != "" {
					w.Header().Set("Location", tt.location)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			res := p.Post(context.Background(), request(srv.URL))
			if res.Code != tt.code || res.Status != tt.status {
				t.Fatalf("result = %+v, want code %q status %d", res, tt.code, tt.status)
			}
			if res.Delivered() != (tt.code == "") {
				t.Errorf("Delivered() = %v", res.Delivered())
			}
			if res.RetryAfter < tt.minRetry || res.RetryAfter > tt.maxRetry {
				t.Errorf("RetryAfter = %v, want in [%v, %v]", res.RetryAfter, tt.minRetry, tt.maxRetry)
			}
			for _, m := range tt.message {
				if !strings.Contains(res.Message, m) {
					t.Errorf("Message = %q, want it to contain %q", res.Message, m)
				}
			}
		})
	}
}

func TestPostDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var targetHits atomic.Int32
	target := server(t, func(w http.ResponseWriter, r *http.Request) { targetHits.Add(1) })
	redirector := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/target" {
			targetHits.Add(1)
			return
		}
		if r.URL.Path == "/elsewhere" {
			http.Redirect(w, r, target.URL+"/", http.StatusTemporaryRedirect)
			return
		}
		http.Redirect(w, r, "/target", http.StatusFound)
	})
	guarded := netguard.NewHTTPClient(loopbackGuard(t), netguard.ClientOptions{})
	clients := map[string]*http.Client{
		"guarded client": guarded,
		// A client that would follow redirects: the Poster still must not.
		"following client": {Transport: guarded.Transport},
	}
	for name, c := range clients {
		p := &activities.Poster{Client: c, Signer: &fakeSigner{}}
		for _, path := range []string{"/", "/elsewhere"} {
			res := p.Post(context.Background(), request(redirector.URL+path))
			if res.Code != activities.CodeHandlerFailed || (res.Status != http.StatusFound && res.Status != http.StatusTemporaryRedirect) {
				t.Errorf("%s %s: result = %+v, want handler_failed with the redirect status", name, path, res)
			}
		}
	}
	if n := targetHits.Load(); n != 0 {
		t.Fatalf("redirect target was hit %d times", n)
	}
}

// countingTransport counts the response body bytes its caller reads.
type countingTransport struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func TestPostReadsAtMostTheLimit(t *testing.T) {
	// Serial: measures how long Post takes.
	const tenMiB = 10 << 20
	tests := []struct {
		name   string
		status int
		limit  int64
		want   int64
		code   string
	}{
		{"error status, default limit", 500, 0, activities.DefaultMaxResponseBytes, activities.CodeHandlerFailed},
		{"success, default limit", 200, 0, activities.DefaultMaxResponseBytes, ""},
		{"error status, small limit", 500, 1000, 1000, activities.CodeHandlerFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The server offers 10 MiB, then holds the response open: reading
			// to the end would last until the attempt's timeout.
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(tt.status)
				chunk := bytes.Repeat([]byte("x"), 64<<10)
				for sent := 0; sent < tenMiB; sent += len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
				select {
				case <-r.Context().Done():
				case <-time.After(30 * time.Second):
				}
			})
			ct := &countingTransport{base: netguard.NewHTTPClient(loopbackGuard(t), netguard.ClientOptions{}).Transport}
			p := &activities.Poster{Client: &http.Client{Transport: ct}, Signer: &fakeSigner{}, MaxResponseBytes: tt.limit}
			req := request(srv.URL)
			req.Timeout = 20 * time.Second
			start := time.Now()
			res := p.Post(context.Background(), req)
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("Post took %v", elapsed)
			}
			if res.Code != tt.code || res.Status != tt.status {
				t.Fatalf("result = %+v", res)
			}
			if n := ct.read.Load(); n != tt.want {
				t.Errorf("read %d body bytes, want exactly %d", n, tt.want)
			}
			if n := utf8.RuneCountInString(res.Message); n > 1000 {
				t.Errorf("message has %d characters", n)
			}
		})
	}
}

func TestPostErrorTextIsBounded(t *testing.T) {
	t.Parallel()
	// 3,000 two-byte characters, a NUL and an invalid byte: the stored text
	// must be valid UTF-8, NUL-free and at most 1,000 characters.
	body := "\x00\xff" + strings.Repeat("é", 3000)
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, body)
	})
	p, _ := newPoster(t)
	res := p.Post(context.Background(), request(srv.URL))
	if res.Code != activities.CodeHandlerFailed {
		t.Fatalf("result = %+v", res)
	}
	if !utf8.ValidString(res.Message) {
		t.Error("message is not valid UTF-8")
	}
	if strings.ContainsRune(res.Message, 0) {
		t.Error("message contains NUL")
	}
	if n := utf8.RuneCountInString(res.Message); n != 1000 {
		t.Errorf("message has %d characters, want 1000 (cut)", n)
	}
	if !strings.HasPrefix(res.Message, "HTTP 500 Internal Server Error: ") || !strings.HasSuffix(res.Message, "é…") {
		t.Errorf("message = %.60q…%q", res.Message, res.Message[len(res.Message)-10:])
	}
}

func TestPostConnectionRefused(t *testing.T) {
	t.Parallel()
	// Bound for the test, not listening: refused, and no other test can
	// take the port meanwhile.
	addr := testkit.ReservePort(t).Addr()
	p, _ := newPoster(t)
	res := p.Post(context.Background(), request("http://"+addr+"/"))
	if res.Code != activities.CodeSubscriberUnreachable || res.Status != 0 {
		t.Fatalf("result = %+v, want subscriber_unreachable", res)
	}
	if !strings.Contains(res.Message, "connection refused") {
		t.Errorf("message = %q", res.Message)
	}
}

func TestPostDNSFailure(t *testing.T) {
	t.Parallel()
	// A resolver that cannot reach any DNS server: the look-up fails without
	// leaving the process.
	g := loopbackGuard(t)
	g.Resolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in tests")
	}}
	p := &activities.Poster{Client: netguard.NewHTTPClient(g, netguard.ClientOptions{}), Signer: &fakeSigner{}}
	res := p.Post(context.Background(), request("http://subscriber.herald-test.invalid/hook"))
	if res.Code != activities.CodeSubscriberUnreachable {
		t.Fatalf("result = %+v, want subscriber_unreachable", res)
	}
	if !strings.Contains(res.Message, "DNS") {
		t.Errorf("message = %q", res.Message)
	}
}

func TestPostConnectionLost(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{false, true} {
		t.Run("reset="+strconv.FormatBool(reset), func(t *testing.T) {
			var hits atomic.Int32
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				_, _ = io.ReadAll(r.Body)
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				if tcp, ok := conn.(*net.TCPConn); ok && reset {
					_ = tcp.SetLinger(0) // close with RST
				}
				_ = conn.Close()
			})
			p, _ := newPoster(t)
			res := p.Post(context.Background(), request(srv.URL))
			if res.Code != activities.CodeConnectionLost || res.Status != 0 {
				t.Fatalf("result = %+v, want connection_lost", res)
			}
			if hits.Load() != 1 {
				t.Errorf("server hits = %d, want 1", hits.Load())
			}
		})
	}
}

func TestPostHandlerTimeout(t *testing.T) {
	// Serial: measures the client timeout (a bound in ms).
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		// The server notices a gone client only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	p, _ := newPoster(t)
	req := request(srv.URL)
	req.Timeout = 200 * time.Millisecond
	start := time.Now()
	res := p.Post(context.Background(), req)
	if res.Code != activities.CodeHandlerTimeout || !strings.Contains(res.Message, "no response within 200ms") {
		t.Fatalf("result = %+v, want handler_timeout after 200ms", res)
	}
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("Post took %v, want about the 200ms timeout", elapsed)
	}
	if res.Duration < 200*time.Millisecond {
		t.Errorf("Duration = %v", res.Duration)
	}
}

func TestPostEndpointForbidden(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := server(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	posters := map[string]*activities.Poster{
		"no allow-list": {Client: netguard.NewHTTPClient(netguard.New(nil), netguard.ClientOptions{}), Signer: &fakeSigner{}},
		"nil client":    {Signer: &fakeSigner{}},
	}
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	for name, p := range posters {
		for _, url := range []string{srv.URL, "http://[::1]:" + strconv.Itoa(port) + "/", "http://[::ffff:127.0.0.1]:" + strconv.Itoa(port) + "/"} {
			res := p.Post(context.Background(), request(url))
			if res.Code != activities.CodeEndpointForbidden || !strings.Contains(res.Message, "loopback") {
				t.Errorf("%s %s: result = %+v, want endpoint_forbidden (loopback)", name, url, res)
			}
			if !activities.IsTerminal(res.Code) {
				t.Errorf("%s is not terminal", res.Code)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server was hit %d times", n)
	}
}

func TestPostInvalidURL(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"ftp://example.test/x", "://nope", "/relative/path", "http:///no-host", "", "http://[::1"} {
		signer := &fakeSigner{}
		p := &activities.Poster{Client: netguard.NewHTTPClient(netguard.New(nil), netguard.ClientOptions{}), Signer: signer}
		res := p.Post(context.Background(), request(url))
		if res.Code != activities.CodeEndpointForbidden || !strings.Contains(res.Message, "invalid endpoint URL") {
			t.Errorf("Post(%q) = %+v, want endpoint_forbidden", url, res)
		}
		if len(signer.calls()) != 0 {
			t.Errorf("Post(%q) signed a token", url)
		}
	}
}

func TestPostNotSentIsNotCounted(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := server(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	client := netguard.NewHTTPClient(loopbackGuard(t), netguard.ClientOptions{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		p    *activities.Poster
		ctx  context.Context
		msg  string
	}{
		{"signer fails", &activities.Poster{Client: client, Signer: &fakeSigner{err: errors.New("no key")}},
			context.Background(), "sign delivery token: no key"},
		{"no signer", &activities.Poster{Client: client}, context.Background(), "no token signer"},
		{"caller cancelled", &activities.Poster{Client: client, Signer: &fakeSigner{}}, cancelled, "attempt abandoned"},
	}
	for _, tt := range tests {
		res := tt.p.Post(tt.ctx, request(srv.URL))
		if res.Code != activities.CodeSubscriberUnreachable || !strings.Contains(res.Message, tt.msg) {
			t.Errorf("%s: result = %+v, want subscriber_unreachable with %q", tt.name, res, tt.msg)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server was hit %d times", n)
	}
}

func TestPostCallerCancelsMidRequest(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		close(started)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	p, _ := newPoster(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	res := p.Post(ctx, request(srv.URL))
	if res.Code != activities.CodeSubscriberUnreachable || !strings.Contains(res.Message, "attempt abandoned") {
		t.Fatalf("result = %+v, want an abandoned attempt", res)
	}
}

func TestPostTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)

	// A client that does not trust the server's certificate connects but
	// fails the handshake: the endpoint is reachable yet misconfigured.
	p, _ := newPoster(t)
	res := p.Post(context.Background(), request(srv.URL))
	if res.Code != activities.CodeHandlerFailed || !strings.Contains(res.Message, "TLS handshake failed") {
		t.Fatalf("untrusted certificate: result = %+v, want handler_failed (TLS)", res)
	}

	trusting := netguard.NewHTTPClient(loopbackGuard(t), netguard.ClientOptions{
		TLSClientConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig,
	})
	p.Client = trusting
	if res := p.Post(context.Background(), request(srv.URL)); !res.Delivered() {
		t.Fatalf("trusted certificate: result = %+v, want delivered", res)
	}
}

package api_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herald/api"
	"herald/config"
	"herald/internal/testkit/system"
	"herald/publish"
	"herald/store"
)

// guess is a well-formed token that no app has.
func guess(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return api.TokenPrefix + hex.EncodeToString(b) + "_" + strings.Repeat("A", 43)
}

// invoice is a valid billing.invoice.paid@1 event.
func invoice(subject string) string {
	return `{"type":"billing.invoice.paid","version":1,"subject":"` + subject + `","data":{"invoiceId":"` + subject + `"}}`
}

// serve sends one request to h from addr, in process.
func serve(h http.Handler, addr, token, contentType string, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, api.EventsPath, body)
	r.RemoteAddr = addr
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	r.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// countingLookup finds tokens in st, counting the queries.
func countingLookup(st *store.Store, n *atomic.Int64) func(context.Context, string) (store.TokenCredential, error) {
	return func(ctx context.Context, id string) (store.TokenCredential, error) {
		n.Add(1)
		return st.LiveAPIToken(ctx, id)
	}
}

// TestFailedAuthenticationThrottled guesses 300 well-formed tokens from one
// address: after the burst each guess is answered 429 with Retry-After and
// no database query; other addresses are not held back, and a token the
// worker has seen live lately still works from the throttled address.
func TestFailedAuthenticationThrottled(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	h := api.New(s.store, api.Options{})
	var queries atomic.Int64
	api.SetTokenLookup(h, countingLookup(s.store, &queries))
	const attacker = "192.0.2.7:40000"

	// The app's token, seen once (cached): 415 is an authenticated answer.
	if w := serve(h, attacker, token, "text/plain", strings.NewReader("x")); w.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("valid token: status %d: %s", w.Code, w.Body)
	}
	start := time.Now()
	var unauthorized, throttled int
	for range 300 {
		w := serve(h, attacker, guess(t), "application/json", strings.NewReader(person("", "p", 1)))
		switch w.Code {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			throttled++
			checkAnswer(t, http.MethodPost, api.EventsPath, w.Code, w.Header().Get("Content-Type"), w.Body.Bytes())
			if !strings.Contains(w.Body.String(), `"code":"auth_throttled"`) {
				t.Fatalf("429 body %s", w.Body)
			}
			if sec, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || sec < 1 {
				t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
			}
		default:
			t.Fatalf("guess: status %d: %s", w.Code, w.Body)
		}
	}
	elapsed := time.Since(start)
	// One lookup for the valid token, then the burst and what refilled.
	allowed := int64(1 + api.DefaultAuthFailureBurst + int(elapsed/api.DefaultAuthFailureRefill) + 1)
	if q := queries.Load(); q > allowed {
		t.Fatalf("%d token queries for 300 guesses in %v, want at most %d", q, elapsed, allowed)
	}
	if throttled < 280 || unauthorized < api.DefaultAuthFailureBurst {
		t.Fatalf("%d answered 401, %d answered 429", unauthorized, throttled)
	}
	t.Logf("300 guesses in %v: %d token queries, %d x 401, %d x 429", elapsed, queries.Load(), unauthorized, throttled)

	// The token seen live is still taken from the throttled address.
	before := queries.Load()
	for range 20 {
		if w := serve(h, attacker, token, "text/plain", strings.NewReader("x")); w.Code != http.StatusUnsupportedMediaType {
			t.Fatalf("valid token from the throttled address: status %d: %s", w.Code, w.Body)
		}
	}
	if q := queries.Load() - before; q != 0 {
		t.Fatalf("%d queries for a cached token", q)
	}
	// Another address is not held back; one of the attacker's /64 is.
	if w := serve(h, "198.51.100.1:1", guess(t), "application/json", strings.NewReader("{}")); w.Code != http.StatusUnauthorized {
		t.Fatalf("other address: status %d", w.Code)
	}
	var v6 *httptest.ResponseRecorder
	for i := range api.DefaultAuthFailureBurst + 1 {
		v6 = serve(h, fmt.Sprintf("[2001:db8:1:2::%x]:1", i+1), "", "application/json", strings.NewReader("{}"))
	}
	if v6.Code != http.StatusTooManyRequests {
		t.Fatalf("addresses of one /64: status %d", v6.Code)
	}
}

// TestTokenLookupCached: a token's lookup, found or not, is reused within
// the cache TTL, keyed by the token's hash.
func TestTokenLookupCached(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	h := api.New(s.store, api.Options{AuthFailureBurst: 1000})
	var queries atomic.Int64
	api.SetTokenLookup(h, countingLookup(s.store, &queries))
	for range 50 {
		if w := serve(h, "192.0.2.1:1", token, "text/plain", strings.NewReader("x")); w.Code != http.StatusUnsupportedMediaType {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	bad := guess(t)
	for range 50 {
		if w := serve(h, "192.0.2.1:1", bad, "text/plain", strings.NewReader("x")); w.Code != http.StatusUnauthorized {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	if q := queries.Load(); q != 2 {
		t.Fatalf("%d token queries for 100 requests with 2 tokens, want 2", q)
	}
	// Without a cache each request looks its token up.
	h = api.New(s.store, api.Options{TokenCacheTTL: -1})
	queries.Store(0)
	api.SetTokenLookup(h, countingLookup(s.store, &queries))
	for range 5 {
		serve(h, "192.0.2.1:1", token, "text/plain", strings.NewReader("x"))
	}
	if q := queries.Load(); q != 5 {
		t.Fatalf("%d token queries without a cache, want 5", q)
	}
}

// TestOversizedObjectRefusedEarly sends one 16 MiB event object (and an
// array holding one): each is refused 413 having read and allocated about
// the object limit, not the body. No database is needed: the token lookup
// is a stand-in.
func TestOversizedObjectRefusedEarly(t *testing.T) {
	id, token, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(nil, api.Options{})
	api.SetTokenLookup(h, func(_ context.Context, got string) (store.TokenCredential, error) {
		if got != id {
			return store.TokenCredential{}, store.ErrNotFound
		}
		return store.TokenCredential{ID: id, App: "contacts", Name: "crm", Hash: hash}, nil
	})
	const size = 16 << 20
	data := strings.Repeat("x", size)
	for name, body := range map[string]string{
		"object": `{"type":"contacts.person.updated","version":1,"subject":"p","data":"` + data + `"}`,
		"array":  `[{"type":"contacts.person.updated","version":1,"subject":"p","data":"` + data + `"}]`,
	} {
		// Cut at the byte limit (16 MiB): a body the old reader read whole.
		reader := &countingBody{r: strings.NewReader(body[:size])}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := serve(h, "192.0.2.1:1", token, "application/json", reader)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if alloc > 4<<20 {
			t.Errorf("%s: %d bytes allocated to refuse a %d-byte body, want under 4 MiB", name, alloc, size)
		}
		if reader.n > 2*api.MaxObjectBytes {
			t.Errorf("%s: %d bytes read of the body, want about %d", name, reader.n, api.MaxObjectBytes)
		}
		if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), publish.CodePayloadTooLarge) {
			t.Fatalf("%s: status %d: %s", name, w.Code, w.Body)
		}
		checkAnswer(t, http.MethodPost, api.EventsPath, w.Code, w.Header().Get("Content-Type"), w.Body.Bytes())
		t.Logf("%s: 413 after reading %d bytes, %d bytes allocated", name, reader.n, alloc)
	}
}

type countingBody struct {
	r io.Reader
	n int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestTokenConcurrencyCapped holds a token's requests in flight (their
// bodies never end) up to the cap: one more is answered 429 with
// Retry-After: 1, another token of the same app is not held back, and once
// the held requests end the token publishes again.
func TestTokenConcurrencyCapped(t *testing.T) {
	t.Parallel()
	const limit = 3
	// A pool of limit+2: the app may have limit+1 requests in flight
	// (TestAppConcurrencyCapped), so another of its tokens has room.
	s := startServer(t, system.Config(func(c *config.Worker) { c.APITokenConcurrency, c.APIDBConns = limit, limit+2 }))
	token := s.token("contacts", "crm")
	other := s.token("contacts", "other")

	pipes, wg := holdRequests(t, s, []string{token}, limit)
	// The held requests reach the handler in their own time: probe until
	// the token is busy (415 while a slot is free).
	deadline := time.Now().Add(10 * time.Second)
	var busy answer
	for {
		busy = s.post(token, "text/plain", "x")
		if busy.status == http.StatusTooManyRequests || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantProblem(t, busy, http.StatusTooManyRequests, api.CodeTokenBusy)
	if got := busy.header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
	wantAccepted(t, s.post(other, "application/json", person("", "person-1", 1)), 1)

	for _, pw := range pipes {
		_ = pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	wg.Wait()
	// The server sees the held requests end in its own time too.
	deadline = time.Now().Add(10 * time.Second)
	for s.post(token, "text/plain", "x").status == http.StatusTooManyRequests {
		if time.Now().After(deadline) {
			t.Fatal("the token stayed busy after its requests ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantAccepted(t, s.post(token, "application/json", person("", "person-2", 2)), 1)
}

// TestAppConcurrencyCapped holds an app's requests in flight (their bodies
// never end), through two of its tokens, up to the app's cap (one less than
// the API's pool of 4): one more, through a third token, waits api.AppWait
// for a slot and is answered 429 app_busy with Retry-After: 1, on the
// operations API too; another app and an operator token are not held back;
// a request that waits while a slot frees takes it, and once the held
// requests end the app publishes again.
func TestAppConcurrencyCapped(t *testing.T) {
	t.Parallel()
	const conns = 4
	s := startServer(t, system.Config(func(c *config.Worker) { c.APIDBConns = conns }))
	tokens := []string{s.token("contacts", "crm"), s.token("contacts", "crm-2")}
	third := s.token("contacts", "crm-3")
	billing := s.token("billing", "ledger")
	ops := s.operatorToken("ops")

	pipes, wg := holdRequests(t, s, tokens, conns-1)
	deadline := time.Now().Add(10 * time.Second)
	var busy answer
	for {
		busy = s.post(third, "text/plain", "x")
		if busy.status == http.StatusTooManyRequests || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantProblem(t, busy, http.StatusTooManyRequests, api.CodeAppBusy)
	if got := busy.header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
	wantProblem(t, s.get("/v1/ops/apps", third), http.StatusTooManyRequests, api.CodeAppBusy)
	wantAccepted(t, s.post(billing, "application/json", invoice("invoice-1")), 1)
	wantStatus(t, s.get("/v1/ops/apps", ops), http.StatusOK)

	// A request over the cap waits for a slot (api.AppWait): one that
	// frees meanwhile takes it.
	waited := make(chan answer, 1)
	began := time.Now()
	go func() { waited <- s.post(third, "application/json", person("", "person-1", 1)) }()
	time.Sleep(api.AppWait / 4)
	_ = pipes[0].CloseWithError(io.ErrUnexpectedEOF)
	wantAccepted(t, <-waited, 1)
	if took := time.Since(began); took < api.AppWait/4 {
		t.Fatalf("the request over the cap was answered in %v, before a slot freed", took)
	}

	for _, pw := range pipes {
		_ = pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	wg.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for s.post(third, "text/plain", "x").status == http.StatusTooManyRequests {
		if time.Now().After(deadline) {
			t.Fatal("the app stayed busy after its requests ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantAccepted(t, s.post(third, "application/json", person("", "person-2", 2)), 1)
}

// TestAPIOwnPool: the API queries through its own pool of
// HERALD_API_DB_CONNS connections; with all of them taken the workers'
// pool still hands out connections.
func TestAPIOwnPool(t *testing.T) {
	t.Parallel()
	s := startServer(t, system.Config(func(c *config.Worker) { c.APIDBConns = 2 }))
	apiStore := s.Svc.APIStore()
	if apiStore == nil || apiStore.Pool == s.store.Pool {
		t.Fatal("the API uses the workers' pool")
	}
	if got := apiStore.Pool.Config().MaxConns; got != 2 {
		t.Fatalf("API pool MaxConns %d, want 2", got)
	}
	t.Logf("started")
	token := s.token("contacts", "crm")
	wantAccepted(t, s.post(token, "application/json", person("", "person-1", 1)), 1)
	t.Logf("published")
	if apiStore.Pool.Stat().TotalConns() == 0 {
		t.Fatal("the API's pool served no connection")
	}
	ctx := t.Context()
	for range 2 {
		c, err := apiStore.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if c, err := apiStore.Pool.Acquire(short); err == nil {
		c.Release()
		t.Fatal("the API's pool handed out a third connection")
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	c, err := s.store.Pool.Acquire(wctx)
	if err != nil {
		t.Fatalf("workers' pool with the API's taken: %v", err)
	}
	c.Release()
	t.Logf("test body done")
	// The default size.
	if config.DefaultAPIDBConns != 4 {
		t.Fatalf("default API pool %d", config.DefaultAPIDBConns)
	}
}

// holdRequests starts n publishing requests, through tokens in turn, whose
// bodies never end until their pipes are closed: each holds its slots in
// the handler. wg waits for their answers.
func holdRequests(t *testing.T, s *server, tokens []string, n int) ([]*io.PipeWriter, *sync.WaitGroup) {
	t.Helper()
	wg := &sync.WaitGroup{}
	pipes := make([]*io.PipeWriter, n)
	for i := range pipes {
		pr, pw := io.Pipe()
		pipes[i] = pw
		req, err := http.NewRequest(http.MethodPost, s.base+api.EventsPath, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokens[i%len(tokens)])
		req.Header.Set("Content-Type", "application/json")
		wg.Go(func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		_, _ = fmt.Fprint(pw, `{"type":`) // headers and a start: the request is in the handler
	}
	return pipes, wg
}

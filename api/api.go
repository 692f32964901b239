// Package api is Herald's publishing API: POST /v1/events, one event or a
// batch (a JSON array or NDJSON), authenticated with per-app bearer tokens
// (`starter apps token create`). It validates and records events with the
// same publisher as `starter publish`, and answers refusals as RFC 9457
// problem details carrying the publisher's rejection codes (docs/design.md#publishing).
// The worker serves it on HERALD_API_ADDR; see api/openapi.yaml.
package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/zap"

	"herald/publish"
	"herald/store"
)

// EventsPath is the one path the API serves.
const EventsPath = "/v1/events"

// Limits of a request.
const (
	// MaxBatchEvents is the most events one request may carry.
	MaxBatchEvents = 1000
	// DefaultMaxBodyBytes caps a request body: 16 MiB.
	DefaultMaxBodyBytes = 16 << 20
)

// Options configure a Handler. The zero value gives the defaults.
type Options struct {
	// MaxBodyBytes caps a request body; zero or less means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxBatchEvents caps the events of one request; zero or less means
	// MaxBatchEvents.
	MaxBatchEvents int
	// Logger reports failures; nil logs nothing. Tokens and event data are
	// never logged.
	Logger *zap.Logger
	// Rejected, when set, is told of every refused event and refused
	// request (metrics): the token's app ("" when the request is not
	// authenticated or the app was removed) and the code.
	Rejected func(app, code string)
	// TokenConcurrency caps the requests in flight per token; zero or less
	// means DefaultTokenConcurrency.
	TokenConcurrency int
	// AppConcurrency caps the requests in flight per app, all its tokens
	// together (publishing, the operations API and the console); zero or
	// less means one less than the pool's connections (at least 1), so
	// that one app never holds every connection.
	AppConcurrency int
	// TokenCacheTTL is how long a token lookup is reused; zero means
	// DefaultTokenCacheTTL, less than zero no cache.
	TokenCacheTTL time.Duration
	// AuthFailureBurst and AuthFailureRefill size the failed
	// authentications a client address may make: a burst, then one per
	// refill interval. Zero or less means the defaults.
	AuthFailureBurst  int
	AuthFailureRefill time.Duration
	// Temporal lists running keys (GET /v1/ops/keys, in Namespace) and
	// runs the keys' Updates for the operations API; without it those
	// answer 500.
	Temporal  TemporalClient
	Namespace string
	// ConsoleSessionKey signs the console's sessions and CSRF fields; the
	// same on every replica (the service derives it from
	// HERALD_SECRET_KEY). Empty: a random key, so sessions end with the
	// process.
	ConsoleSessionKey []byte
	// TemporalUIURL is the Temporal UI's base URL the console links keys'
	// workflows to (HERALD_TEMPORAL_UI_URL); empty: no links.
	TemporalUIURL string
}

// Handler serves the publishing API.
type Handler struct {
	store     *store.Store
	publisher *publish.Publisher
	maxBody   int64
	maxEvents int
	log       *zap.Logger
	rejected  func(app, code string)

	// lookup finds a live token by id (the store's; tests count calls).
	lookup   func(ctx context.Context, id string) (store.TokenCredential, error)
	tokens   *tokenCache
	failures *failureLimiter
	inFlight *inFlight
	// apps holds the requests in flight per app, all its tokens
	// together (operator tokens have no app and are not counted).
	apps *appSlots
	now  func() time.Time

	temporal  TemporalClient
	namespace string
	// replayBudget is how long a replay window may begin keys (replayBudget).
	replayBudget time.Duration

	// readers caps the operations API's reads and replays and the
	// console's pages in flight, all tokens together, at one less than the
	// API's pool: however slow they are, publishing keeps a connection.
	readers chan struct{}

	console *console
}

// New returns the API handler, publishing to st.
func New(st *store.Store, opts Options) *Handler {
	h := &Handler{store: st, maxBody: opts.MaxBodyBytes, maxEvents: opts.MaxBatchEvents, log: opts.Logger, rejected: opts.Rejected,
		temporal: opts.Temporal, namespace: opts.Namespace}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.maxEvents <= 0 {
		h.maxEvents = MaxBatchEvents
	}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	if st != nil {
		h.lookup = st.LiveAPIToken
	}
	ttl, burst, refill, conc := opts.TokenCacheTTL, opts.AuthFailureBurst, opts.AuthFailureRefill, opts.TokenConcurrency
	if ttl == 0 {
		ttl = DefaultTokenCacheTTL
	}
	if burst <= 0 {
		burst = DefaultAuthFailureBurst
	}
	if refill <= 0 {
		refill = DefaultAuthFailureRefill
	}
	if conc <= 0 {
		conc = DefaultTokenConcurrency
	}
	h.tokens, h.failures, h.inFlight, h.now = newTokenCache(ttl), newFailureLimiter(burst, refill), newInFlight(conc), time.Now
	h.replayBudget = replayBudget
	// All but one of the pool's connections: however slow the reads, or
	// however long one app's requests wait for a lock, one is left for
	// the rest.
	allButOne := 1
	if st != nil && st.Pool != nil {
		allButOne = max(1, int(st.Pool.Config().MaxConns)-1)
	}
	h.readers = make(chan struct{}, allButOne)
	appConc := opts.AppConcurrency
	if appConc <= 0 {
		appConc = allButOne
	}
	h.apps = newAppSlots(appConc)
	h.publisher = publish.New(st, publish.Options{Via: publish.ViaHTTP, Logger: h.log, Rejected: opts.Rejected})
	h.console = newConsole(h, opts.ConsoleSessionKey, opts.TemporalUIURL)
	return h
}

// ServeHTTP answers POST /v1/events, the operations API under /v1/ops/
// and the console's pages under /console; anything else is a problem (404,
// 405).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == ConsolePrefix || strings.HasPrefix(r.URL.Path, ConsolePrefix+"/") {
		h.console.serve(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, OpsPrefix) {
		if want := opsMethod(r.URL.EscapedPath()); r.Method != want {
			w.Header().Set("Allow", want)
			writeProblem(w, newProblem(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "this path of the operations API accepts "+want+" only"))
			return
		}
		cred, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		if p, busy := h.admit(r.Context(), cred, false); busy {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, p)
			return
		}
		defer h.leave(cred, false)
		h.serveOps(w, r, cred)
		return
	}
	if r.URL.Path != EventsPath {
		writeProblem(w, newProblem(http.StatusNotFound, CodeNotFound, "the API serves POST "+EventsPath+", the operations API under "+OpsPrefix+" and the console under "+ConsolePrefix+" only"))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, newProblem(http.StatusMethodNotAllowed, CodeMethodNotAllowed, EventsPath+" accepts POST only"))
		return
	}
	cred, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	if cred.Operator {
		h.reject("", true, CodeForbidden)
		writeProblem(w, newProblem(http.StatusForbidden, CodeForbidden,
			"an operator token publishes nothing: publish with an app's token (starter apps token create APP)"))
		return
	}
	if p, busy := h.admit(r.Context(), cred, true); busy {
		w.Header().Set("Retry-After", "1")
		h.reject(cred.App, cred.AppRemoved, p.Code)
		writeProblem(w, p)
		return
	}
	defer h.leave(cred, true)
	r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
	items, batch, err := readEvents(r, h.maxEvents)
	var bad *errBody
	if errors.As(err, &bad) {
		h.reject(cred.App, cred.AppRemoved, bad.code)
		writeProblem(w, newProblem(bad.status, bad.code, bad.msg))
		return
	}
	if err != nil {
		h.fail(w, "read request", err)
		return
	}
	// A publisher's W3C traceparent header makes each event's publish span a
	// child of the publisher's span (only while tracing is on: the default
	// global propagator reads nothing).
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	accepted, problems, err := h.publish(ctx, cred, items)
	if store.IsLockTimeout(err) {
		h.reject(cred.App, cred.AppRemoved, CodeLockTimeout)
	}
	if err != nil {
		h.fail(w, "publish", err)
		return
	}
	if len(problems) == 0 {
		writeJSON(w, http.StatusAccepted, AcceptedResponse{Accepted: accepted})
		return
	}
	writeProblem(w, batchProblem(batch, len(items), accepted, problems))
}

// admit takes one of cred's token's slots and, with app, one of its app's
// (takeApp), or answers the problem of the first that has none (busy). A
// request admitted calls leave, with the same app, when it is answered.
func (h *Handler) admit(ctx context.Context, cred store.TokenCredential, app bool) (p Problem, busy bool) {
	if !h.inFlight.acquire(cred.ID) {
		return newProblem(http.StatusTooManyRequests, CodeTokenBusy,
			fmt.Sprintf("the token has %d requests in flight already, its limit; retry when one has been answered", h.inFlight.max)), true
	}
	if app {
		if p, busy := h.takeApp(ctx, cred); busy {
			h.inFlight.release(cred.ID)
			return p, true
		}
	}
	return Problem{}, false
}

// leave gives back what admit took for cred.
func (h *Handler) leave(cred store.TokenCredential, app bool) {
	if app {
		h.leaveApp(cred)
	}
	h.inFlight.release(cred.ID)
}

// takeApp takes one of the slots of an app token's app, for a request that
// uses the API's connections (a publish, an operations read, a console
// page), waiting up to AppWait for one: a burst of the app's requests
// queues here, holding no connection. A key's action, which waits for its
// workflow, takes none. Operator tokens have no app.
func (h *Handler) takeApp(ctx context.Context, cred store.TokenCredential) (p Problem, busy bool) {
	if cred.Operator || h.apps.acquire(ctx, cred.App, AppWait) {
		return Problem{}, false
	}
	return newProblem(http.StatusTooManyRequests, CodeAppBusy,
		fmt.Sprintf("app %s had %d requests in flight on this worker for %v, all its tokens together, its limit; retry when one has been answered",
			cred.App, h.apps.max, AppWait)), true
}

// leaveApp gives back the slot takeApp took.
func (h *Handler) leaveApp(cred store.TokenCredential) {
	if !cred.Operator {
		h.apps.release(cred.App)
	}
}

// acquireReader waits for one of the readers' slots, or for ctx to end
// (false: the client went away).
func (h *Handler) acquireReader(ctx context.Context) bool {
	select {
	case h.readers <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// releaseReader gives a readers' slot back.
func (h *Handler) releaseReader() { <-h.readers }

// readerKey is the context key of the function that gives back the
// request's readers' slot (at most once).
type readerKey struct{}

// readerDone gives back the request's readers' slot, and its app's slot
// (takeApp), before the request ends, when what is left of it reads
// nothing (a replay's signals): the slots guard the API's connections, and
// a replay may signal for most of the write timeout.
func readerDone(ctx context.Context) {
	if release, ok := ctx.Value(readerKey{}).(func()); ok {
		release()
	}
}

// authenticate finds the live token of the request's bearer credentials, or
// answers 401 with a WWW-Authenticate challenge (429 when throttled).
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (store.TokenCredential, bool) {
	token, given := bearer(r.Header.Get("Authorization"))
	cred, refused, err := h.credential(r, token, given)
	if err != nil {
		h.fail(w, "authenticate", err)
		return store.TokenCredential{}, false
	}
	if refused != nil {
		if refused.retryAfter > 0 {
			w.Header().Set("Retry-After", retryAfter(refused.retryAfter))
		} else {
			challenge := `Bearer realm="herald"`
			if given {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
		}
		h.reject("", true, refused.code)
		writeProblem(w, newProblem(refused.status, refused.code, refused.detail))
		return store.TokenCredential{}, false
	}
	return cred, true
}

// authRefusal is why a presented token was not taken.
type authRefusal struct {
	status int
	code   string
	detail string
	// retryAfter is set when the client address is throttled.
	retryAfter time.Duration
}

// credential finds the live token token (given: one was presented). A
// token seen live within the cache TTL is taken without a query; any other
// attempt spends one of the client address's failures first (refunded when
// it succeeds), and an address with none left is refused without a query.
func (h *Handler) credential(r *http.Request, token string, given bool) (store.TokenCredential, *authRefusal, error) {
	unauthorized := func(detail string) (store.TokenCredential, *authRefusal, error) {
		return store.TokenCredential{}, &authRefusal{status: http.StatusUnauthorized, code: CodeUnauthorized, detail: detail}, nil
	}
	now := h.now()
	key := sha256.Sum256([]byte(token))
	hit, cachedHit := h.tokens.get(key, now)
	id, wellFormed := tokenID(token)
	if given && wellFormed && cachedHit && hit.found {
		// Only a token of Herald's form is taken from the cache: its
		// entries are keyed by what was presented.
		return hit.cred, nil, nil
	}
	client := clientKey(r)
	if wait := h.failures.take(client, now); wait > 0 {
		return store.TokenCredential{}, &authRefusal{status: http.StatusTooManyRequests, code: CodeAuthThrottled,
			detail: "too many failed authentications from this address; retry after the Retry-After seconds", retryAfter: wait}, nil
	}
	if !given {
		return unauthorized("send an app's token as Authorization: Bearer <token> (starter apps token create APP)")
	}
	if !wellFormed {
		return unauthorized("the bearer token is not a Herald API token")
	}
	if cachedHit {
		return unauthorized("the bearer token is unknown or revoked")
	}
	cred, err := h.lookup(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !tokenMatches(token, cred.Hash)) {
		h.tokens.put(key, store.TokenCredential{}, false, now)
		return unauthorized("the bearer token is unknown or revoked")
	}
	h.failures.refund(client, now)
	if err != nil {
		return store.TokenCredential{}, nil, err
	}
	h.tokens.put(key, cred, true, now)
	return cred, nil, nil
}

// publish records the readable events of items as the token's app, and
// returns the accepted ones and the refused ones, each with its position.
func (h *Handler) publish(ctx context.Context, cred store.TokenCredential, items []item) ([]Accepted, []EventProblem, error) {
	var problems []EventProblem
	reject := func(i int, rej *publish.Rejection) {
		problems = append(problems, EventProblem{Index: i, Line: items[i].line, Code: rej.Code,
			Status: statusOf(rej.Code), Detail: rej.Message, Errors: rej.Errors})
	}
	reqs := make([]publish.Request, 0, len(items))
	index := make([]int, 0, len(items))
	for i, it := range items {
		req := it.req
		req.Via, req.Token = publish.ViaHTTP, cred.Name
		rej := it.rej
		if rej == nil && cred.AppRemoved {
			rej = &publish.Rejection{Code: publish.CodeUnknownApp,
				Message: fmt.Sprintf("app %q, whose token this is, was removed", cred.App)}
		}
		if rej == nil && req.App != "" && req.App != cred.App {
			rej = &publish.Rejection{Code: publish.CodeTypeNotOwned,
				Message: fmt.Sprintf("the token belongs to app %q, which may not publish as app %q", cred.App, req.App)}
		}
		if rej != nil {
			reject(i, rej)
			h.record(ctx, cred, req, rej)
			continue
		}
		req.App = cred.App
		reqs = append(reqs, req)
		index = append(index, i)
	}
	outs, err := h.publisher.PublishBatch(ctx, reqs)
	if err != nil {
		return nil, nil, err
	}
	var accepted []Accepted
	for j, o := range outs {
		if o.Rejection != nil {
			reject(index[j], o.Rejection)
			continue
		}
		accepted = append(accepted, Accepted{Index: index[j], ID: o.Result.ID, Seq: o.Result.Seq, Duplicate: o.Result.Duplicate})
	}
	sortProblems(problems)
	return accepted, problems, nil
}

// record stores a rejection the publisher did not see (an unreadable event,
// another app's), so that `starter status` lists it like any other. It is
// recorded under the token's own app, whatever app the request names: one
// token must not fill another app's list of rejections.
func (h *Handler) record(ctx context.Context, cred store.TokenCredential, req publish.Request, rej *publish.Rejection) {
	h.reject(cred.App, cred.AppRemoved || rej.Code == publish.CodeUnknownApp, rej.Code)
	err := h.store.RecordRejection(ctx, store.Rejection{ID: req.ID, SourceApp: cred.App, Type: req.Type, Version: req.Version,
		Subject: req.Subject, Code: rej.Code, Reason: rej.Message, Via: publish.ViaHTTP, Token: cred.Name})
	if err != nil && !errors.Is(err, context.Canceled) {
		h.log.Warn("record rejection", zap.String("code", rej.Code), zap.Error(err))
	}
}

// reject counts a refusal under the token's app, which the token store
// vouches for (a request's own app field might be anything), or under no
// app when there is no live one.
func (h *Handler) reject(app string, noApp bool, code string) {
	if h.rejected == nil {
		return
	}
	if noApp {
		app = ""
	}
	h.rejected(app, code)
}

// sortProblems orders problems by position (insertion sort: they come in
// two runs that are each sorted already).
func sortProblems(ps []EventProblem) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Index < ps[j-1].Index; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// batchProblem is the answer to a request with refused events: a single
// event's own problem, or for a batch one problem listing each refused event
// (and the accepted ones, which are recorded: a batch is settled per event).
// Its status and code are the events' own when they all agree, else 422 and
// events_rejected.
func batchProblem(batch bool, total int, accepted []Accepted, problems []EventProblem) Problem {
	first := problems[0]
	status, code := first.Status, first.Code
	for _, p := range problems[1:] {
		if p.Status != status {
			status = http.StatusUnprocessableEntity
		}
		if p.Code != code {
			code = CodeEventsRejected
		}
	}
	p := newProblem(status, code, first.Detail)
	p.Events = problems
	p.Accepted = accepted
	if !batch {
		p.Errors = first.Errors
		return p
	}
	p.Detail = fmt.Sprintf("%d of %d events refused, %d accepted; see events for each refusal", len(problems), total, len(accepted))
	return p
}

// fail answers 500 for a failure of Herald itself, logging it; a
// statement that gave up waiting for a lock (LockTimeout) is answered 503
// lock_timeout instead, without a log line: another transaction held the
// lock, most likely one of the same app's.
func (h *Handler) fail(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, context.Canceled) {
		return // the client went away
	}
	if store.IsLockTimeout(err) {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, newProblem(http.StatusServiceUnavailable, CodeLockTimeout,
			fmt.Sprintf("waited %v for a lock another transaction holds (for a publish: the lock of an event's key, "+
				"held by a transaction that published a key of the same type and version, as an open PublishTx does until it ends) "+
				"and gave up: no event of the request was accepted and nothing was changed; send the request again", LockTimeout)))
		return
	}
	h.log.Error("api: "+what, zap.Error(err))
	writeProblem(w, newProblem(http.StatusInternalServerError, CodeInternal, "Herald failed to handle the request; try again"))
}

// Server timeouts: a client must send its headers promptly and its body
// within ReadTimeout, however slowly it trickles.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 60 * time.Second
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 16 << 10
)

// NewServer returns an http.Server for h with the API's timeouts.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}
